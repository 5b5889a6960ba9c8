"""device_checks.py — xdc.torch's device path without a GPU, for the suite (tests/e2e/test_api.c, api_torch_device_*),
run by xdc launch --exec on one member per region under a run file with codec none.

    device_checks.py shim     parameters in cpu-strict device memory (XDC_DEVICE=cpu-strict: memory the host cannot
                              touch, streams with their own threads, events, a hazard check) behind a shim object's
                              __cuda_array_interface__: DiLoCo over them takes libxdc's device path (the caller's
                              stream, xdc's stream and events, the codec on the device, pinned staging) and the two
                              rounds give the exact outer step; with overlap=1 (the device begin/apply/last round)
                              the exact values too, and state_dict() reads the device state; Comm.allreduce of a
                              shim gives the exact mean;
                              parameter lists on two devices, or the CPU and a device, refused naming the tensors
    device_checks.py host     DiLoCo with offload=True over float32 CPU tensors (the outer state in host memory, the
                              parameters copied to and from its float32 buffers around each round) and over
                              bfloat16 CPU tensors (staged through float32): the parameters' hash after the last
                              round, printed by every member (the suite compares them)

Each mode prints "device_checks: MODE: rank R: ok ..." and exits 0, or says what differed and exits 1.
"""
import array
import os
import sys

os.environ["XDC_DEVICE"] = "cpu-strict"  # libxdc reads it at the first device call

import torch

import xdc
import xdc.torch


def fail(msg):
    sys.exit("device_checks: " + msg)


class Shim:
    """n float32 values in device memory of libxdc's device (cpu-strict here), as a framework's tensor shows
    them: __cuda_array_interface__ (stream None: the calling thread's current stream), get() to read them."""

    def __init__(self, comm, values, device=0):
        self.comm, self.n, self.device = comm, len(values), device
        self.ptr = comm.device_alloc(4 * self.n, device)
        self.set(values)

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.n,), "typestr": "<f4", "data": (self.ptr, False), "strides": None, "stream": None,
                "version": 3}

    def set(self, values):
        buf = array.array("f", values)
        self.comm.device_copy(self.ptr, buf.buffer_info()[0], 4 * self.n, True, self.device)

    def get(self):
        buf = array.array("f", bytes(4 * self.n))
        self.comm.device_copy(buf.buffer_info()[0], self.ptr, 4 * self.n, False, self.device)
        return buf


class ShimModel:
    def __init__(self, params):
        self.params = params

    def named_parameters(self):
        return [("p%d" % i, p) for i, p in enumerate(self.params)]

    def parameters(self):
        return list(self.params)


class ShimInner:
    """The inner phase of tests/api/outer.c: every step moves each parameter by -(rank + 1) / 16."""

    def __init__(self, params, rank):
        self.params, self.rank = params, rank

    def step(self):
        for p in self.params:
            p.set([v - (self.rank + 1) / 16 for v in p.get()])


def expect_value_error(fn, words):
    try:
        fn()
    except ValueError as e:
        if not all(w in str(e) for w in words):
            fail("ValueError without %s: %s" % (words, e))
        return
    fail("no ValueError (want one naming %s)" % (words,))


def shim(comm):
    rank, size = comm.rank, comm.size
    params = [Shim(comm, [1.0] * 100), Shim(comm, [1.0] * 37)]
    diloco = xdc.torch.DiLoCo(comm, ShimModel(params), ShimInner(params, rank), sync_every=2)
    delta, m, g = (size + 1) / 16, 0.0, 1.0  # outer_lr 0.5, outer_momentum 0.5 (the run file): exact in fp32
    for step in range(1, 5):
        if diloco.step() is not None:
            m = 0.5 * m + delta
            g -= 0.5 * (delta + 0.5 * m)
            got = [v for p in params for v in p.get()]
            if any(v != g for v in got):
                fail("shim: rank %d step %d: values %s, want %r" % (rank, step, sorted(set(got))[:4], g))
    if diloco.outer_rounds != 2:
        fail("shim: rank %d: %d outer rounds, want 2" % (rank, diloco.outer_rounds))
    buf = Shim(comm, [i % 64 / 8 + rank for i in range(3000)])
    comm.allreduce(buf, tag=5)
    if list(buf.get()) != [i % 64 / 8 + (size - 1) / 2 for i in range(3000)]:
        fail("shim: rank %d: the all-reduce of device memory is not the exact mean" % rank)
    other = Shim(comm, [0.0] * 8, device=1)
    expect_value_error(lambda: xdc.torch.DiLoCo(comm, ShimModel([params[0], other]), None, 2),
                       ["parameter p1 is on device 1", "parameter p0 on device 0"])
    cpu = torch.nn.Linear(4, 1)
    expect_value_error(lambda: xdc.torch.DiLoCo(comm, ShimModel([cpu.weight, other]), None, 2),
                       ["parameter p1 is on device 1", "parameter p0 on the CPU"])
    expect_value_error(lambda: comm.outer_init(9, [params[0], other]), ["parameter 1 is on device 1"])
    overlapped(comm, rank, size)
    print("device_checks: shim: rank %d: ok, 2 rounds exact (%r), mean exact, hash %s" %
          (rank, g, xdc.torch.param_hash(ShimModel(params))))


