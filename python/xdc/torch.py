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
    k * H + (f + 1) * H / F (step counted from 1). The rounds block ``step()`` unless ``overlap``.

    ``overlap=d`` (True: 1; at most H / F): a round is begun at its step (``Comm.outer_begin``: the
    pseudo-gradient taken, its exchange posted) and applied d steps later (``Comm.outer_apply``): the
    fragment becomes the new global parameters plus the progress made since the round began, so the d inner
    steps run while the round is on the wire (``steps_in_flight`` counts them). The global parameters (in
    ``state_dict()``) are the same on every member after each applied round; the parameters differ by each
    member's own last d steps. ``keep_unsent``: what the codec did not send stays in the parameters (one
    member per region). ``final_codec``: the codec of ``flush()``'s last rounds (None: the run file's
    ``diloco.final_codec``). ``flush()`` ends the outer rounds: every member on one model.
    ``state_dict()`` / ``load_state_dict()``: the schedule and each fragment's outer state (global
    parameters, momentum, the codec's residual), taken with no round in flight.

    The members must start from the same parameters: build the model with the same seed everywhere (the
    wrapper does not broadcast). The constructor checks it (collective): ``initial_hash``, ``param_hash(model)``
    then, must be the same on every member (``Comm.check_same``), else xdc.Error XDC_STATUS_CORRUPT on every
    member.
    """

    def __init__(self, comm, model, inner_optimizer, sync_every, fragments=1, tag=OUTER_TAG, overlap=False,
                 keep_unsent=False, final_codec=None):
        if sync_every < 1 or fragments < 1 or sync_every % fragments != 0:
            raise ValueError("xdc.torch.DiLoCo: sync_every %d, fragments %d: want sync_every >= 1 a multiple of "
                             "fragments >= 1" % (sync_every, fragments))
        self.overlap = int(overlap)  # True: 1
        if not 0 <= self.overlap <= sync_every // fragments:
            raise ValueError("xdc.torch.DiLoCo: overlap %d: want 0..sync_every / fragments (%d), one round in "
                             "flight at a time" % (self.overlap, sync_every // fragments))
        params = list(model.parameters())
        if len(params) < fragments:
            raise ValueError("xdc.torch.DiLoCo: %d fragments of %d parameters" % (fragments, len(params)))
        self.comm, self.model, self.inner_optimizer = comm, model, inner_optimizer
        self.sync_every, self.fragments, self.tag = sync_every, fragments, tag
        self.fragment_params = _split(params, fragments)
        self.step_count = 0
        self.last_sync = [0] * fragments  # the step each fragment was last synced at
        self.outer_rounds = 0
        self.initial_hash = param_hash(model)
        try:  # an outer round cannot bring different starts together: each member's global starts as its own
            comm.check_same(int(self.initial_hash, 16))
        except xdc.Error as e:
            raise xdc.Error(e.status, "xdc.torch.DiLoCo: the members start from different parameters (build the "
                            "model from the same seed everywhere): " + e.message) from None
        self.keep_unsent = keep_unsent
        self.in_flight = None  # (fragment, step it began at) of the overlapped round on the wire
        self.steps_in_flight = 0  # inner steps taken while a round was on the wire
        for f, frag in enumerate(self.fragment_params):
            comm.outer_init(tag + f, frag)  # checks every tensor: CPU, float32, contiguous
            comm.outer_configure(tag + f, keep_unsent=keep_unsent, final_codec=final_codec)

    def fragment_due(self, step):
        """The fragment synced after inner step `step` (counted from 1), or None."""
        every = self.sync_every // self.fragments
        return None if step % every else (step // every - 1) % self.fragments

    def sync(self, fragment):
        """One outer round of `fragment` now (collective: every member calls it at the same point); with
        overlap it is begun now and applied `overlap` steps later."""
        if self.overlap:
            self.comm.outer_begin(self.tag + fragment, self.fragment_params[fragment])
            self.in_flight = (fragment, self.step_count)
        else:
            self.comm.outer_round(self.tag + fragment, self.fragment_params[fragment])
        self.last_sync[fragment] = self.step_count
        self.outer_rounds += 1

    def _apply(self):
        f, _ = self.in_flight
        self.in_flight = None
        self.comm.outer_apply(self.tag + f, self.fragment_params[f])

    def step(self):
        """inner_optimizer.step(), then the outer round that is due (applying the overlapped one in flight
        when its steps are done); returns the fragment synced, or None."""
        self.inner_optimizer.step()
        self.step_count += 1
        if self.in_flight is not None:
            self.steps_in_flight += 1
            if self.step_count == self.in_flight[1] + self.overlap:
                self._apply()
        f = self.fragment_due(self.step_count)
        if f is not None:
            self.sync(f)
        return f

    def flush(self):
        """The last round of every fragment (``Comm.outer_last_round``, in the final codec) whose parameters
        may differ across members: each one not synced at this step, and every one with overlap or
        keep_unsent (the round in flight applied first). Every member then holds the same parameters; the
        outer rounds are over. Collective."""
        if self.in_flight is not None:
            self._apply()
        for f in range(self.fragments):
            if self.overlap or self.keep_unsent or self.last_sync[f] != self.step_count:
                self.comm.outer_last_round(self.tag + f, self.fragment_params[f])
                self.outer_rounds += 1

    def state_dict(self):
        """The schedule and each fragment's outer state (float32 CPU tensors: global parameters, momentum,
        the codec's error-feedback residual), with no round in flight (a checkpoint)."""
        if self.in_flight is not None:
            raise RuntimeError("xdc.torch.DiLoCo.state_dict: a round is in flight (take it at a step where none "
                               "is: overlap steps after a round)")
        frags = []
        for f in range(self.fragments):
            n, r = self.comm.outer_state_size(self.tag + f)
            st = {"global": torch.empty(n), "momentum": torch.empty(n), "residual": torch.empty(r)}
            self.comm.outer_get_state(self.tag + f, st["global"], st["momentum"], st["residual"] if r else None)
            frags.append(st)
        return {"step_count": self.step_count, "last_sync": list(self.last_sync), "outer_rounds": self.outer_rounds,
                "fragments": frags}

    def load_state_dict(self, state):
        """Take what state_dict() gave (the same model shape, fragments and codec), with no round in flight."""
        if self.in_flight is not None or len(state["fragments"]) != self.fragments:
            raise ValueError("xdc.torch.DiLoCo.load_state_dict: %d fragments in the state, %d here%s"
                             % (len(state["fragments"]), self.fragments,
                                "; a round is in flight" if self.in_flight is not None else ""))
        for f, st in enumerate(state["fragments"]):
            res = st["residual"].contiguous() if st["residual"].numel() else None
            self.comm.outer_set_state(self.tag + f, st["global"].contiguous(), st["momentum"].contiguous(), res)
        self.step_count, self.outer_rounds = state["step_count"], state["outer_rounds"]
        self.last_sync = list(state["last_sync"])


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


