"""The Kubernetes backend: a job becomes a TFJob, PyTorchJob or MPIJob custom resource; the operator does the rest.

Importing this package does not import the Kubernetes client (slow to import): the backend itself is
``kftrain.backends.kubernetes.backend.KubernetesBackend``, made by ``kftrain.backends.make_backend``
from a :class:`KubernetesConfig`.
"""

from kftrain.backends.kubernetes.config import KubernetesConfig

__all__ = ["KubernetesConfig"]
