"""The one policy for what a platform sets on every replica's pod: resources, placement, identity, credentials.

:class:`PodSettings` holds what the launch inputs give; :func:`apply_pod_settings` puts it on every replica
of a job, typed or from a manifest, the same way on every backend:

* resources on the main container: ``cpu`` and ``memory`` as request and limit alike (Guaranteed QoS: the
  pods are the last evicted under node pressure, and a static CPU manager gives them whole cores, so one
  rank is not slowed by its neighbours and with it the whole synchronous job); ``gpus`` as an
  ``nvidia.com/gpu`` limit (Kubernetes takes the request from it; GPUs cannot be overcommitted), never on a
  replica type its kind keeps GPU-free (the MPI launcher that only runs mpirun);
* node selector, tolerations, service account and image pull secrets on every pod;
* ``secret_env`` as ``valueFrom.secretKeyRef``, so a credential never appears as a literal value.

The settings fill in what a pod does not already say: a job built from inputs has nothing of its own, and
a manifest's own values (its node selector keys, service account, resources, env) win over the inputs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kftrain.job.kinds import kind_of, main_container
from kftrain.job.model import Container, EnvVar, TrainingJob

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class PodSettings:
    cpu: str = ""
    memory: str = ""
    gpus: int = 0
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    service_account: str = ""
    image_pull_secrets: Sequence[str] = ()
    # ENV_NAME -> (secret name, key)
    secret_env: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def apply_pod_settings(job: TrainingJob, settings: PodSettings) -> TrainingJob:
    """A copy of ``job`` with ``settings`` on every replica's pod and main container."""
    out = copy.deepcopy(job)
    kind = kind_of(out)
    for rtype, rspec in out.replica_specs.items():
        pod = rspec.template.spec
        if settings.node_selector:
            pod.node_selector = {**settings.node_selector, **(pod.node_selector or {})}
        if settings.tolerations:
            tolerations = pod.tolerations or []
            pod.tolerations = [*tolerations, *(dict(t) for t in settings.tolerations if dict(t) not in tolerations)]
        if settings.service_account and not pod.service_account_name:
            pod.service_account_name = settings.service_account
        if settings.image_pull_secrets:
            named = {s.get("name") for s in pod.image_pull_secrets or []}
            pod.image_pull_secrets = [*(pod.image_pull_secrets or [])] + [
                {"name": s} for s in settings.image_pull_secrets if s not in named
            ]
        container = main_container(out, rtype)
        if container is None:
            continue
        gpus = settings.gpus if kind.gpus_allowed(out, rtype) else 0
        container.resources = resources(container, cpu=settings.cpu, memory=settings.memory, gpus=gpus)
        defined = {e.name for e in container.env or []}
        container.env = [
            *(container.env or []),
            *(
                EnvVar(name=name, value_from={"secretKeyRef": {"name": secret, "key": key}})
                for name, (secret, key) in settings.secret_env.items()
                if name not in defined
            ),
        ] or None
    return out


def resources(container: Container, *, cpu: str = "", memory: str = "", gpus: int = 0) -> dict[str, Any] | None:
    """``container``'s resources with these filled in where it sets none: cpu and memory as request and
    limit, GPUs as a limit."""
    current = copy.deepcopy(container.resources or {})
    requests: dict[str, Any] = dict(current.get("requests") or {})
    limits: dict[str, Any] = dict(current.get("limits") or {})
    for name, value in (("cpu", cpu), ("memory", memory)):
        if value and name not in requests and name not in limits:
            requests[name] = limits[name] = value
    if gpus and GPU_RESOURCE not in limits:
        limits[GPU_RESOURCE] = gpus
    if limits:
        current["limits"] = limits
    if requests:
        current["requests"] = requests
    return current or None
