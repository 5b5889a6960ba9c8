"""bench/peers/peer.py — one member of one row of `make bench-peers` (bench/peers/run.sh starts it).

    peer.py ROW --rank R --world N --out DIR [--master ADDR] [--steps S] [--batch B] [--lr LR] [--H H]
            [--eval-every E] [--data PATH] [--stop-at LOSS]

ROW is ddp (torch DDP over gloo, an all-reduce of the gradients every step), torchft (torchft's DiLoCo),
torchft-stream (torchft's streaming DiLoCo, its best configuration here: two fragments, each synced
every H steps and applied fragment_sync_delay = 1 step later, bucketized; quantized only on CUDA, as
torchft's quantization is Triton kernels), hivemind (hivemind.Optimizer with local updates: parameters
averaged every H steps' worth of samples), xdc (xdc.torch.DiLoCo with the run file's codec, int8: the
link's) or xdc-best (the same with the run file's sparse codec and, where this xdc.torch's DiLoCo has
them, its best options BEST_XDC: keep_unsent, overlap; the row says which it applied). The xdc rows are
started by `xdc agent --exec`, so the rank comes from the agent's environment. --stop-at: both members
stop at the first validation where rank 0's loss is at or below LOSS (rank 0 leaves DIR/ROW.stop), for a
row whose members may stop independently (hivemind).
Every row trains examples/torch/gpt.py's GPT (same seed, so the same initial weights everywhere) on the
same batches (Corpus.batch(B, rank, step)) with AdamW at a constant learning rate; the DiLoCo rows add
the outer step every H inner steps (Nesterov SGD, lr 0.7, momentum 0.9, as the DiLoCo paper).

Both members validate every E steps on the same validation set; the clock stops while they do. Rank 0
writes DIR/ROW.json: its validation curve (step, training seconds, loss, WAN bytes so far), the per-step
compute time measured on this process before the run (the same steps with no communication), the
training seconds, and the bytes through this namespace's device (`xw0`, the emulated WAN's TUN device:
every byte to or from the other region) during training. Rank 1 writes DIR/ROW-1.json with its own
compute and wall times. A member that cannot import its row's package writes the error and exits 3.
"""

import argparse
import inspect
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "torch"))

import torch  # noqa: E402

from gpt import GPT, Corpus  # noqa: E402

OUTER_LR, OUTER_MOMENTUM = 0.7, 0.9
# xdc.torch.DiLoCo's best mode, for the xdc-best row: each option is passed when DiLoCo takes it
BEST_XDC = {"keep_unsent": True, "overlap": True}


def wan_bytes():
    """Bytes sent plus received on this namespace's emulated WAN device (0 outside a namespace)."""
    total = 0
    for d in ("tx_bytes", "rx_bytes"):
        path = "/sys/class/net/%s/statistics/%s" % (os.environ.get("PEERS_WAN_DEV", "xw0"), d)
        if os.path.exists(path):
            with open(path) as f:
                total += int(f.read())
    return total


def compute_seconds_per_step(corpus, args, rank):
    """Median seconds of one training step (forward, backward, AdamW) on this process, no communication."""
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    times = []
    for s in range(args.calib_steps):
        t = time.perf_counter()
        x, y = corpus.batch(args.batch, rank, 10**6 + s)
        model(x, y)[1].backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


class Run:
    """The training clock (eval time excluded), the validation curve and the WAN counter."""

    def __init__(self, args, rank, corpus):
        self.args, self.rank, self.corpus = args, rank, corpus
        self.curve = []
        self.steps_done = 0
        self.stop = os.path.join(args.out, args.row + ".stop")
        self.train_s = 0.0
        self.bytes0 = wan_bytes()
        self.t0 = time.perf_counter()

    def evaluate(self, model, step):
        self.train_s += time.perf_counter() - self.t0
        loss = self.corpus.val_loss(model)
        self.curve.append([step, round(self.train_s, 4), round(loss, 5), wan_bytes() - self.bytes0])
        self.steps_done = step
        if self.rank == 0:
            print("%s step %d: val %.4f at %.2f s, %d WAN bytes" % (self.args.row, step, loss, self.train_s,
                                                                     self.curve[-1][3]), flush=True)
            if self.args.stop_at is not None and loss <= self.args.stop_at:
                open(self.stop, "w").close()
        self.t0 = time.perf_counter()

    def stopped(self):
        """--stop-at: rank 0 reached the loss (at this validation or, for rank 1, an earlier one)."""
        return self.args.stop_at is not None and os.path.exists(self.stop)

    def finish(self, t_compute, extra):
        out = {
            "row": self.args.row,
            "rank": self.rank,
            "steps": self.steps_done,
            "batch": self.args.batch,
            "compute_s_per_step": t_compute,
            "train_s": self.train_s,
            "wan_bytes": wan_bytes() - self.bytes0,
            "curve": self.curve,
        }
        out.update(extra)
        name = self.args.row + ("" if self.rank == 0 else "-%d" % self.rank) + ".json"
        with open(os.path.join(self.args.out, name), "w") as f:
            json.dump(out, f)


