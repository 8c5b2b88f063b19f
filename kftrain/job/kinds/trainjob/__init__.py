"""TrainJob: Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``, v2.3.0), run as a JobSet from a runtime.

:mod:`.kind` (the kind: who runs, listens and initializes, the cluster dependency), :mod:`.policies` (each ML
policy plugin's env and reserved names), :mod:`.webhooks` (what Trainer's admission webhooks refuse),
:mod:`.runtime` (resolving a TrainJob on its runtime as the Trainer does), :mod:`.catalog` (the runtimes a TrainJob
may name), :mod:`.builtin` (the runtimes Trainer installs), :mod:`.api` (a TrainJob's fields checked with Trainer's
own API models), :mod:`.patch` (pod changes carried back into the TrainJob; what a runtime patch may hold),
:mod:`.convert` (another kind's job as a TrainJob), :mod:`.options` (the launch inputs and program).
"""

from kftrain.job.kinds.trainjob.kind import SPEC, TrainJobKind
from kftrain.job.kinds.trainjob.options import TrainJobOptions

TRAINJOB = TrainJobKind(SPEC, TrainJobOptions)

__all__ = ["TRAINJOB", "TrainJobOptions"]
