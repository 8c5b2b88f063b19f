"""TrainJob: Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``, v2.3.0), run as a JobSet from a runtime.

:mod:`.kind` (the kind: each ML policy's contract, the webhooks' rules), :mod:`.runtime` (resolving a TrainJob
on its runtime as the Trainer does), :mod:`.catalog` (the runtimes a TrainJob may name), :mod:`.builtin` (the
runtimes Trainer installs), :mod:`.api` (a TrainJob's fields checked with Trainer's own API models),
:mod:`.patch` (pod changes carried back into the TrainJob; what a runtime patch may hold),
:mod:`.convert` (another kind's job as a TrainJob), :mod:`.options` (the launch inputs and program).
"""

from kftrain.job.kinds.trainjob.kind import SPEC, TrainJobKind
from kftrain.job.kinds.trainjob.options import TrainJobOptions

TRAINJOB = TrainJobKind(SPEC, TrainJobOptions)

__all__ = ["TRAINJOB", "TrainJobOptions"]
