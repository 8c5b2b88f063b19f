"""Build a job from typed inputs, as the launch components do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kftrain.job.kinds import kind_spec
from kftrain.job.model import (
    Container,
    EnvVar,
    JobKind,
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
    kind: JobKind | str,
    name: str,
    replicas: Mapping[str, ReplicaInput],
    *,
    image: str | None = None,
    namespace: str | None = None,
    env: Mapping[str, str] | None = None,
    secret_env: Mapping[str, tuple[str, str]] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    api_version: str | None = None,
    spec: JobSpec | None = None,
    pod_spec_defaults: PodSpec | None = None,
) -> TrainingJob:
    """A validated job with one container per replica type, named as the operator expects.

    ``env`` is set on every replica; ``secret_env`` maps an env name to ``(secret, key)`` and is
    rendered as a ``secretKeyRef`` so credentials never appear as literal values.
    """
    kspec = kind_spec(kind, api_version)
    container_name = (spec.main_container if spec and spec.main_container else None) or kspec.default_container
    container_name = container_name or kspec.kind.value.lower()
    shared_env = [EnvVar(name=k, value=v) for k, v in (env or {}).items()]
    shared_env += [
        EnvVar(name=k, value_from={"secretKeyRef": {"name": secret, "key": key}})
        for k, (secret, key) in (secret_env or {}).items()
    ]
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
        pod_spec = _pod_spec_with_defaults(pod_spec_defaults, container)
        replica_specs[rtype] = ReplicaSpec(
            replicas=inp.replicas,
            restart_policy=inp.restart_policy,
            template=PodTemplate(spec=pod_spec),
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
        spec=spec or JobSpec(),
    )
    validate_job(job)
    return job


def _pod_spec_with_defaults(defaults: PodSpec | None, container: Container) -> PodSpec:
    if defaults is None:
        return PodSpec(containers=[container])
    return PodSpec(
        containers=[container],
        node_selector=dict(defaults.node_selector) if defaults.node_selector else None,
        tolerations=[dict(t) for t in defaults.tolerations] if defaults.tolerations else None,
        service_account_name=defaults.service_account_name,
        image_pull_secrets=[dict(s) for s in defaults.image_pull_secrets] if defaults.image_pull_secrets else None,
        extra=dict(defaults.extra),
    )
