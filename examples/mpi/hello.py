"""A rank of an MPI job that needs no MPI library: it reports what mpirun gave it.

    mpirun -n 2 python examples/mpi/hello.py

Used by the tests to run the official MPIJob examples locally with their command replaced
(``kftrain launch -f EXAMPLE.yaml --local --command "mpirun -n 2 python examples/mpi/hello.py"``).
"""

import os
import socket
import sys

rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK") or "?"
size = os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or "?"
hostfile = (
    os.environ.get("OMPI_MCA_orte_default_hostfile")  # noqa: SIM112 (OpenMPI's MCA names are lower case)
    or os.environ.get("HYDRA_HOST_FILE")
    or ""
)
# One write per line (see hvd_allreduce.py): unbuffered print() writes text and newline separately.
sys.stdout.write(f"hello from python rank {rank} of {size} on {socket.gethostname()} (hostfile {hostfile or 'none'})\n")
sys.stdout.flush()
sys.exit(0 if rank != "?" else 1)
