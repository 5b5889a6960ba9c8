"""outer.py — tests/api/outer.c on the Python package, for the suite (tests/e2e/test_api.c): DiLoCo outer rounds
over a list of two float32 buffers, and what the binding does with buffers.

Every member starts from 1.0, each "inner phase" moves its parameters by -(rank + 1) / 8; with codec none,
diloco.outer_lr 0.5 and outer_momentum 0.5 the two rounds must give exactly (multiples of 1/128):
delta = (size + 1) / 16; m = 0.5 m + delta; global -= 0.5 (delta + 0.5 m).
Also: an all-reduce on the outer tag raises xdc.Error XDC_STATUS_INVALID; a read-only or float64 buffer
is refused with TypeError before any call; a buffer in a request in flight cannot be resized; a slice of
an array (a memoryview) is reduced in place; a closed Comm raises XDC_STATUS_CLOSED.
Prints "outer.py: rank R: 2 rounds exact (G)" and exits 0, or says what differed and exits 1.
"""
import array
import sys

import xdc


def expect_raises(kind, fn, what):
    try:
        fn()
    except kind as e:
        return e
    sys.exit("outer.py: %s did not raise %s" % (what, kind.__name__))


def main():
    with xdc.Comm() as comm:
        rank, size = comm.rank, comm.size
        a, b = array.array("f", [1.0] * 100), array.array("f", [1.0] * 37)
        comm.outer_init(3, [a, b])
        e = expect_raises(xdc.Error, lambda: comm.allreduce(a, tag=3), "an all-reduce on the outer tag")
        if e.name != "XDC_STATUS_INVALID" or not e.message:
            sys.exit("outer.py: all-reduce on the outer tag: %s" % e)
        expect_raises(TypeError, lambda: comm.allreduce(bytes(8), tag=4), "a read-only buffer")
        expect_raises(TypeError, lambda: comm.allreduce(array.array("d", [0.0]), tag=4), "a float64 buffer")
        delta, m, glob = (size + 1) / 16, 0.0, 1.0
        for rnd in (1, 2):
            for p in (a, b):
                for i in range(len(p)):
                    p[i] -= (rank + 1) / 8
            comm.outer_round(3, [a, b])
            m = 0.5 * m + delta
            glob -= 0.5 * (delta + 0.5 * m)
            for i, got in enumerate(list(a) + list(b)):
                if got != glob:
                    sys.exit("outer.py: rank %d round %d: value %d is %.9g, want %.9g" % (rank, rnd, i, got, glob))
        # values 10..19 of a 30-value array, non-blocking: the request holds the array until it completed
        c = array.array("f", [float(rank)] * 30)
        req = comm.iallreduce(memoryview(c)[10:20], tag=5)
        expect_raises(BufferError, lambda: c.append(0.0), "resizing a buffer in flight")
        req.wait()
        if not req.test() or req.done is not True:
            sys.exit("outer.py: a completed request is not done")
        c.append(0.0)  # the buffer is the caller's again
        want = [float(rank)] * 10 + [(size - 1) / 2] * 10 + [float(rank)] * 10 + [0.0]
        if list(c) != want:
            sys.exit("outer.py: rank %d: slice all-reduce gave %s" % (rank, list(c)))
    e = expect_raises(xdc.Error, lambda: comm.rank, "a closed communicator")
    if e.name != "XDC_STATUS_CLOSED":
        sys.exit("outer.py: a closed communicator: %s" % e)
    print("outer.py: rank %d: 2 rounds exact (%.9g)" % (rank, glob), flush=True)


if __name__ == "__main__":
    main()
