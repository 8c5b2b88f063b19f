"""The Kubernetes backend: a job becomes a TFJob, PyTorchJob or MPIJob custom resource; the operator does the rest.

Importing this package does not import the Kubernetes client (slow to import): the backend itself is
``kftrain.backends.kubernetes.backend.KubernetesBackend``, made by ``kftrain.backends.make_backend``
from a :class:`KubernetesConfig`.

Modules: ``config`` (what the backend takes), ``backend`` (prepare, submit or reattach, wait, cancel),
``api`` (the client, the namespace, discovery, and every request retried), ``watch`` (following the job and
reading its conditions), ``podwatch`` (the job's pods, from one watch), ``pods`` (the operators' pod labels,
pods stuck Pending, why a job failed) and ``logs`` (every replica's log in the step's output).
"""

from kftrain.backends.kubernetes.config import KubernetesConfig

__all__ = ["KubernetesConfig"]
