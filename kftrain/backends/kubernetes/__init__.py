"""The Kubernetes backend: a job becomes its kind's custom resource; the operator (or Trainer) does the rest.

Importing this package does not import the Kubernetes client (slow to import): the backend is
``kftrain.backends.kubernetes.backend.KubernetesBackend``, made by ``kftrain.backends.make_backend`` from a
:class:`KubernetesConfig`. Modules: config, backend (prepare, submit or reattach, wait, cancel), api (every request,
retried), watch and backoff (following the job and its pods), pending, refused and incarnation (what a job not
running yet waits for, and why its pods are refused), pod_state, logs and jobs (``kftrain jobs``).
"""

from kftrain.backends.kubernetes.config import KubernetesConfig

__all__ = ["KubernetesConfig"]
