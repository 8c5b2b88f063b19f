"""PyTorchJob (training-operator v1.9), elastic included: the kind (:mod:`.kind`), its spec fields (:mod:`.spec`), its
launch inputs and program (:mod:`.options`), and the TrainJob it becomes (:mod:`.trainjob`)."""

from kftrain.job.kinds.pytorchjob.kind import SPEC, PyTorchJobKind
from kftrain.job.kinds.pytorchjob.options import PyTorchJobOptions
from kftrain.job.kinds.pytorchjob.spec import ElasticPolicy, PyTorchJobSpec, RdzvConf
from kftrain.job.kinds.pytorchjob.trainjob import to_trainjob

PYTORCHJOB = PyTorchJobKind(SPEC, PyTorchJobOptions, to_trainjob)

__all__ = ["PYTORCHJOB", "ElasticPolicy", "PyTorchJobOptions", "PyTorchJobSpec", "RdzvConf"]