def overlapped(comm, rank, size):
    """DiLoCo(overlap=1) on device tags (xdc_outer_begin/apply/last_round_device): begun at steps 2 and 4,
    applied a step later (params = global' - that step's move), state_dict() of the device state between them
    and load_state_dict() of it shifted by 0.25 (the next round takes it), flush()'s last round: the exact values
    everywhere."""
    params = [Shim(comm, [1.0] * 100), Shim(comm, [1.0] * 37)]
    diloco = xdc.torch.DiLoCo(comm, ShimModel(params), ShimInner(params, rank), sync_every=2, tag=520, overlap=1)
    delta, m, g, shift = (size + 1) / 16, 0.0, 1.0, 0.0
    for step in range(1, 6):
        diloco.step()
        if step in (3, 5):  # the round begun a step before applied (its pseudo-gradient taken from global + shift)
            m = 0.5 * m + delta + shift
            g -= 0.5 * (delta + shift + 0.5 * m)
            shift = 0.0
            want = g - (rank + 1) / 16
            got = [v for p in params for v in p.get()]
            if any(v != want for v in got):
                fail("overlap: rank %d step %d: values %s, want %r" % (rank, step, sorted(set(got))[:4], want))
        if step == 3:
            st = diloco.state_dict()["fragments"][0]
            if set(st["global"].tolist()) != {g} or set(st["momentum"].tolist()) != {m}:
                fail("overlap: rank %d: state_dict global %s momentum %s, want %r and %r" % (
                    rank, sorted(set(st["global"].tolist()))[:4], sorted(set(st["momentum"].tolist()))[:4], g, m))
            state = diloco.state_dict()
            shift = 0.25  # load_state_dict sets the device state: the next round starts from global + 0.25
            state["fragments"][0]["global"] += shift
            diloco.load_state_dict(state)
            g += shift
    diloco.flush()
    last = (size + 1) / 32  # the mean of one step's move
    m = 0.5 * m + last
    g -= 0.5 * (last + 0.5 * m)
    got = [v for p in params for v in p.get()]
    if any(v != g for v in got) or diloco.steps_in_flight != 2 or diloco.outer_rounds != 3:
        fail("overlap: rank %d: after flush %s (want %r), %d steps in flight (want 2), %d rounds (want 3)" % (
            rank, sorted(set(got))[:4], g, diloco.steps_in_flight, diloco.outer_rounds))


def host(comm):
    rank = comm.rank
    for name, dtype, offload, tag in (("offload", torch.float32, True, 600), ("bf16", torch.bfloat16, False, 700)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(dtype)
        inner = torch.optim.SGD(model.parameters(), lr=0.05)
        diloco = xdc.torch.DiLoCo(comm, model, inner, sync_every=2, tag=tag, offload=offload)
        gen = torch.Generator().manual_seed(100 + rank)  # each member its own batches
        for _ in range(4):  # rounds after steps 2 and 4; between them the members drift apart
            inner.zero_grad()
            x = torch.randn(8, 16, generator=gen).to(dtype)
            (model(x).float() ** 2).mean().backward()
            diloco.step()
        if any(p.dtype != dtype for p in model.parameters()):
            fail("host: %s: the parameters changed dtype" % name)
        print("device_checks: host: rank %d: %s hash %s" % (rank, name, xdc.torch.param_hash(model)))
    print("device_checks: host: rank %d: ok" % rank)


def main():
    mode = sys.argv[1]
    with xdc.Comm() as comm:
        {"shim": shim, "host": host}[mode](comm)


if __name__ == "__main__":
    main()
