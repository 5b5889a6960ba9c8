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
compressed all-reduce. Tensors on the CPU or on a GPU (CUDA tensors, or any object with
``__cuda_array_interface__``, taken on their device and stream by libxdc's device calls), float32 or
bfloat16 (staged through float32: the outer state is float32); one device per parameter list. The outer
optimizer (Nesterov with the run file's ``diloco.outer_lr`` and ``diloco.outer_momentum``), the codec (the
run file's ``codec:``, or the link's) and its error feedback are the library's.
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
        h.update(_host_bytes(p))
    return h.hexdigest()[:16]


def _host_bytes(p):
    """The bytes of parameter p, read on the host (a device tensor copied; an object with
    ``__cuda_array_interface__`` that is no tensor through its ``get()``, as CuPy's)."""
    if not isinstance(p, torch.Tensor):
        return bytes(memoryview(p.get()).cast("B"))
    t = p.detach().cpu().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def _device(p):
    """Where p lives: None (host) or the device ordinal (xdc.device_of)."""
    if isinstance(p, torch.Tensor):
        return p.device.index if p.is_cuda else None
    return xdc.device_of(p)


def _numel(p):
    """Elements of p: a tensor, or another framework's device memory (__cuda_array_interface__)."""
    return p.numel() if isinstance(p, torch.Tensor) else xdc.DeviceBuffer(p).count


def _where(device):
    return "the CPU" if device is None else "device %d" % device


def _one_device(named):
    """The device of every (name, tensor) of named; a second device refused naming both tensors."""
    name0, dev0 = None, None
    for i, (name, p) in enumerate(named):
        dev = _device(p)
        if i == 0:
            name0, dev0 = name, dev
        elif dev != dev0:
            raise ValueError("xdc.torch: parameter %s is on %s, parameter %s on %s: every parameter on one device "
                             "(move the model with model.to(device))" % (name, _where(dev), name0, _where(dev0)))
    return dev0


def _staged(params, offload):
    """The float32 contiguous buffers libxdc runs over for params, and the (tensor, buffer) pairs copied into
    the buffers before each round and back after it: a float32 contiguous tensor is its own buffer (no copy),
    a bfloat16 or non-contiguous one gets a float32 buffer on its device, and with offload every tensor gets
    one in host memory (pinned where CUDA is there), so the outer state lives on the host."""
    bufs, pairs = [], []
    for p in params:
        if not isinstance(p, torch.Tensor):  # another framework's device memory: taken as it is
            bufs.append(p)
            continue
        t = p.detach()
        if offload:
            b = torch.empty(t.numel(), dtype=torch.float32, pin_memory=torch.cuda.is_available())
        elif t.dtype != torch.float32 or not t.is_contiguous():
            b = torch.empty(t.numel(), dtype=torch.float32, device=t.device)
        else:
            bufs.append(t)
            continue
        b.copy_(t.reshape(-1))
        bufs.append(b)
        pairs.append((t, b))
    return bufs, pairs


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
    total = sum(_numel(p) for p in params)
    out, cur, done = [], [], 0
    for i, p in enumerate(params):
        cur.append(p)
        done += _numel(p)
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

    Parameters on a GPU: the outer rounds run on their device, ordered on torch's current stream (libxdc's
    device calls), the outer state (global parameters, momentum, error-feedback residual) on the GPU; with
    ``offload=True`` the outer state is kept in host memory instead (the parameters copied to and from pinned
    float32 buffers around each round). bfloat16 parameters are staged through float32 buffers. Every
    parameter on one device (else ValueError naming the tensors). ``overlap``, ``keep_unsent``,
    ``final_codec`` and ``state_dict()`` work the same there (the state is copied to CPU tensors).

    The members must start from the same parameters: build the model with the same seed everywhere (the
    wrapper does not broadcast). The constructor checks it (collective): ``initial_hash``, ``param_hash(model)``
    then, must be the same on every member (``Comm.check_same``), else xdc.Error XDC_STATUS_CORRUPT on every
    member.
    """

    def __init__(self, comm, model, inner_optimizer, sync_every, fragments=1, tag=OUTER_TAG, overlap=False,
                 keep_unsent=False, final_codec=None, offload=False):
        if sync_every < 1 or fragments < 1 or sync_every % fragments != 0:
            raise ValueError("xdc.torch.DiLoCo: sync_every %d, fragments %d: want sync_every >= 1 a multiple of "
                             "fragments >= 1" % (sync_every, fragments))
        self.overlap = int(overlap)  # True: 1
        if not 0 <= self.overlap <= sync_every // fragments:
            raise ValueError("xdc.torch.DiLoCo: overlap %d: want 0..sync_every / fragments (%d), one round in "
                             "flight at a time" % (self.overlap, sync_every // fragments))
        named = list(model.named_parameters()) if hasattr(model, "named_parameters") else \
            [(str(i), p) for i, p in enumerate(model.parameters())]
        _one_device(named)
        params = [p for _, p in named]
        if len(params) < fragments:
            raise ValueError("xdc.torch.DiLoCo: %d fragments of %d parameters" % (fragments, len(params)))
        self.comm, self.model, self.inner_optimizer = comm, model, inner_optimizer
        self.sync_every, self.fragments, self.tag = sync_every, fragments, tag
        self.fragment_params = _split(params, fragments)
        self.staged = [_staged(frag, offload) for frag in self.fragment_params]  # (buffers, pairs) per fragment
        self.step_count = 0
        self.last_sync = [0] * fragments  # the step each fragment was last synced at
        self.outer_rounds = 0
        # an outer round cannot bring different starts together: each member's global starts as its own
        self.initial_hash = check_same_start(comm, model, "xdc.torch.DiLoCo")
        self.keep_unsent = keep_unsent
        self.in_flight = None  # (fragment, step it began at) of the overlapped round on the wire
        self.steps_in_flight = 0  # inner steps taken while a round was on the wire
        for f, (bufs, _) in enumerate(self.staged):
            comm.outer_init(tag + f, bufs)  # checks every buffer: float32, contiguous, one device
            comm.outer_configure(tag + f, keep_unsent=keep_unsent, final_codec=final_codec)

    def fragment_due(self, step):
        """The fragment synced after inner step `step` (counted from 1), or None."""
        every = self.sync_every // self.fragments
        return None if step % every else (step // every - 1) % self.fragments

    def sync(self, fragment):
        """One outer round of `fragment` now (collective: every member calls it at the same point); with
        overlap it is begun now and applied `overlap` steps later."""
        if self.overlap:
            self._outer(self.comm.outer_begin, fragment, back=False)
            self.in_flight = (fragment, self.step_count)
        else:
            self._outer(self.comm.outer_round, fragment)
        self.last_sync[fragment] = self.step_count
        self.outer_rounds += 1

    def _outer(self, call, fragment, back=True):
        """call (a Comm outer call) over fragment's float32 buffers: the staged tensors copied into them first,
        and back after it unless not `back` (outer_begin leaves the parameters as they are)."""
        bufs, pairs = self.staged[fragment]
        for t, b in pairs:
            b.copy_(t.reshape(-1))
        call(self.tag + fragment, bufs)
        for t, b in pairs if back else ():
            t.copy_(b.view_as(t))

    def _apply(self):
        f, _ = self.in_flight
        self.in_flight = None
        self._outer(self.comm.outer_apply, f)

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
                self._outer(self.comm.outer_last_round, f)
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
        self.pending = []  # (request, future, bucket buffer, float32 buffer libxdc averages) in posting order

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
            req, fut, buf, buf32 = self.pending[0]
            if block:
                req.wait()
            elif not req.test():
                return
            self.pending.pop(0)
            if buf32 is not buf:
                buf.copy_(buf32)
            fut.set_result(buf)


def _hook(state, bucket):
    """Average bucket's gradients over every member of every region: libxdc's all-reduce (mean) on the
    bucket's own tag, posted at once; the future completes when the round did (at the latest when the last
    bucket is posted, which is when DDP is about to wait for them all)."""
    buf = bucket.buffer()
    buf32 = buf if buf.dtype == torch.float32 else buf.float()  # bfloat16 gradients: averaged in float32
    req = state.comm.iallreduce(buf32, tag=state.tag_of(bucket))
    fut = torch.futures.Future()
    state.pending.append((req, fut, buf, buf32))
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
