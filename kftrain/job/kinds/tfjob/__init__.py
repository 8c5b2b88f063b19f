"""TFJob (training-operator v1.9): the kind (:mod:`.kind`), its spec fields (:mod:`.spec`), its launch inputs and
program (:mod:`.options`)."""

from kftrain.job.kinds.tfjob.kind import SPEC, TFJobKind
from kftrain.job.kinds.tfjob.options import TFJobOptions
from kftrain.job.kinds.tfjob.spec import TFJobSpec

TFJOB = TFJobKind(SPEC, TFJobOptions)

__all__ = ["TFJOB", "TFJobOptions", "TFJobSpec"]
