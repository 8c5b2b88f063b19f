"""A replica of a PyTorch job that proves its peers can reach it: every process joins the process group from the
operator's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; under torchrun, from the PET_* ones Trainer v2
sets), sums its rank with the others' and prints the sum, which is the same everywhere."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank)])
dist.all_reduce(total)
print(f"rank {rank} of {size} ({os.environ.get('HOSTNAME', 'local')}): sum of ranks {int(total.item())}", flush=True)
dist.destroy_process_group()
