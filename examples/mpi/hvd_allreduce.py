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
# One write per line: the operator's env runs Python unbuffered, so print() would write the text and its
# newline separately, and mpirun, merging the ranks' output, could put the other rank's text in between.
sys.stdout.write(f"horovod rank {rank} of {size}: allreduce sum {total.item():g} (expected {expected:g})\n")
sys.stdout.flush()
hvd.shutdown()
sys.exit(0 if total.item() == expected else 1)
