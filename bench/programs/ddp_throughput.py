"""P3 program: samples/s of a compute-bound MLP under DDP (gloo, 1 thread per process).

Synthetic data, fixed batch; prints THROUGHPUT <samples/s of this process> after warm-up.
Runs as a single process when WORLD_SIZE is unset.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--batch", type=int, default=1024)
parser.add_argument("--width", type=int, default=2048)
args = parser.parse_args()

torch.set_num_threads(1)
world = int(os.environ.get("WORLD_SIZE", "1"))
if world > 1:
    dist.init_process_group("gloo", init_method="env://")
torch.manual_seed(0)
net = torch.nn.Sequential(
    torch.nn.Linear(args.width, args.width),
    torch.nn.ReLU(),
    torch.nn.Linear(args.width, args.width),
    torch.nn.ReLU(),
    torch.nn.Linear(args.width, 10),
)
model = torch.nn.parallel.DistributedDataParallel(net) if world > 1 else net
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(args.batch, args.width)
y = torch.randint(0, 10, (args.batch,))
loss_fn = torch.nn.CrossEntropyLoss()
for step in range(args.warmup + args.steps):
    if step == args.warmup:
        started = time.perf_counter()
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
elapsed = time.perf_counter() - started
print(f"THROUGHPUT {args.steps * args.batch / elapsed:.3f}", flush=True)
if world > 1:
    dist.destroy_process_group()
