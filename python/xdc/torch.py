"""xdc.torch: PyTorch training across regions on libxdc (docs/api.md, "PyTorch (xdc.torch)").

DiLoCo / streaming DiLoCo around any ``torch.nn.Module`` and inner optimizer::

    import xdc, xdc.torch
    comm = xdc.Comm()                                   # one member of the run (xdc launch --exec)
    torch.manual_seed(0); model = MyModel()             # the same seed on every member: the same start
    inner = torch.optim.AdamW(model.parameters())
    diloco = xdc.torch.DiLoCo(comm, model, inner, sync_every=50, fragments=1)
    for step in ...:
        loss = ...; loss.backward(); diloco.step(); inner.zero_grad()
    diloco.flush(); comm.finalize()

and a DDP communication hook for sync mode (``ddp_hook``), whose gradient average is libxdc's hierarchical
compressed all-reduce. CPU float32 tensors only: libxdc takes host memory (CUDA tensors are not supported
yet). The outer optimizer (Nesterov with the run file's ``diloco.outer_lr`` and ``diloco.outer_momentum``),
the codec (the run file's ``codec:``, or the link's) and its error feedback are the library's.
"""

import ctypes
import hashlib
import os

import torch
import torch.distributed

import xdc

# Tags: DiLoCo's fragments take OUTER_TAG, OUTER_TAG + 1, ...; the DDP hook's buckets DDP_TAG up to OUTER_TAG - 1.
DDP_TAG = 0
OUTER_TAG = 512


def param_hash(model):
    """A hex digest (16 characters) of the bytes of every parameter of model, in order: equal parameters on
    two members, equal hashes."""
    h = hashlib.sha256()
    for p in model.parameters():
        t = p.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    return h.hexdigest()[:16]


def check_same_start(comm, model, who):
    """Collective: param_hash(model), after checking with ``comm.check_same`` that every member of every region
    has the same; else xdc.Error XDC_STATUS_CORRUPT on every member, its message starting with `who`."""
    digest = param_hash(model)
    try:  # exact whatever the codec, through libxdc (TLS across regions)
        comm.check_same(int(digest, 16))
    except xdc.Error as e:
        raise xdc.Error(e.status, "%s: the members start from different parameters (build the model from the same "
                        "seed everywhere): %s" % (who, e.message)) from None
    return digest


def _split(params, fragments):
    """params (in model order) cut into `fragments` runs of consecutive parameters of about equal element
    counts (each at least one parameter)."""
    total = sum(p.numel() for p in params)
    out, cur, done = [], [], 0
    for i, p in enumerate(params):
        cur.append(p)
        done += p.numel()
        left_params, left_frags = len(params) - i - 1, fragments - len(out) - 1
        # close this fragment once it holds its share, or when the rest are needed one per fragment
        if left_frags > 0 and (done >= total * (len(out) + 1) / fragments or left_params == left_frags):
            out.append(cur)
            cur = []
    out.append(cur)
    return out


