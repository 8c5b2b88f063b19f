"""MPIJob, mpi-operator's ``kubeflow.org/v2beta1`` and the training-operator's ``kubeflow.org/v1``: the kind and the
conversion between its versions (:mod:`.kind`), its spec fields (:mod:`.spec`), its launch inputs and program
(:mod:`.options`), and the TrainJob it becomes (:mod:`.trainjob`)."""

from kftrain.job.kinds.mpijob.kind import (
    DISCOVER_HOSTS,
    HOSTFILE,
    SPEC_V1,
    SPEC_V2BETA1,
    MPIJobV1Kind,
    MPIJobV2Beta1Kind,
    discover_hosts,
    hostfile,
    to_v1,
    to_v2beta1,
)
from kftrain.job.kinds.mpijob.options import V1, V2BETA1, MPIJobOptions
from kftrain.job.kinds.mpijob.spec import LauncherCreationPolicy, MPIImplementation, MPIJobSpec
from kftrain.job.kinds.mpijob.trainjob import to_trainjob

MPIJOB_V2BETA1 = MPIJobV2Beta1Kind(SPEC_V2BETA1, MPIJobOptions, to_trainjob)
MPIJOB_V1 = MPIJobV1Kind(SPEC_V1, MPIJobOptions, to_trainjob)

__all__ = [
    "DISCOVER_HOSTS",
    "HOSTFILE",
    "MPIJOB_V1",
    "MPIJOB_V2BETA1",
    "V1",
    "V2BETA1",
    "LauncherCreationPolicy",
    "MPIImplementation",
    "MPIJobOptions",
    "MPIJobSpec",
    "discover_hosts",
    "hostfile",
    "to_v1",
    "to_v2beta1",
]
