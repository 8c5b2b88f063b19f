"""kftrain: the runtime package behind the Kubeflow training pipeline components.

Everything a pipeline step does inside its container lives here: the typed job
model for TFJob / PyTorchJob / MPIJob, the backends that run a job (local
processes or the Kubernetes API), storage by URI, and the data-prep, trainer,
evaluation and export programs.
"""

__version__ = "0.1.0"
