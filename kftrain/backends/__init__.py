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


def choose_backend(name: str = "auto") -> tuple[str, str]:
    """The backend ``name`` selects, and why.

    ``auto`` is kubernetes only for a KFP task running in a pod (KFP gives its task pods ``KFP_POD_NAME``, and
    Kubernetes every pod ``KUBERNETES_SERVICE_HOST``); anywhere else, a notebook's pod included, it is local,
    so an interactive run never creates cluster jobs pointing at files that only exist where it runs.
    """
    if name not in BACKEND_NAMES:
        raise KftrainError(f"backend: {name!r} is not one of {', '.join(BACKEND_NAMES)}")
    if name != "auto":
        return name, "asked for"
    in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    kfp_pod = os.environ.get("KFP_POD_NAME")
    if in_pod and kfp_pod:
        return "kubernetes", f"auto: running as a KFP task in pod {kfp_pod}"
    if in_pod:
        return "local", "auto: in a pod, but not a KFP task's (no KFP_POD_NAME)"
    return "local", "auto: not in a Kubernetes pod"


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
    "choose_backend",
    "load_identity",
    "make_backend",
]
