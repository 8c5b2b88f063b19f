"""P3 program: samples/s of a compute-bound MLP under DDP (gloo, 1 thread per process).

Synthetic data, fixed batch. After warm-up prints ``THROUGHPUT <samples/s of this process>`` and
``PHASES <forward ms> <backward ms> <optimizer ms>`` (means per step): under DDP the backward pass
includes the gradient allreduce it waits for, so the backward difference against a single process is
what communication costs. Runs as a single process when WORLD_SIZE is unset.
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
phases = [0.0, 0.0, 0.0]
for step in range(args.warmup + args.steps):
    if step == args.warmup:
        started = time.perf_counter()
        phases = [0.0, 0.0, 0.0]
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    t3 = time.perf_counter()
    phases = [phases[0] + t1 - t0, phases[1] + t2 - t1, phases[2] + t3 - t2]
elapsed = time.perf_counter() - started
ms = " ".join(f"{1000 * p / args.steps:.1f}" for p in phases)
# One write per line: ranks share a terminal and must not interleave within a line.
print(f"THROUGHPUT {args.steps * args.batch / elapsed:.3f}\nPHASES {ms}", flush=True)
if world > 1:
    dist.destroy_process_group()