def train(run, model, step_fn, steps, eval_every):
    """steps x (batch, forward, backward, step_fn), validating after step 0 and every eval_every steps."""
    run.evaluate(model, 0)
    for s in range(1, steps + 1):
        x, y = run.corpus.batch(run.args.batch, run.rank, s)
        model(x, y)[1].backward()
        step_fn()
        if s % eval_every == 0 or s == steps:
            run.evaluate(model, s)
            if run.stopped():
                return


def row_ddp(args, rank, corpus):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method="tcp://%s:29510" % args.master, rank=rank, world_size=args.world)
    model = DDP(GPT())  # one bucket: the 0.55 MB of gradients fit in DDP's default 25 MB
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    def step():
        opt.step()
        opt.zero_grad()

    run = Run(args, rank, corpus)
    train(run, model, step, args.steps, args.eval_every)
    dist.destroy_process_group()
    return run, {}


def row_torchft(args, rank, corpus):
    from datetime import timedelta

    import torch.distributed
    from torchft import Manager, ProcessGroupGloo
    from torchft.local_sgd import DiLoCo

    model = GPT()
    inner = torch.optim.AdamW(model.parameters(), lr=args.lr)
    if args.row == "torchft-stream":  # two fragments of about equal size, each with its outer optimizer
        half = len(model.blocks) // 2
        fragments = [torch.nn.ModuleList([model.tok, model.pos, *model.blocks[:half]]),
                     torch.nn.ModuleList([*model.blocks[half:], model.ln, model.head])]
        quantize = torch.cuda.is_available()  # torchft's quantized all-reduce is Triton kernels
        options = {"fragment_sync_delay": 1, "use_bucketization": True, "should_quantize": quantize}
        note = "2 fragments, fragment_sync_delay 1, bucketized, %s" % (
            "quantized" if quantize else "fp32 (its quantization needs CUDA)")
    else:
        fragments, options, note = [model], {}, "fp32"
    outer = [torch.optim.SGD(f.parameters(), lr=OUTER_LR, momentum=OUTER_MOMENTUM, nesterov=True) for f in fragments]
    addr = os.environ["PEERS_ADDR"]
    # Each region is a replica group of one process: its own TCPStore (which torchrun would start; the
    # Manager only connects to it) and manager server on its address; the lighthouse (bench/peers/run.sh
    # starts torchft_lighthouse) on region 0's.
    store = torch.distributed.TCPStore(addr, 29520, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=120)),
        min_replica_size=args.world,
        load_state_dict=lambda sd: model.load_state_dict(sd["model"]),
        state_dict=lambda: {"model": model.state_dict()},
        replica_id="region%d" % rank,
        store_addr=addr,
        store_port=29520,
        rank=0,
        world_size=1,
        lighthouse_addr="http://%s:29511" % args.master,
        port=29530,
        hostname=addr,
        timeout=timedelta(seconds=120),
        quorum_timeout=timedelta(seconds=120),
        use_async_quorum=False,
        # Both start from the same seed; the step-0 sync would fetch region 0's weights over HTTP from
        # socket.gethostname(), which names this machine, not the namespace's address.
        init_sync=False,
    )

    def step():
        inner.step()  # DiLoCo's hook on the inner optimizer: the outer round every H steps
        inner.zero_grad()

    with DiLoCo(manager, fragments, inner, outer if len(outer) > 1 else outer[0], sync_every=args.H, **options):
        run = Run(args, rank, corpus)
        train(run, model, step, args.steps, args.eval_every)
    manager.shutdown(wait=False)
    del store
    return run, {"config": note}


