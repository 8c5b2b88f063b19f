"""The Kubernetes backend: a job becomes its kind's custom resource; the operator (or Trainer) does the rest.

Importing this package does not import the Kubernetes client (slow to import): the backend is
``kftrain.backends.kubernetes.backend.KubernetesBackend``, made by ``kftrain.backends.make_backend`` from a
:class:`KubernetesConfig`. Modules: config, backend (prepare, submit or reattach, wait, cancel), api (every request,
retried), watch and backoff (following the job and its pods), pending, refused and incarnation (what a job not
running yet waits for, pods refused for good, which events are this job's), pod_state, logs, jobs (``kftrain jobs``).
"""

from kftrain.backends.kubernetes.config import KubernetesConfig

__all__ = ["KubernetesConfig"]
