"""torch_checks.py — xdc.torch and tensor buffers, for the suite (tests/e2e/test_api.c, api_torch_*), run by
xdc launch --exec on every member under a run file with codec none (mismatch: int8).

    torch_checks.py tensors   tensors as buffers: the exact mean in the tensor's own memory; a float64, a
                              non-contiguous, a non-CPU (meta) or an empty tensor refused; a request keeps
                              its tensor alive; Comm.stats() counts the WAN bytes of the rounds (one member per region)
    torch_checks.py diloco    DiLoCo on a small model: the loss falls; the hash of the parameters after each
                              outer round, printed by every member (the suite compares them)
    torch_checks.py fragments streaming with H=4, F=2: fragment 0 synced after steps 2 and 6, 1 after 4 and 8;
                              after each sync the hashes of both fragments are printed (the suite checks that
                              the synced one is equal everywhere and the other is not)
    torch_checks.py mismatch  DiLoCo refuses members started from different parameters (xdc.Error
                              XDC_STATUS_CORRUPT on every member); Comm.check_same of equal and unequal values
    torch_checks.py ddp       DDP with xdc.torch.ddp_hook over several buckets: every gradient equals the
                              exact mean over the members (inputs chosen so that the float sums are exact);
                              every TCP socket this member opened while the gloo group and DDP were made
                              has its other end in a member of its own region (none crosses a region)

Each mode prints "torch_checks: MODE: rank R: ok ..." and exits 0, or says what differed and exits 1.
"""
import gc
import hashlib
import ctypes
import os
import sys
import weakref

import torch

import xdc
import xdc.torch


def fail(msg):
    sys.exit("torch_checks: " + msg)


def expect_type_error(fn, what, words):
    try:
        fn()
    except TypeError as e:
        if words not in str(e):
            fail("%s: TypeError without %r: %s" % (what, words, e))
        return
    fail("%s did not raise TypeError" % what)


def tensors(comm):
    rank, size = comm.rank, comm.size
    st0 = comm.stats()
    t = torch.arange(1000, dtype=torch.float32) / 8 + rank
    ptr = t.data_ptr()
    comm.allreduce(t, tag=1)
    want = torch.arange(1000, dtype=torch.float32) / 8 + (size - 1) / 2
    if t.data_ptr() != ptr or not torch.equal(t, want):
        fail("rank %d: allreduce of a tensor: max error %g" % (rank, (t - want).abs().max().item()))
    expect_type_error(lambda: comm.allreduce(torch.zeros(8, dtype=torch.float64), tag=2), "a float64 tensor",
                      "dtype torch.float64")
    expect_type_error(lambda: comm.allreduce(torch.zeros(8, 4).t(), tag=2), "a transposed tensor", "not contiguous")
    # no GPU here: a tensor on the meta device takes the path a CUDA one would (refused by its device)
    expect_type_error(lambda: comm.allreduce(torch.zeros(8, device="meta"), tag=2), "a meta tensor",
                      "host memory here, or device memory")
    expect_type_error(lambda: comm.outer_init(3, [torch.zeros(4, dtype=torch.float16)]), "a float16 parameter",
                      "dtype torch.float16")
    try:
        comm.allreduce(torch.zeros(0), tag=2)
        fail("an empty tensor was taken")
    except ValueError:
        pass
    # the request holds the tensor: dropping ours leaves it alive until the round completed
    u = torch.full((64,), float(rank))
    alive = weakref.ref(u)
    req = comm.iallreduce(u, tag=4)
    del u
    gc.collect()
    if alive() is None:
        fail("rank %d: the tensor of a request in flight was freed" % rank)
    u = alive()
    req.wait()
    if not torch.equal(u, torch.full((64,), (size - 1) / 2)):
        fail("rank %d: iallreduce of a tensor: %s" % (rank, u[:4]))
    del u
    gc.collect()
    if alive() is not None:
        fail("rank %d: a completed request still holds its tensor" % rank)
    # one member per region, codec none: each round sends this member's whole buffer to the other region
    st = comm.stats()
    raw = 4 * (1000 + 64) * (comm.num_regions - 1)
    print("torch_checks: tensors: rank %d: stats %s" % (rank, st), flush=True)
    # (the payload is the codec's output, then zstd: smaller than raw for these regular values)
    if comm.size != comm.num_regions or st0["wan_raw_bytes"] != 0 or st["wan_raw_bytes"] != raw or \
            not 0 < st["wan_tx_bytes"] < st["wan_wire_bytes"] or st["wan_rx_bytes"] <= 0:
        fail("rank %d: stats %s after rounds of 4 x (1000 + 64) raw bytes to %d regions" % (rank, st,
                                                                                          comm.num_regions - 1))
    print("torch_checks: tensors: rank %d: ok" % rank, flush=True)


