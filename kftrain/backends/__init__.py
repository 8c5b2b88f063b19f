"""Backends that run a training job: ``local`` (processes here) and ``kubernetes`` (custom resources)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kftrain.backends.base import Backend, JobHandle, JobPhase, JobResult
from kftrain.backends.local import LocalBackend, LocalOptions
from kftrain.errors import KftrainError

if TYPE_CHECKING:
    from kftrain.backends.kubernetes import KubernetesOptions

BACKEND_NAMES = ("auto", "local", "kubernetes")


def resolve_backend_name(name: str = "auto") -> str:
    """``auto`` means kubernetes inside a pod (the service host is set there), local anywhere else."""
    if name not in BACKEND_NAMES:
        raise KftrainError(f"backend: {name!r} is not one of {', '.join(BACKEND_NAMES)}")
    if name == "auto":
        return "kubernetes" if os.environ.get("KUBERNETES_SERVICE_HOST") else "local"
    return name


def make_backend(
    name: str = "auto",
    *,
    local_options: LocalOptions | None = None,
    kubernetes_options: KubernetesOptions | None = None,
) -> Backend:
    resolved = resolve_backend_name(name)
    if resolved == "local":
        return LocalBackend(local_options)
    from kftrain.backends.kubernetes import KubernetesBackend  # lazy: the kubernetes client is slow to import

    return KubernetesBackend(kubernetes_options)


__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "JobHandle",
    "JobPhase",
    "JobResult",
    "LocalBackend",
    "LocalOptions",
    "make_backend",
    "resolve_backend_name",
]
