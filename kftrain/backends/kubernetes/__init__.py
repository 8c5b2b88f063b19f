"""The Kubernetes backend: a job becomes its kind's custom resource; the operator (or Trainer) does the rest.

Importing this package does not import the Kubernetes client (slow to import): the backend itself is
``kftrain.backends.kubernetes.backend.KubernetesBackend``, made by ``kftrain.backends.make_backend``
from a :class:`KubernetesConfig`.

Modules: ``config`` (what the backend takes), ``backend`` (prepare, submit or reattach, wait, cancel),
``api`` (the client, the namespace, discovery, and every request retried), ``watch`` (following the job and
its pods; the job's conditions), ``pending`` (what a job not running yet waits for: its queue, its gang, a
scale-up; pods that cannot start), ``pod_state`` (the operators' pod labels, a pod's main container, why a job
failed), ``logs`` (every replica's log in the step's output) and ``jobs`` (the jobs kftrain launched in a
namespace, for ``kftrain jobs``).
"""

from kftrain.backends.kubernetes.config import KubernetesConfig

__all__ = ["KubernetesConfig"]
