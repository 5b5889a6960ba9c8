// allreduce_gloo.cc — the Gloo baseline for bench/intra: gloo::allreduce (fp32 sum, in place, the ring
// algorithm PyTorch's CPU process group uses) over TCP loopback, same sizes, iteration counts and
// fastest-of-3 timing as bench_intra, printing the same "row" lines. Forks its ranks, which meet through
// a FileStore in DIR. Built by run.sh with g++; not part of the xdc build.
//   allreduce_gloo RANKS MIN_BYTES MAX_BYTES DIR
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

static size_t iters_for(size_t bytes)
{
    size_t it = ((size_t)128 << 20) / bytes;
    return it < 5 ? 5 : it > 200 ? 200 : it;
}

static double now_us()
{
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static int rank_main(int rank, int n, size_t min_b, size_t max_b, const char *dir)
{
    gloo::transport::tcp::attr attr("127.0.0.1");
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
    ctx->setTimeout(std::chrono::seconds(120));
    ctx->connectFullMesh(store, dev);
    std::vector<float> buf(max_b / 4, 0.0f);
    auto allreduce = [&](size_t count) {
        gloo::AllreduceOptions opts(ctx);
        opts.setOutput(buf.data(), count);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setReduceFunction(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
        gloo::allreduce(opts);
    };
    auto barrier = [&]() {
        gloo::BarrierOptions opts(ctx);
        gloo::barrier(opts);
    };
    for (size_t bytes = min_b; bytes <= max_b; bytes *= 2) {
        size_t count = bytes / 4, it = iters_for(bytes);
        allreduce(count);
        barrier();
        double us = 1e30;
        for (int trial = 0; trial < 3; trial++) { // fastest of 3, as bench_intra.c
            double t0 = now_us();
            for (size_t i = 0; i < it; i++) allreduce(count);
            double t = (now_us() - t0) / (double)it;
            us = t < us ? t : us;
            barrier();
        }
        if (rank == 0) {
            double algbw = (double)bytes / us / 1e3, busbw = algbw * 2.0 * (n - 1) / n;
            std::printf("row %d %zu %.1f %.3f %.3f\n", n, bytes, us, algbw, busbw);
            std::fflush(stdout);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        std::fprintf(stderr, "usage: allreduce_gloo RANKS MIN_BYTES MAX_BYTES DIR\n");
        return 64;
    }
    int n = std::atoi(argv[1]);
    size_t min_b = std::strtoull(argv[2], nullptr, 0), max_b = std::strtoull(argv[3], nullptr, 0);
    std::fflush(stdout);
    std::vector<pid_t> pids;
    for (int r = 0; r < n; r++) {
        pid_t p = fork();
        if (p == 0) {
            int rc = 1;
            try {
                rc = rank_main(r, n, min_b, max_b, argv[4]);
            } catch (const std::exception &e) {
                std::fprintf(stderr, "allreduce_gloo: rank %d: %s\n", r, e.what());
            }
            std::fflush(stdout);
            _exit(rc);
        }
        pids.push_back(p);
    }
    int bad = 0;
    for (pid_t p : pids) {
        int ws = 0;
        waitpid(p, &ws, 0);
        bad |= !WIFEXITED(ws) || WEXITSTATUS(ws) != 0;
    }
    return bad ? 75 : 0;
}
