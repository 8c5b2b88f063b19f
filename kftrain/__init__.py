"""kftrain: the runtime package behind the Kubeflow training pipeline components.

Everything a pipeline step does inside its container lives here: the typed job
model with one package per kind (``job``: TFJob, PyTorchJob, MPIJob, TrainJob), the
backends that run a job (``backends``: local processes or the Kubernetes API), the
launch step (``launch``), the other steps (``steps``: data prep, evaluation,
export), storage by URI (``storage``), the model contract (``models``), the
metrics contract (``metrics``), this release's reference training programs
(``programs``) and the command line (``cli``).
"""

__version__ = "0.1.0"
