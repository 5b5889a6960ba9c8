"""train_gpt.py — the PyTorch GPT of gpt.py trained across regions with xdc.torch (docs/api.md, "PyTorch").

    pip install ./python            # in a venv with torch
    xdc launch -t examples/topology/demo-2region.yaml -c RUN.yaml --exec -- \\
        VENV/bin/python examples/torch/train_gpt.py [--steps 60] [--sync-every 10] [--fragments 1] [--ddp]

Every member builds the model from the same seed, trains on its own batches (Corpus.batch by global
rank) with AdamW, and either
  - DiLoCo (default): xdc.torch.DiLoCo, an outer round every --sync-every steps (with --fragments F, one
    fragment every sync_every / F steps), the run file's codec and outer optimizer; or
  - --ddp: torch DistributedDataParallel over a gloo group, its gradient all-reduce replaced by
    xdc.torch.ddp_hook (every step, through libxdc).
Global rank 0 prints the training loss as it goes and the validation loss at the start and the end; every
member prints its parameter hash at the start and the end (the same on every member) and its WAN bytes.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import GPT, Corpus  # noqa: E402

import xdc  # noqa: E402
import xdc.torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/usr/share/games/fortunes", help="corpus file or directory")
    ap.add_argument("--steps", type=int, default=60, help="inner steps of every member")
    ap.add_argument("--sync-every", type=int, default=10, help="DiLoCo: inner steps between outer rounds (H)")
    ap.add_argument("--fragments", type=int, default=1, help="DiLoCo: streaming fragments (F divides H)")
    ap.add_argument("--ddp", action="store_true", help="sync mode: DDP with xdc.torch.ddp_hook, no outer rounds")
    ap.add_argument("--batch", type=int, default=8, help="sequences per member per step")
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    ap.add_argument("--seed", type=int, default=1234, help="model initialisation, the same on every member")
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = Corpus(args.data)

    with xdc.Comm() as comm:
        rank = comm.rank
        torch.manual_seed(args.seed)
        model = GPT()
        say = print if rank == 0 else (lambda *a, **k: None)
        print("train_gpt: rank %d: start hash %s (region %s)" % (rank, xdc.torch.param_hash(model), comm.region_name),
              flush=True)
        val0 = data.val_loss(model)
        say("train_gpt: %d members of %d regions, %s, %d steps; val loss at start %.4f"
            % (comm.size, comm.num_regions, "DDP + xdc hook" if args.ddp else
               "DiLoCo H=%d F=%d" % (args.sync_every, args.fragments), args.steps, val0), flush=True)
        if args.ddp:
            xdc.torch.init_process_group(comm)
            net = torch.nn.parallel.DistributedDataParallel(model)
            net.register_comm_hook(*xdc.torch.ddp_hook(comm, net))
        else:
            net = model
        inner = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        diloco = None if args.ddp else xdc.torch.DiLoCo(comm, model, inner, args.sync_every, args.fragments)
        t0 = time.time()
        for step in range(1, args.steps + 1):
            x, y = data.batch(args.batch, rank, step)
            loss = net(x, y)[1]
            loss.backward()
            if diloco:
                diloco.step()
            else:
                inner.step()
            inner.zero_grad()
            if step % args.log_every == 0 or step == args.steps:
                say("train_gpt: step %4d  loss %.4f" % (step, loss.item()), flush=True)
        if diloco:
            diloco.flush()  # streaming: the fragments not synced at the last step
        val = data.val_loss(model)
        st = comm.stats()
        say("train_gpt: val loss %.4f -> %.4f in %.1f s" % (val0, val, time.time() - t0), flush=True)
        print("train_gpt: rank %d: end hash %s, %s, WAN bytes sent %d received %d (fp32 %d)"
              % (rank, xdc.torch.param_hash(model),
                 "%d outer rounds" % diloco.outer_rounds if diloco else "ddp", st["wan_tx_bytes"],
                 st["wan_rx_bytes"], st["wan_raw_bytes"]), flush=True)
        if args.ddp:
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