def small_model():
    torch.manual_seed(7)  # the same start on every member
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def regression_batch(rank, step):
    """A fixed target function every member samples with its own seed."""
    g = torch.Generator().manual_seed(rank * 1000 + step)
    x = torch.randn(32, 16, generator=g)
    return x, (x[:, :4].sum(dim=1, keepdim=True) * 0.5).tanh()


def diloco(comm):
    rank = comm.rank
    model = small_model()
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    dl = xdc.torch.DiLoCo(comm, model, inner, sync_every=5)
    xv, yv = regression_batch(9999, 0)
    first = torch.nn.functional.mse_loss(model(xv), yv).item()
    print("torch_checks: diloco: rank %d: start %s" % (rank, dl.initial_hash), flush=True)
    for step in range(1, 41):
        x, y = regression_batch(rank, step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        synced = dl.step()
        inner.zero_grad()
        if (synced is not None) != (step % 5 == 0):
            fail("rank %d: step %d: synced %s" % (rank, step, synced))
        if synced is not None:
            print("torch_checks: diloco: rank %d: round %d hash %s" % (rank, dl.outer_rounds,
                                                                    xdc.torch.param_hash(model)), flush=True)
    last = torch.nn.functional.mse_loss(model(xv), yv).item()
    if not last < 0.5 * first:
        fail("rank %d: validation loss %.4f -> %.4f, not halved" % (rank, first, last))
    print("torch_checks: diloco: rank %d: ok, %d rounds, loss %.4f -> %.4f" % (rank, dl.outer_rounds, first, last),
          flush=True)


def mismatch(comm):
    """DiLoCo refuses members that start apart (here one of them seeded otherwise), on every member; the same
    start passes, and equal and unequal values through Comm.check_same."""
    rank = comm.rank
    torch.manual_seed(8 if rank == comm.size - 1 else 7)
    model = torch.nn.Linear(16, 4)
    try:
        xdc.torch.DiLoCo(comm, model, torch.optim.SGD(model.parameters(), lr=0.1), sync_every=2)
        fail("rank %d: DiLoCo took members with different parameters" % rank)
    except xdc.Error as e:
        if e.name != "XDC_STATUS_CORRUPT" or "start from different parameters" not in e.message:
            fail("rank %d: %s" % (rank, e))
        print("torch_checks: mismatch: rank %d: refused: %s" % (rank, e.message), flush=True)
    comm.check_same(0xFEDCBA9876543210)
    try:
        comm.check_same(rank)  # 0, 1, 2, 3: the lowest digit differs
        fail("rank %d: check_same took different values" % rank)
    except xdc.Error as e:
        if e.name != "XDC_STATUS_CORRUPT":
            fail("rank %d: check_same of different values: %s" % (rank, e))
    model = small_model()
    xdc.torch.DiLoCo(comm, model, torch.optim.SGD(model.parameters(), lr=0.1), sync_every=2, tag=600)
    print("torch_checks: mismatch: rank %d: ok" % rank, flush=True)


def fragment_hash(params):
    h = hashlib.sha256()
    for p in params:
        h.update(ctypes.string_at(p.data_ptr(), p.numel() * 4))
    return h.hexdigest()[:16]


def fragments(comm):
    rank = comm.rank
    model = small_model()
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    dl = xdc.torch.DiLoCo(comm, model, inner, sync_every=4, fragments=2)
    sizes = [sum(p.numel() for p in f) for f in dl.fragment_params]
    if len(sizes) != 2 or sum(sizes) != sum(p.numel() for p in model.parameters()):
        fail("fragments of %s elements" % sizes)
    want = {2: 0, 4: 1, 6: 0, 8: 1}
    for step in range(1, 9):
        x, y = regression_batch(rank, step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        synced = dl.step()
        inner.zero_grad()
        if synced != want.get(step):
            fail("rank %d: step %d synced fragment %s, want %s" % (rank, step, synced, want.get(step)))
        if synced is not None:
            print("torch_checks: fragments: rank %d: step %d synced %d: f0 %s f1 %s"
                  % (rank, step, synced, fragment_hash(dl.fragment_params[0]), fragment_hash(dl.fragment_params[1])),
                  flush=True)
    print("torch_checks: fragments: rank %d: ok, sizes %s" % (rank, sizes), flush=True)


class TwoLinear(torch.nn.Module):
    """Two linear maps on two halves of the input, summed: the gradient of each weight is a sum of inputs,
    exact in float32 for inputs that are small multiples of 1/8."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 128, bias=False)
        self.b = torch.nn.Linear(64, 128, bias=False)

    def forward(self, x):
        return self.a(x[:, :64]).sum() + self.b(x[:, 64:]).sum()


def inputs(rank, step):
    i = torch.arange(4 * 128, dtype=torch.float32).reshape(4, 128)
    return ((i + 3 * rank + step) % 16) / 8


def socket_inodes(pid):
    """The inodes of the sockets process pid holds (its fds), or an empty set when it is gone."""
    out = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            if link.startswith("socket:["):
                out.add(int(link[8:-1]))
    except OSError:
        pass
    return out


def tcp_sockets():
    """{inode: (local, remote)} of the established TCP connections of this network namespace, endpoints as
    /proc/net/tcp{,6} writes them (hex address:port)."""
    out = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            for line in f.readlines()[1:]:
                col = line.split()
                if col[3] == "01":  # TCP_ESTABLISHED (not a listener)
                    out[int(col[9])] = (col[1], col[2])
    return out


def member_regions():
    """{socket inode: XDC_REGION} over every process of this run (XDC_RUN_ID equal to ours)."""
    run = os.environ["XDC_RUN_ID"].encode()
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if env.get(b"XDC_RUN_ID") == run and b"XDC_REGION" in env:
            out.update((i, env[b"XDC_REGION"].decode()) for i in socket_inodes(int(pid)))
    return out


def ddp(comm):
    rank, size = comm.rank, comm.size
    before = socket_inodes(os.getpid())
    xdc.torch.init_process_group(comm)
    if torch.distributed.get_world_size() != comm.region_size or torch.distributed.get_rank() != comm.region_rank:
        fail("rank %d: the gloo group is rank %d of %d, want %d of %d (the region's)" % (
            rank, torch.distributed.get_rank(), torch.distributed.get_world_size(), comm.region_rank,
            comm.region_size))
    torch.manual_seed(3)
    model = TwoLinear()
    # 32 KiB buckets: each weight (32 KiB) in a bucket of its own, so the hook sees two buckets
    net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.03)
    # the sockets opened since: gloo's (libxdc's WAN and store connections were made by xdc.Comm()); each one's
    # other end found in the run's processes by the endpoint it sees, and that process's region
    table, regions = tcp_sockets(), member_regions()
    by_end = {ends[0]: inode for inode, ends in table.items()}
    peers = [regions.get(by_end.get(table[i][1])) for i in socket_inodes(os.getpid()) - before if i in table]
    if not peers or any(p != comm.region_name for p in peers):
        fail("rank %d: sockets opened for the gloo group and DDP end in regions %s, want all %s" % (
            rank, peers, comm.region_name))
    print("torch_checks: ddp: rank %d: %d gloo sockets, every peer in region [%s]" % (rank, len(peers),
                                                                                comm.region_name), flush=True)
    state, hook = xdc.torch.ddp_hook(comm, net)
    net.register_comm_hook(state, hook)
    for step in range(3):  # DDP rebuilds its buckets after the first iteration
        net(inputs(rank, step)).backward()
        for name, p in model.named_parameters():
            mean = sum(inputs(r, step)[:, :64] if name == "a.weight" else inputs(r, step)[:, 64:]
                       for r in range(size)).sum(dim=0) / size
            want = mean.expand(128, 64)
            if not torch.equal(p.grad, want):
                fail("rank %d step %d: %s gradient off the exact mean by %g" % (rank, step, name,
                                                                              (p.grad - want).abs().max().item()))
        model.zero_grad()
    if len(state.tags) < 2:
        fail("rank %d: the hook saw %d bucket shapes, want at least 2" % (rank, len(state.tags)))
    torch.distributed.destroy_process_group()
    print("torch_checks: ddp: rank %d: ok, exact mean over %d members, %d bucket tags" % (rank, size, len(state.tags)),
          flush=True)


def overlap(comm):
    """DiLoCo(overlap=2, keep_unsent, final_codec int8) on one member per region with the run's sparse codec:
    every round applied 2 steps after it began, the global parameters the same everywhere after each applied
    round (state_dict), the inner steps taken while a round was in flight counted, state_dict /
    load_state_dict round-tripping into a second wrapper, one model after flush, the loss falling."""
    rank = comm.rank
    model = small_model()
    inner = torch.optim.SGD(model.parameters(), lr=0.05)
    dl = xdc.torch.DiLoCo(comm, model, inner, sync_every=5, overlap=2, keep_unsent=True, final_codec="int8")
    xv, yv = regression_batch(9999, 0)
    first = torch.nn.functional.mse_loss(model(xv), yv).item()
    for step in range(1, 33):
        x, y = regression_batch(rank, step)
        torch.nn.functional.mse_loss(model(x), y).backward()
        dl.step()
        inner.zero_grad()
        if step % 5 == 2 and step > 5:  # the round of step - 2 was applied at this step
            sd = dl.state_dict()
            print("torch_checks: overlap: rank %d: step %d global %s" % (rank, step, fragment_hash(
                [sd["fragments"][0]["global"]])), flush=True)
    if dl.steps_in_flight != 6 * 2:  # rounds begun at 5, 10, ..., 30, each applied 2 steps later
        fail("rank %d: %d inner steps while a round was in flight, want 12" % (rank, dl.steps_in_flight))
    sd = dl.state_dict()
    other = xdc.torch.DiLoCo(comm, small_model(), inner, sync_every=5, tag=xdc.torch.OUTER_TAG + 8)
    other.load_state_dict(sd)
    back = other.state_dict()
    for k in ("global", "momentum", "residual"):
        if not torch.equal(back["fragments"][0][k], sd["fragments"][0][k]):
            fail("rank %d: state_dict %s did not round-trip" % (rank, k))
    if back["step_count"] != 32 or sd["fragments"][0]["residual"].numel() == 0:
        fail("rank %d: step %d, residual of %d values" % (rank, back["step_count"], sd["fragments"][0]["residual"].numel()))
    dl.flush()
    last = torch.nn.functional.mse_loss(model(xv), yv).item()
    if not last < first:
        fail("rank %d: validation loss %.4f -> %.4f" % (rank, first, last))
    print("torch_checks: overlap: rank %d: flushed %s, %d steps in flight, loss %.4f -> %.4f"
          % (rank, xdc.torch.param_hash(model), dl.steps_in_flight, first, last), flush=True)


def main():
    torch.set_num_threads(1)
    modes = {"tensors": tensors, "diloco": diloco, "fragments": fragments, "ddp": ddp, "mismatch": mismatch,
             "overlap": overlap}
    if len(sys.argv) != 2 or sys.argv[1] not in modes:
        print("usage: torch_checks.py %s" % "|".join(modes), file=sys.stderr)
        return 64
    with xdc.Comm() as comm:
        modes[sys.argv[1]](comm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