class DiLoCo:
    """DiLoCo (fragments=1) or streaming DiLoCo (fragments=F > 1) over model's parameters.

    ``step()`` runs ``inner_optimizer.step()``; every ``sync_every`` (H) steps each parameter has been
    through one outer round (``xdc.Comm.outer_round``): the pseudo-gradient (parameters at the last round
    minus now) averaged over every member of every region with the run's codec and error feedback, the
    outer Nesterov step, and the new global parameters written into the model, the same on every member.
    With F fragments the parameters are cut into F runs of consecutive parameters of about equal size, each
    on its own outer tag (``tag + f``), and one fragment is synced every H / F steps: fragment f at steps
    k * H + (f + 1) * H / F (step counted from 1). The rounds are blocking: nothing is overlapped with
    compute (each sync moves 1/F of the model, which is what fragments buy here).

    The members must start from the same parameters: build the model with the same seed everywhere (the
    wrapper does not broadcast). The constructor checks it (collective): ``initial_hash``, ``param_hash(model)``
    then, must be the same on every member (``Comm.check_same``), else xdc.Error XDC_STATUS_CORRUPT on every
    member.
    """

    def __init__(self, comm, model, inner_optimizer, sync_every, fragments=1, tag=OUTER_TAG):
        if sync_every < 1 or fragments < 1 or sync_every % fragments != 0:
            raise ValueError("xdc.torch.DiLoCo: sync_every %d, fragments %d: want sync_every >= 1 a multiple of "
                             "fragments >= 1" % (sync_every, fragments))
        params = list(model.parameters())
        if len(params) < fragments:
            raise ValueError("xdc.torch.DiLoCo: %d fragments of %d parameters" % (fragments, len(params)))
        self.comm, self.model, self.inner_optimizer = comm, model, inner_optimizer
        self.sync_every, self.fragments, self.tag = sync_every, fragments, tag
        self.fragment_params = _split(params, fragments)
        self.step_count = 0
        self.last_sync = [0] * fragments  # the step each fragment was last synced at
        self.outer_rounds = 0
        # an outer round cannot bring different starts together: each member's global starts as its own
        self.initial_hash = check_same_start(comm, model, "xdc.torch.DiLoCo")
        for f, frag in enumerate(self.fragment_params):
            comm.outer_init(tag + f, frag)  # checks every tensor: CPU, float32, contiguous

    def fragment_due(self, step):
        """The fragment synced after inner step `step` (counted from 1), or None."""
        every = self.sync_every // self.fragments
        return None if step % every else (step // every - 1) % self.fragments

    def sync(self, fragment):
        """One outer round of `fragment` now (collective: every member calls it at the same point)."""
        self.comm.outer_round(self.tag + fragment, self.fragment_params[fragment])
        self.last_sync[fragment] = self.step_count
        self.outer_rounds += 1

    def step(self):
        """inner_optimizer.step(), then the outer round that is due; returns the fragment synced, or None."""
        self.inner_optimizer.step()
        self.step_count += 1
        f = self.fragment_due(self.step_count)
        if f is not None:
            self.sync(f)
        return f

    def flush(self):
        """An outer round of every fragment not synced at this step, so that every member ends with the same
        parameters (streaming leaves the others trained on since their last round). Collective."""
        for f in range(self.fragments):
            if self.last_sync[f] != self.step_count:
                self.sync(f)


class _HookState:
    """The DDP hook's state: the communicator, the tags given to (bucket index, size) pairs in order of first
    use (DDP rebuilds its buckets after the first iteration, the same way on every member), and the rounds in
    flight in posting order."""

    def __init__(self, comm, tag, max_tags):
        self.comm, self.tag, self.max_tags = comm, tag, max_tags
        self.tags = {}
        self.pending = []  # (request, future, buffer) in posting order

    def tag_of(self, bucket):
        key = (bucket.index(), bucket.buffer().numel())
        if key not in self.tags:
            if len(self.tags) == self.max_tags:
                raise RuntimeError("xdc.torch.ddp_hook: more than %d bucket shapes (tags %d..%d); raise max_tags"
                                   % (self.max_tags, self.tag, self.tag + self.max_tags - 1))
            self.tags[key] = self.tag + len(self.tags)
        return self.tags[key]

    def settle(self, block):
        """Complete the futures of the rounds done, in order; all of them when block."""
        while self.pending:
            req, fut, buf = self.pending[0]
            if block:
                req.wait()
            elif not req.test():
                return
            self.pending.pop(0)
            fut.set_result(buf)


def _hook(state, bucket):
    """Average bucket's gradients over every member of every region: libxdc's all-reduce (mean) on the
    bucket's own tag, posted at once; the future completes when the round did (at the latest when the last
    bucket is posted, which is when DDP is about to wait for them all)."""
    buf = bucket.buffer()
    req = state.comm.iallreduce(buf, tag=state.tag_of(bucket))
    fut = torch.futures.Future()
    state.pending.append((req, fut, buf))
    state.settle(block=bucket.is_last())
    return fut


def ddp_hook(comm, model, tag=DDP_TAG, max_tags=OUTER_TAG - DDP_TAG):
    """(state, hook) for ``model.register_comm_hook(state, hook)``, model the DistributedDataParallel module,
    just made over init_process_group's group: every gradient bucket is averaged over every member of every
    region by libxdc (the run's codec with error feedback, one tag per bucket shape from `tag` on), in place
    of the process group's all-reduce. DDP's construction made the parameters the same within the region
    (its broadcast); this checks, collectively and through libxdc, that they are the same in every region
    (check_same_start). The rounds run on libxdc's comm thread while backward goes on; all of them are
    waited for when the last bucket is posted. Only the hook calls the communicator while backward runs
    (libxdc's one-thread rule)."""
    check_same_start(comm, model, "xdc.torch.ddp_hook")
    return _HookState(comm, tag, max_tags), _hook


def init_process_group(comm, init_method=None, timeout=None):
    """The gloo process group DDP needs, over this member's region only: rank comm.region_rank of
    comm.region_size. It carries DDP's control traffic (the shape check and the broadcast of the region rank
    0's parameters and buffers at construction, the bucket order after the first iteration, the buffers at
    every forward when DDP broadcasts them) on the region's own network; the gradients go through the hook,
    and nothing of this group crosses a region (across regions every byte is libxdc's, over TLS).
    init_method None: under torchrun (TORCHELASTIC_RUN_ID set) its own store ("env://": MASTER_ADDR and
    MASTER_PORT of the torchrun started in this region); else a FileStore in the run folder, one per region
    ($XDC_RUN_DIR/torch-gloo-store-REGION), which the region's members reach on one host or a shared file
    system; on separate hosts give another (``tcp://HOST:PORT`` of a host of the region). Then checks that
    every rank of the group is a member of this region (else RuntimeError): an init_method shared by two
    regions fails here rather than carry their traffic in the clear."""
    if init_method is None:
        if os.environ.get("TORCHELASTIC_RUN_ID"):
            init_method = "env://"
        else:
            run_dir = os.environ.get("XDC_RUN_DIR")
            if not run_dir:
                raise ValueError("xdc.torch.init_process_group: no init_method, not under torchrun and no "
                                 "XDC_RUN_DIR (set by xdc launch --exec) for the file store")
            init_method = "file://" + os.path.join(os.path.abspath(run_dir),
                                                   "torch-gloo-store-%s" % comm.region_name)
    kwargs = {} if timeout is None else {"timeout": timeout}
    torch.distributed.init_process_group("gloo", init_method=init_method, rank=comm.region_rank,
                                         world_size=comm.region_size, **kwargs)
    # every rank's (region, global rank): this region's, and its global ranks consecutive from the group's rank 0
    me = torch.tensor([comm.region, comm.rank - comm.region_rank], dtype=torch.int64)
    seen = [torch.zeros_like(me) for _ in range(comm.region_size)]
    torch.distributed.all_gather(seen, me)
    if any(not torch.equal(s, me) for s in seen):
        torch.distributed.destroy_process_group()
        raise RuntimeError("xdc.torch.init_process_group: the group's ranks are not all of region %s (%s): give "
                           "each region an init_method of its own" % (comm.region_name,
                                                                     [tuple(s.tolist()) for s in seen]))
