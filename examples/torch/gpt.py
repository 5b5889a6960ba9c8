"""A small byte-level GPT in PyTorch and its data, shared by examples/torch/train_gpt.py and bench/peers.

The shape follows examples/models/tiny.yaml (2 blocks, width 64, 4 heads, context 64, vocab 256), with an
untied output layer: 136,960 parameters, as xdc's built-in model of that file, trained on the same corpus.
The initialisation and arithmetic are PyTorch's own, not bit-compatible with xdc's C model.

Data: the corpus's bytes are the tokens (a directory is read as xdc's loader reads one: its regular
files in name order, without ``*.dat``, ``*.u8``, dot files and symbolic links); the last
``val_fraction`` of them validate. Every training batch is drawn from a generator seeded with (seed,
rank, step), so a run is reproducible and each member of a data-parallel run reads its own sequences.
"""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a 4x MLP, each with a residual."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        # (B, T, C) -> (B, heads, T, C / heads)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers=2, width=64, heads=4, context=64, vocab=256):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # GPT-2's init: N(0, 0.02), residual projections scaled by 1/sqrt(2 * layers)
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets=None):
        """idx: (B, T) int64 tokens; returns logits (B, T, vocab) and the mean cross-entropy or None."""
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def read_corpus(path):
    """The bytes of a file, or of a directory's text files concatenated as model/model_data.c does."""
    if not os.path.isdir(path):
        with open(path, "rb") as f:
            return f.read()
    parts = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if name.startswith(".") or name.endswith((".dat", ".u8")) or os.path.islink(full) or not os.path.isfile(full):
            continue
        with open(full, "rb") as f:
            parts.append(f.read())
    return b"".join(parts)


class Corpus:
    """A corpus's bytes as tokens: (B, T) training batches by (rank, step), a fixed validation set."""

    def __init__(self, path, seq_len=64, val_fraction=0.1, seed=1337):
        data = torch.frombuffer(bytearray(read_corpus(path)), dtype=torch.uint8).long()
        if data.numel() < 16 * (seq_len + 1):
            raise ValueError("%s: %d bytes, too few for sequences of %d tokens" % (path, data.numel(), seq_len))
        split = int(data.numel() * (1.0 - val_fraction))
        self.train, self.val = data[:split], data[split:]
        self.seq_len = seq_len
        self.seed = seed

    def _take(self, data, starts):
        offsets = torch.arange(self.seq_len + 1)
        rows = data[starts[:, None] + offsets]  # (B, T + 1)
        return rows[:, :-1], rows[:, 1:]

    def batch(self, batch_size, rank, step):
        """The training batch of member `rank` at `step`: inputs and targets, each (batch_size, seq_len)."""
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + rank) * 1_000_003 + step)
        starts = torch.randint(0, self.train.numel() - self.seq_len - 1, (batch_size,), generator=g)
        return self._take(self.train, starts)

    @torch.no_grad()
    def val_loss(self, model, batches=8, batch_size=16):
        """Mean loss over the same `batches` validation batches on every call and every member."""
        g = torch.Generator().manual_seed(self.seed)
        was_training = model.training
        model.eval()
        total = 0.0
        for _ in range(batches):
            starts = torch.randint(0, self.val.numel() - self.seq_len - 1, (batch_size,), generator=g)
            x, y = self._take(self.val, starts)
            total += model(x, y)[1].item()
        model.train(was_training)
        return total / batches
