"""Build a job from typed inputs, as the launch components do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kftrain.job.kinds import kind_for
from kftrain.job.model import (
    Container,
    EnvVar,
    JobSpec,
    ObjectMeta,
    PodSpec,
    PodTemplate,
    ReplicaSpec,
    RestartPolicy,
    TrainingJob,
)
from kftrain.job.validate import validate_job


@dataclass
class ReplicaInput:
    """One replica type of a job built from inputs."""

    replicas: int
    command: Sequence[str] | None = None
    args: Sequence[str] | None = None
    image: str | None = None
    restart_policy: RestartPolicy | None = None
    resources: Mapping[str, Any] | None = None
    env: Mapping[str, str] = field(default_factory=dict)


def build_job(
    kind: str,
    name: str,
    replicas: Mapping[str, ReplicaInput],
    *,
    image: str | None = None,
    namespace: str | None = None,
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    api_version: str | None = None,
    spec: JobSpec | None = None,
) -> TrainingJob:
    """A validated job with one container per replica type, named as the operator expects.

    ``env`` is set on every replica. Platform settings (resources from cpu/memory/gpus, placement,
    credentials from secrets) are applied afterwards by :func:`kftrain.job.pod_settings.apply_pod_settings`.
    """
    kspec = kind_for(kind, api_version).spec
    container_name = getattr(spec, "main_container", None) or kspec.container_name
    shared_env = [EnvVar(name=k, value=v) for k, v in (env or {}).items()]
    replica_specs: dict[str, ReplicaSpec] = {}
    for rtype in kspec.replica_types:  # render in the operator's canonical order
        if rtype not in replicas:
            continue
        inp = replicas[rtype]
        container = Container(
            name=container_name,
            image=inp.image or image,
            command=list(inp.command) if inp.command else None,
            args=list(inp.args) if inp.args else None,
            env=(shared_env + [EnvVar(name=k, value=v) for k, v in inp.env.items()]) or None,
            resources=dict(inp.resources) if inp.resources else None,
        )
        replica_specs[rtype] = ReplicaSpec(
            replicas=inp.replicas,
            restart_policy=inp.restart_policy,
            template=PodTemplate(spec=PodSpec(containers=[container])),
        )
    for rtype in replicas:
        if rtype not in replica_specs:
            replica_specs[rtype] = ReplicaSpec(replicas=replicas[rtype].replicas)  # validate_job names it
    job = TrainingJob(
        kind=kspec.kind,
        api_version=kspec.api_version,
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            labels=dict(labels) if labels else None,
            annotations=dict(annotations) if annotations else None,
        ),
        replica_specs=replica_specs,
        spec=spec or kspec.spec_type(),
    )
    validate_job(job)
    return job
