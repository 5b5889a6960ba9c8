"""allreduce.py — examples/api/allreduce.c in Python, on the xdc package (python/; docs/api.md, "Python").

    pip install ./python
    xdc launch -t TOPOLOGY.yaml -c RUN.yaml --exec -- python3 examples/api/allreduce.py [COUNT [ROUNDS [TOLERANCE]]]

Member r of n fills value i of round k with r + ((i + k) % 8) / 4, so the mean is (n - 1) / 2 +
((i + k) % 8) / 4: with the run file's `codec: none` the all-reduce must give it exactly (every value is a
multiple of 1/8), with a lossy codec within TOLERANCE (absolute; default 0.05). One line per member names
the largest error and a hash of the final buffer, the same on every member (and the same as the C
example's for the same arguments). Round 0 is blocking; the others go through iallreduce and wait.
"""
import array
import sys

import xdc


def fnv1a(buf):
    """FNV-1a over the bytes of buf: equal buffers, equal hashes."""
    h = 1469598103934665603
    for b in memoryview(buf).cast("B"):
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def main(argv):
    try:
        count = int(argv[1]) if len(argv) > 1 else 100000
        rounds = int(argv[2]) if len(argv) > 2 else 3
        tolerance = float(argv[3]) if len(argv) > 3 else 0.05
    except ValueError:
        count = 0
    if count <= 0 or rounds < 1 or tolerance < 0:
        print("usage: allreduce.py [COUNT [ROUNDS [TOLERANCE]]]", file=sys.stderr)
        return 64
    try:
        # Everything from the environment `xdc launch --exec` sets: topology, run file, identity.
        with xdc.Comm() as comm:
            rank, size = comm.rank, comm.size
            buf = array.array("f", bytes(4 * count))  # (count) float32, host memory
            worst = 0.0
            for k in range(rounds):
                for i in range(count):
                    buf[i] = rank + ((i + k) % 8) / 4
                if k == 0:
                    comm.allreduce(buf, tag=0)  # tag 0: the same buffer each round, its residual kept
                else:
                    comm.iallreduce(buf, tag=0).wait()
                for i in range(count):
                    worst = max(worst, abs(buf[i] - ((size - 1) / 2 + ((i + k) % 8) / 4)))
            print("allreduce: rank %d of %d (region %s): %d rounds of %d values, max error %.6g, hash %016x"
                  % (rank, size, comm.region_name, rounds, count, worst, fnv1a(buf)), flush=True)
    except xdc.Error as e:  # the status name and the library's diagnostic
        print("allreduce: %s" % e, file=sys.stderr)
        return 1
    if worst > tolerance:
        print("allreduce: rank %d: max error %.6g exceeds the tolerance %.6g" % (rank, worst, tolerance),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
