"""nonblocking.py — tests/api/nonblocking.c on the Python package, for the suite (tests/e2e/test_api.c): two
regions of one member each, and a FIFO that orders them without any sleep.

    nonblocking.py FIFO COUNT

Region 0 posts iallreduce and, while region 1 is still blocked opening the FIFO (so it has posted nothing),
waits 50 ms: xdc.Timeout, and test() is False (the request still pending, its buffer still held). Then it
writes one byte into the FIFO; region 1, released, posts its half, and both wait without a deadline.
Prints "nonblocking.py: region R: timeout then complete, mean ok" and exits 0, or says what went wrong and
exits 1.
"""
import array
import sys

import xdc


def main(fifo, count):
    with xdc.Comm() as comm:
        region = comm.region
        buf = array.array("f", [2.0 if region == 0 else 6.0] * count)  # (count) float32
        if region == 0:
            req = comm.iallreduce(buf, tag=7)
            try:
                req.wait(50)
                sys.exit("nonblocking.py: wait 50 ms returned before region 1 posted")
            except xdc.Timeout as e:
                print("nonblocking.py: region 0: wait with 50 ms: %s" % e, flush=True)
            if req.test() or req.done:
                sys.exit("nonblocking.py: test() says complete before region 1 posted")
            with open(fifo, "wb") as f:  # region 1 opens it for reading: both go on
                f.write(b"\1")
        else:
            with open(fifo, "rb") as f:
                f.read(1)
            req = comm.iallreduce(buf, tag=7)
        req.wait()
        if set(buf) != {4.0}:
            sys.exit("nonblocking.py: the buffer is not the mean 4: %s" % sorted(set(buf)))
    print("nonblocking.py: region %d: timeout then complete, mean ok" % region, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
