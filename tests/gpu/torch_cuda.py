"""torch_cuda.py — tests/gpu/run.sh's torch-cuda step: xdc.torch on CUDA tensors, run by `xdc launch --exec` as
one process per region on the one GPU. DiLoCo over a float32 model (the outer state on the GPU), over a
bfloat16 one with offload=True (the outer state in pinned host memory), and the DDP hook over a float32 model
(a gloo group over the members for DDP's start broadcast). Prints
"torch_cuda: rank R: diloco HASH bf16 HASH ddp HASH" (the step compares the members' lines) and exits 0.
"""
import torch
import torch.nn as nn

import xdc
import xdc.torch


def model_of(dtype, dev):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 1)).to(device=dev, dtype=dtype)


def train(model, step, rank, dev, dtype, steps):
    gen = torch.Generator(device=dev).manual_seed(100 + rank)  # each member its own batches
    for _ in range(steps):
        x = torch.randn(32, 64, device=dev, generator=gen).to(dtype)
        (model(x).float() ** 2).mean().backward()
        step()


def main():
    dev = torch.device("cuda", 0)
    with xdc.Comm() as comm:
        rank, hashes = comm.rank, []
        for dtype, offload, tag in ((torch.float32, False, 600), (torch.bfloat16, True, 700)):
            model = model_of(dtype, dev)
            inner = torch.optim.SGD(model.parameters(), lr=0.05)
            diloco = xdc.torch.DiLoCo(comm, model, inner, sync_every=4, tag=tag, offload=offload)

            def step():
                diloco.step()
                inner.zero_grad()

            train(model, step, rank, dev, dtype, 8)  # rounds after steps 4 and 8
            hashes.append(xdc.torch.param_hash(model))
        xdc.torch.init_process_group(comm)
        model = model_of(torch.float32, dev)
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[0], bucket_cap_mb=0.01)
        ddp.register_comm_hook(*xdc.torch.ddp_hook(comm))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)

        def ddp_step():
            opt.step()
            opt.zero_grad()

        train(ddp, ddp_step, rank, dev, torch.float32, 3)
        torch.cuda.synchronize()
        hashes.append(xdc.torch.param_hash(model))
        print("torch_cuda: rank %d: diloco %s bf16 %s ddp %s" % (rank, *hashes), flush=True)


if __name__ == "__main__":
    main()