def ddp_hook(comm, tag=DDP_TAG, max_tags=OUTER_TAG - DDP_TAG):
    """(state, hook) for ``DistributedDataParallel.register_comm_hook(state, hook)``: every gradient bucket is
    averaged over every member of every region by libxdc (the run's codec with error feedback, one tag per
    bucket shape from `tag` on), in place of the process group's all-reduce. The rounds run on libxdc's comm
    thread while backward goes on; all of them are waited for when the last bucket is posted. Only the hook
    calls the communicator while backward runs (libxdc's one-thread rule)."""
    return _HookState(comm, tag, max_tags), _hook


def init_process_group(comm, init_method=None, timeout=None):
    """The gloo process group DDP needs, over the same members (rank comm.rank of comm.size). With the hook
    it carries DDP's control traffic (the shape check and the broadcast of rank 0's parameters and buffers
    at construction, the bucket order after the first iteration, the buffers at every forward when DDP
    broadcasts them), not the gradients. init_method None: a FileStore in the run folder
    ($XDC_RUN_DIR/torch-gloo-store), which every member reaches on one host or a shared file system; on
    separate hosts give another (``tcp://HOST:PORT``)."""
    if init_method is None:
        run_dir = os.environ.get("XDC_RUN_DIR")
        if not run_dir:
            raise ValueError("xdc.torch.init_process_group: no init_method and no XDC_RUN_DIR (set by xdc launch "
                             "--exec) for the file store")
        init_method = "file://" + os.path.join(os.path.abspath(run_dir), "torch-gloo-store")
    kwargs = {} if timeout is None else {"timeout": timeout}
    torch.distributed.init_process_group("gloo", init_method=init_method, rank=comm.rank, world_size=comm.size,
                                         **kwargs)