def row_hivemind(args, rank, corpus):
    import hivemind

    addr = os.environ["PEERS_ADDR"]
    maddrs = os.path.join(args.out, "hivemind-maddrs")
    initial = []
    if rank > 0:  # region 0's DHT address, written by region 0 when its DHT is up
        deadline = time.time() + 120
        while not os.path.exists(maddrs) and time.time() < deadline:
            time.sleep(0.2)
        with open(maddrs) as f:
            initial = f.read().split()
    dht = hivemind.DHT(host_maddrs=["/ip4/%s/tcp/29540" % addr], initial_peers=initial, start=True)
    if rank == 0:
        with open(maddrs + ".tmp", "w") as f:
            f.write("\n".join(str(a) for a in dht.get_visible_maddrs()))
        os.rename(maddrs + ".tmp", maddrs)
    model = GPT()
    # use_local_updates: AdamW every step on the local batch; the peers average parameters each time the
    # collaboration has processed target_batch_size samples (H steps of every peer): DiLoCo with outer
    # SGD lr 1 and no momentum, which is what hivemind offers.
    opt = hivemind.Optimizer(
        dht=dht,
        run_id="bench-peers",
        batch_size_per_step=args.batch,
        target_batch_size=args.batch * args.world * args.H,
        params=model.parameters(),
        optimizer=lambda params: torch.optim.AdamW(params, lr=args.lr),
        use_local_updates=True,
        matchmaking_time=2.0,
        averaging_timeout=60.0,
        verbose=False,
    )

    def step():
        opt.step()
        opt.zero_grad()

    run = Run(args, rank, corpus)
    train(run, model, step, args.steps, args.eval_every)
    opt.shutdown()
    dht.shutdown()
    return run, {}


def row_xdc(args, rank, corpus):
    import xdc
    import xdc.torch

    comm = xdc.Comm()
    model = GPT()
    inner = torch.optim.AdamW(model.parameters(), lr=args.lr)
    takes = inspect.signature(xdc.torch.DiLoCo).parameters
    options = {k: v for k, v in BEST_XDC.items() if k in takes} if args.row == "xdc-best" else {}
    diloco = xdc.torch.DiLoCo(comm, model, inner, sync_every=args.H, fragments=1, **options)
    lacks = sorted(set(BEST_XDC) - set(options)) if args.row == "xdc-best" else []
    note = ", ".join(["%s=%s" % kv for kv in sorted(options.items())] + ["no %s in this xdc.torch" % k for k in lacks])

    def step():
        diloco.step()
        inner.zero_grad()

    run = Run(args, rank, corpus)
    train(run, model, step, args.steps, args.eval_every)
    diloco.flush()
    stats = comm.stats()  # libxdc's own count, next to the device's
    comm.finalize()
    comm.close()
    return run, {"xdc_wan_tx_bytes": stats.get("wan_tx_bytes"), "xdc_wan_rx_bytes": stats.get("wan_rx_bytes"),
                 "config": note}


ROWS = {"ddp": row_ddp, "torchft": row_torchft, "torchft-stream": row_torchft, "hivemind": row_hivemind,
        "xdc": row_xdc, "xdc-best": row_xdc}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("row", choices=sorted(ROWS))
    p.add_argument("--rank", type=int, default=int(os.environ.get("XDC_REGION_INDEX", "0")))
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--master", default="10.77.0.1")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--H", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--calib-steps", type=int, default=15)
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--stop-at", type=float, default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)  # the same initial weights in every member of every row
    corpus = Corpus(args.data)
    t_compute = compute_seconds_per_step(corpus, args, args.rank)
    torch.manual_seed(0)
    t = time.perf_counter()
    try:
        run, extra = ROWS[args.row](args, args.rank, corpus)
    except ImportError as e:
        with open(os.path.join(args.out, "%s-error-%d.txt" % (args.row, args.rank)), "w") as f:
            f.write("import failed: %s" % e)
        print("%s: import failed: %s" % (args.row, e), file=sys.stderr)
        return 3
    except Exception as e:
        traceback.print_exc()
        with open(os.path.join(args.out, "%s-error-%d.txt" % (args.row, args.rank)), "w") as f:
            f.write("%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        return 1
    run.finish(t_compute, dict(extra, setup_and_run_s=time.perf_counter() - t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
