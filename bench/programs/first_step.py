"""P2 program: join the process group, do one training step (an allreduce of gradients), exit.

Prints FIRST_STEP <unix time> on rank 0 so the harness can measure launch-to-first-step latency.
"""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 10))
loss = model(torch.randn(32, 64)).sum()
loss.backward()
if dist.get_rank() == 0:
    print(f"FIRST_STEP {time.time():.6f} world={dist.get_world_size()} rank_env={os.environ.get('RANK')}", flush=True)
dist.destroy_process_group()
