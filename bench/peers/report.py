"""bench/peers/report.py WORK TOL REPS ROW... — bench-peers' table and summary line from the members' JSON.
bench/peers/report.py --target DDP_JSON TOL — the target loss alone (for run.sh's --stop-at).

WORK/repK (K = 1..REPS) holds ROW.json (rank 0: validation curve, training seconds, WAN bytes, compute per
step, the row's configuration), ROW-1.json (rank 1) or ROW.why (why the row did not run). The target is
the first repetition's ddp final validation loss x (1 + TOL). Each row's time and bytes to the target are
the median over the repetitions that reached it; the summary line divides the best peer's medians by the
best xdc row's.
"""

import json
import os
import statistics
import sys

ENCRYPTED = {
    "ddp": "no (gloo: plain TCP)",
    "torchft": "no (gloo, HTTP/gRPC: plain TCP)",
    "torchft-stream": "no (gloo, HTTP/gRPC: plain TCP)",
    "hivemind": "yes (libp2p TLS 1.3)",
    "xdc": "yes (TLS 1.3)",
    "xdc-best": "yes (TLS 1.3)",
}


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def mb(n):
    return "%.2f" % (n / 1e6)


def target_of(ddp_json, tol):
    return load(ddp_json)["curve"][-1][2] * (1.0 + tol)


def rep_result(rep, row, target):
    """One repetition of one row: {"why"} or its rank 0 record, utilisation, seconds per step, final loss and
    (time, bytes) at the first validation at or below target (None when not reached)."""
    r0, r1 = load(os.path.join(rep, row + ".json")), load(os.path.join(rep, row + "-1.json"))
    if r0 is None:
        path = os.path.join(rep, row + ".why")
        return {"why": open(path).read().strip() if os.path.exists(path) else "no result"}
    util = [r["steps"] * r["compute_s_per_step"] / r["train_s"] for r in (r0, r1) if r]
    hit = next((p for p in r0["curve"] if p[2] <= target), None)
    return {"r0": r0, "util": sum(util) / len(util), "s_per_step": r0["train_s"] / r0["steps"],
            "final": r0["curve"][-1][2], "hit": (hit[1], hit[3]) if hit else None}


def main():
    if sys.argv[1] == "--target":
        print("%.6f" % target_of(sys.argv[2], float(sys.argv[3])))
        return 0
    work, tol, reps, rows = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    ddp_json = os.path.join(work, "rep1", "ddp.json")
    if not os.path.exists(ddp_json):
        print("bench-peers: the ddp row did not run, so there is no target: %s"
              % rep_result(os.path.join(work, "rep1"), "ddp", 0).get("why"))
        return 1
    target = target_of(ddp_json, tol)
    res = {row: [rep_result(os.path.join(work, "rep%d" % k), row, target) for k in range(1, reps + 1)]
           for row in rows}
    ddp = res["ddp"][0]
    # Flat's WAN time per step over its compute: (step time - compute) / compute.
    c = ddp["r0"]["compute_s_per_step"]
    ratio = (ddp["s_per_step"] - c) / c
    print("bench-peers: target val %.4f = ddp's final %.4f after %d steps x (1 + %.3f); flat DDP's WAN time per"
          " step = %.1fx its compute (%.3f s/step vs %.4f s compute); %d runs of every row, medians"
          % (target, ddp["final"], ddp["r0"]["steps"], tol, ratio, ddp["s_per_step"], c, reps))
    fmt = "%-14s %6s %9s %11s %13s %6s %8s  %s"
    print(fmt % ("row", "steps", "s/step", "to target s", "WAN MB to tgt", "util", "final",
                 "runs (s to target) / encrypted / config"))
    med = {}
    for row in rows:
        ran = [r for r in res[row] if "why" not in r]
        if not ran:
            print(fmt % (row, "-", "-", "-", "-", "-", "-", "did not run: " + res[row][0]["why"]))
            continue
        hits = [r["hit"] for r in ran if r["hit"]]
        if hits:
            med[row] = (statistics.median(h[0] for h in hits), statistics.median(h[1] for h in hits))
        runs = " ".join("%.1f" % r["hit"][0] if r["hit"] else ("-" if "why" in r else "not reached")
                        for r in res[row])
        config = ran[0]["r0"].get("config")
        note = "; ".join(x for x in (runs, ENCRYPTED[row], config) if x)
        if not hits:
            note += "; total WAN %s MB" % mb(statistics.median(r["r0"]["wan_bytes"] for r in ran))
        print(fmt % (row, "%d" % statistics.median(r["r0"]["steps"] for r in ran),
                     "%.4f" % statistics.median(r["s_per_step"] for r in ran),
                     "%.1f" % med[row][0] if row in med else "not reached",
                     mb(med[row][1]) if row in med else "-", "%.2f" % statistics.median(r["util"] for r in ran),
                     "%.4f" % statistics.median(r["final"] for r in ran), note))
    peers = {k: v for k, v in med.items() if not k.startswith("xdc")}
    ours = {k: v for k, v in med.items() if k.startswith("xdc")}
    if not ours or not peers:
        print("xdc_vs_best_peer_time=n/a xdc_vs_best_peer_bytes=n/a (%s)" % (
            "no peer reached the target" if ours else "no xdc row reached the target"))
        return 0
    best_t, best_b = min(v[0] for v in peers.values()), min(v[1] for v in peers.values())
    xt = min(ours, key=lambda k: ours[k][0])
    xb = min(ours, key=lambda k: ours[k][1])
    print("xdc_vs_best_peer_time=%.2f xdc_vs_best_peer_bytes=%.1f (xdc rows %s and %s)"
          % (best_t / ours[xt][0], best_b / max(ours[xb][1], 1), xt, xb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
