"""kftrain: the runtime package behind the Kubeflow training pipeline components.

Everything a step does in its container: the job model (``job``, one package per kind), the backends that run a job
(``backends``), the launch step (``launch``), the other steps (``steps``), storage by URI (``storage``), the model
and metrics contracts (``models``, ``metrics``), the reference programs (``programs``) and the command (``cli``).
"""

__version__ = "0.1.0"
