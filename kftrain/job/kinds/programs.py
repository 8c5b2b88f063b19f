"""This release's default programs: what a job built from inputs without a ``command`` runs, one entry per program.

Every kind's options (:meth:`~kftrain.job.kinds.options.KindOptions.default_program`) pick theirs here, and only here:
a kind that runs another's program (a TrainJob on an MPI runtime runs what an MPIJob runs, on a plain runtime what a
TFJob runs) names the same entry instead of importing that kind. The programs themselves are
:mod:`kftrain.programs`, run in the images :mod:`kftrain.images` names.
"""

from __future__ import annotations

from kftrain import images
from kftrain.job.kinds.options import Program

# mpirun as this release's program runs: one rank per slot of the hostfile the operator writes (no -n).
MPIRUN = ("mpirun", "--bind-to", "none", "--map-by", "slot")
TORCH_DDP_MODULE = "kftrain.programs.torch_ddp"

# PyTorch DDP, one process per replica: python itself reads the operator's MASTER_ADDR, RANK and WORLD_SIZE.
TORCH_DDP = Program(images.PYTORCH, ("python", "-m", TORCH_DDP_MODULE))
# PyTorch DDP under torchrun, which turns the operator's (or a Trainer runtime's) PET_* variables into the DDP
# program's RANK/WORLD_SIZE/MASTER_ADDR and starts the replica's processes. torchrun's -m and --module are one flag:
# each spelling is the one its component's README documents.
TORCH_DDP_TORCHRUN = Program(images.PYTORCH, ("torchrun", "--module", TORCH_DDP_MODULE))
TORCH_DDP_TORCHRUN_M = Program(images.PYTORCH, ("torchrun", "-m", TORCH_DDP_MODULE))
# TensorFlow: MultiWorkerMirroredStrategy, or ParameterServerStrategy with parameter servers, from TF_CONFIG (or
# KFTRAIN_NUM_NODES where nothing gives one: kftrain.programs.tf_config).
TF_DISTRIBUTED = Program(images.TENSORFLOW, ("python", "-m", "kftrain.programs.tf_distributed"))
# Horovod (PyTorch): mpirun starts the ranks on the hosts of the hostfile.
HOROVOD_TORCH_MPIRUN = Program(images.HOROVOD_PYTORCH, (*MPIRUN, "python", "-m", "kftrain.programs.horovod_torch"))

CATALOG = (TORCH_DDP, TORCH_DDP_TORCHRUN, TORCH_DDP_TORCHRUN_M, TF_DISTRIBUTED, HOROVOD_TORCH_MPIRUN)
