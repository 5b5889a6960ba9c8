"""bench/peers/report.py WORK TOL ROW... — bench-peers' table and summary line from the members' JSON.

WORK holds ROW.json (rank 0: validation curve, training seconds, WAN bytes, compute per step), ROW-1.json
(rank 1) or ROW.why (why the row did not run). The target is ddp's final validation loss x (1 + TOL).
"""

import json
import os
import sys

ENCRYPTED = {
    "ddp": "no (gloo: plain TCP)",
    "torchft": "no (gloo, HTTP/gRPC: plain TCP)",
    "hivemind": "yes (libp2p TLS 1.3)",
    "xdc": "yes (TLS 1.3)",
}


def load(work, name):
    path = os.path.join(work, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def mb(n):
    return "%.2f" % (n / 1e6)


def main():
    work, tol, rows = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    res = {}
    for row in rows:
        r0, r1 = load(work, row + ".json"), load(work, row + "-1.json")
        if r0 is None:
            path = os.path.join(work, row + ".why")
            why = open(path).read().strip() if os.path.exists(path) else "no result"
            res[row] = {"why": why}
            continue
        util = [r["steps"] * r["compute_s_per_step"] / r["train_s"] for r in (r0, r1) if r]
        res[row] = {
            "r0": r0,
            "util": sum(util) / len(util),
            "s_per_step": r0["train_s"] / r0["steps"],
            "final": r0["curve"][-1][2],
        }
    if "ddp" not in res or "why" in res["ddp"]:
        print("bench-peers: the ddp row did not run, so there is no target: %s" % res.get("ddp", {}).get("why"))
        return 1
    ddp = res["ddp"]
    target = ddp["final"] * (1.0 + tol)
    # Flat's WAN time per step over its compute: (step time - compute) / compute.
    c = ddp["r0"]["compute_s_per_step"]
    ratio = (ddp["s_per_step"] - c) / c
    print("bench-peers: target val %.4f = ddp's final %.4f after %d steps x (1 + %.3f); flat DDP's WAN time per"
          " step = %.1fx its compute (%.3f s/step vs %.4f s compute)" % (target, ddp["final"], ddp["r0"]["steps"], tol,
                                                                      ratio, ddp["s_per_step"], c))
    fmt = "%-9s %6s %9s %11s %13s %8s %8s  %s"
    print(fmt % ("row", "steps", "s/step", "to target s", "WAN MB to tgt", "util", "final", "encrypted / note"))
    for row in rows:
        r = res[row]
        if "why" in r:
            print(fmt % (row, "-", "-", "-", "-", "-", "-", "did not run: " + r["why"]))
            continue
        hit = next((p for p in r["r0"]["curve"] if p[2] <= target), None)
        r["time"], r["bytes"] = (hit[1], hit[3]) if hit else (None, None)
        print(fmt % (row, r["r0"]["steps"], "%.4f" % r["s_per_step"],
                     "%.1f" % hit[1] if hit else "not reached", mb(hit[3]) if hit else "-", "%.2f" % r["util"],
                     "%.4f" % r["final"], ENCRYPTED[row] + ("" if hit else "; total WAN %s MB" % mb(r["r0"]["wan_bytes"]))))
    peers = [r for k, r in res.items() if k != "xdc" and r.get("time") is not None]
    x = res.get("xdc", {})
    if x.get("time") is None or not peers:
        print("xdc_vs_best_peer_time=n/a xdc_vs_best_peer_bytes=n/a (%s)" % (
            "xdc did not reach the target" if "why" not in x else "xdc did not run"))
        return 0
    best_t = min(r["time"] for r in peers)
    best_b = min(r["bytes"] for r in peers)
    print("xdc_vs_best_peer_time=%.2f xdc_vs_best_peer_bytes=%.1f" % (best_t / x["time"], best_b / max(x["bytes"], 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
