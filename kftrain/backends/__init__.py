"""Backends that run a training job, one package each, chosen by the type of their config.

``local`` runs every replica as a process here with its operator's environment; ``kubernetes`` creates
the custom resource and lets the operator run it. :func:`make_backend` takes a :class:`LocalConfig` or a
:class:`KubernetesConfig`; :meth:`Backend.run` submits, publishes the job's identity, waits and cancels on
interruption, the same for both.
"""

from __future__ import annotations

import os

from kftrain.backends.base import Backend, BackendConfig, JobHandle, JobPhase, JobResult, load_identity
from kftrain.backends.kubernetes.config import KubernetesConfig
from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.errors import KftrainError

BACKEND_NAMES = ("auto", "local", "kubernetes")


def resolve_backend_name(name: str = "auto") -> str:
    """``auto`` means kubernetes inside a pod (the service host is set there), local anywhere else."""
    if name not in BACKEND_NAMES:
        raise KftrainError(f"backend: {name!r} is not one of {', '.join(BACKEND_NAMES)}")
    if name == "auto":
        return "kubernetes" if os.environ.get("KUBERNETES_SERVICE_HOST") else "local"
    return name


def make_backend(config: BackendConfig) -> Backend:
    """The backend ``config`` is for."""
    if isinstance(config, LocalConfig):
        return LocalBackend(config)
    if isinstance(config, KubernetesConfig):
        from kftrain.backends.kubernetes.backend import KubernetesBackend  # the client is slow to import

        return KubernetesBackend(config)
    raise TypeError(f"no backend takes a {type(config).__name__}")


__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "BackendConfig",
    "JobHandle",
    "JobPhase",
    "JobResult",
    "KubernetesConfig",
    "LocalBackend",
    "LocalConfig",
    "load_identity",
    "make_backend",
    "resolve_backend_name",
]
