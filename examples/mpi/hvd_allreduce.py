"""Horovod allreduce across every rank: each rank contributes rank + 1, everyone must see the same sum.

mpirun -n 2 python examples/mpi/hvd_allreduce.py
"""

import sys

import horovod.torch as hvd
import torch

hvd.init()
rank, size = hvd.rank(), hvd.size()
total = hvd.allreduce(torch.tensor([float(rank + 1)]), op=hvd.Sum, name="sum")
expected = size * (size + 1) / 2
print(f"horovod rank {rank} of {size}: allreduce sum {total.item():g} (expected {expected:g})", flush=True)
hvd.shutdown()
sys.exit(0 if total.item() == expected else 1)
