"""Checks a job before anything is created or started.

The CRD schemas accept any replica type name and any restart policy string; the operators' webhooks and
controllers then reject or misbehave at run time. These checks catch those mistakes up front, each naming
the field to fix. What every kind shares is checked here; each kind adds its own rules
(:meth:`kftrain.job.kinds.Kind.validate`).
"""

from __future__ import annotations

import re

from kftrain.errors import JobSpecError, quoted
from kftrain.job import affinity_checks
from kftrain.job import pod_checks as check
from kftrain.job.kinds import Kind, kind_of
from kftrain.job.model import EnvVar, PodSpec, RestartPolicy, RunPolicy, TrainingJob
from kftrain.job.security_checks import security_context
from kftrain.job.topology import total_replicas
from kftrain.job.volume_checks import volumes

# RFC 1035 label, as the operators' webhooks require: pod and service names derive from it. Matched with
# fullmatch: "$" would also match before a trailing newline, and let "job\n" through.
_NAME_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_MAX_NAME = check.LABEL_MAX
# generateName is a prefix: the API server appends random characters, so it may end in '-'.
_GENERATE_NAME_RE = re.compile(r"[a-z][-a-z0-9]*")
_GENERATED_SUFFIX = check.GENERATED_NAME_SUFFIX


def is_job_name(name: str) -> bool:
    """Whether ``name`` is a valid job name (what ``metadata.name`` must be)."""
    return len(name) <= _MAX_NAME and bool(_NAME_RE.fullmatch(name))


def validate_job(job: TrainingJob) -> None:
    kind = kind_of(job)
    _validate_metadata(job)
    replicas_path = kind.replicas_path()
    if not job.replica_specs:
        raise JobSpecError(replicas_path, "a job needs at least one replica type")
    for rtype, rspec in job.replica_specs.items():
        path = f"{replicas_path}.{rtype}"
        known_types = kind.replica_types(job)
        if rtype not in known_types:
            hint = next((t for t in known_types if t.lower() == rtype.lower()), None)
            did_you_mean = f" (did you mean {hint!r}?)" if hint else ""
            raise JobSpecError(
                path,
                f"unknown replica type for {kind.spec.kind}{did_you_mean}; expected one of: {', '.join(known_types)}",
            )
        # Named as the manifest sets the count: a TrainJob's trainer.numNodes, not the replicated job it resolves to.
        count_field = kind.replica_count_field(job, rtype)
        least = kind.least_replicas(job, rtype)
        if rspec.count < least:
            raise JobSpecError(count_field, f"must be >= {least}, got {rspec.count}")
        if rtype in kind.spec.singletons and rspec.count > 1:
            raise JobSpecError(count_field, f"a {rtype} must have exactly 1 replica, got {rspec.count}")
        if rspec.restart_policy is not None:
            kind.spec.check_restart_policy(rspec.restart_policy, f"{path}.restartPolicy")
        _validate_containers(kind, job, rtype, path)
        _validate_pod(rspec.template.spec, f"{path}.template.spec")
        template_labels = (rspec.template.metadata or {}).get("labels")
        if template_labels is not None:
            check.labels(f"{path}.template.metadata.labels", template_labels)
        grace = rspec.template.spec.extra.get("terminationGracePeriodSeconds")
        if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int) or not 0 <= grace < 2**63):
            raise JobSpecError(
                f"{path}.template.spec.terminationGracePeriodSeconds", f"expected whole seconds >= 0, got {grace!r}"
            )
        check_exit_code_ends(
            rspec.restart_policy,
            job.run_policy,
            policy_field=f"{path}.restartPolicy",
            limit_field=f"{kind.spec.run_policy_field}.backoffLimit",
            deadline_field=f"{kind.spec.run_policy_field}.activeDeadlineSeconds",
        )
    _validate_run_policy(job, kind)
    kind.validate(job)


def check_exit_code_ends(
    policy: RestartPolicy | None, run_policy: RunPolicy, *, policy_field: str, limit_field: str, deadline_field: str
) -> None:
    """A job under ExitCode must have a deadline (or a backoffLimit of 0): training-operator replaces a replica killed
    by a signal without counting it against any other limit (:meth:`~kftrain.job.kinds.restarts.Backoff.counts`), so a
    replica killed every time (out of memory) would be replaced for ever."""
    if policy != RestartPolicy.EXIT_CODE or run_policy.backoff_limit == 0 or run_policy.active_deadline_seconds:
        return
    raise JobSpecError(
        deadline_field,
        f"{policy_field} is ExitCode: training-operator replaces a replica killed by a signal (exit code 128-255; "
        f"137: out of memory) without counting it against {limit_field} unless that is 0, so only a deadline ends a "
        f"replica that is killed every time; set one (or {limit_field} 0, to replace none)",
    )


def validate_for_cluster(job: TrainingJob) -> None:
    """What a cluster requires of a job beyond :func:`validate_job`: every container an image. Locally a replica is
    a process of this machine and needs none (a function job has none)."""
    kind = kind_of(job)
    for rtype, rspec in job.replica_specs.items():
        for i, container in enumerate(rspec.template.spec.containers):
            if not container.image:
                # A pod's container needs one (kubernetes@v1.36.3:pkg/apis/core/validation/validation.go,
                # validateContainerCommon), and training-operator's webhooks refuse the job at once
                # (training-operator@v1.9.0:pkg/webhooks/pytorch/pytorchjob_webhook.go, validatePyTorchReplicaSpecs).
                raise JobSpecError(
                    f"{kind.replicas_path()}.{rtype}.template.spec.containers[{i}].image",
                    "missing: on a cluster every container runs from an image",
                )


def check_replica_count(job: TrainingJob, limit: int, why: str) -> None:
    """Refuse a job of more than ``limit`` replicas, naming the replica count to lower, before anything enumerates
    them (a CRD allows int32 counts: one ReplicaId each would exhaust the memory first); ``why`` (``{limit}`` in it
    is the limit) says what the limit protects and how to raise it."""
    count = total_replicas(job)
    if count <= limit:
        return
    rtype = max(job.replica_specs, key=lambda t: job.replica_specs[t].count)
    raise JobSpecError(
        kind_of(job).replica_count_field(job, rtype),
        f"{job.replica_specs[rtype].count} ({count} replicas in the job): {why.format(limit=limit)}",
    )


def _validate_metadata(job: TrainingJob) -> None:
    if job.metadata.labels is not None:
        check.labels("metadata.labels", job.metadata.labels)
    name = job.metadata.name
    if not name and not job.metadata.generate_name:
        raise JobSpecError("metadata.name", "missing (or set metadata.generateName)")
    if name and not is_job_name(name):
        raise JobSpecError(
            "metadata.name",
            f"{quoted(name)} must be lower-case letters, digits and '-', start with a letter, end alphanumeric, "
            f"at most {_MAX_NAME} characters (the operator names pods and services after it)",
        )
    prefix = job.metadata.generate_name
    if prefix and not name and (len(prefix) > _MAX_NAME - _GENERATED_SUFFIX or not _GENERATE_NAME_RE.fullmatch(prefix)):
        raise JobSpecError(
            "metadata.generateName",
            f"{quoted(prefix)} must be lower-case letters, digits and '-', start with a letter, at most "
            f"{_MAX_NAME - _GENERATED_SUFFIX} characters (the API server appends {_GENERATED_SUFFIX} random "
            "characters to make the job's name)",
        )


def _validate_containers(kind: Kind, job: TrainingJob, rtype: str, path: str) -> None:
    containers = job.replica_specs[rtype].template.spec.containers
    cpath = f"{path}.template.spec.containers"
    if not containers:
        raise JobSpecError(cpath, "missing: every replica needs a container")
    names = [c.name for c in containers]
    for i, container in enumerate(containers):
        if not container.name:
            raise JobSpecError(f"{cpath}[{i}].name", "missing")
        check.program(f"{cpath}[{i}].command", container.command)
        check.program(f"{cpath}[{i}].args", container.args)
        _validate_env(container.env or [], f"{cpath}[{i}].env")
    main = kind.main_container_name(job, rtype)
    if main is not None and main not in names:
        raise JobSpecError(
            cpath,
            f"no container named {main!r}; {kind.spec.kind} runs the replica's program in the container "
            f"of that name (found: {', '.join(names)})",
        )


def _validate_pod(pod: PodSpec, path: str) -> None:
    """What the API server checks when the operator creates the replica's pods (ValidatePodSpec; see
    :mod:`kftrain.job.pod_checks` and :mod:`kftrain.job.affinity_checks`): placement, identity, pull secrets,
    volumes, resources, each container's securityContext. A custom resource's pod template is only checked against
    the CRD's schema when the job is created, so a pod the API server refuses would otherwise leave the job waiting
    for pods that are never created (the launch step fails such a job once it sees the refusal:
    :mod:`kftrain.backends.kubernetes.refused`)."""
    if pod.node_selector is not None:
        check.labels(f"{path}.nodeSelector", pod.node_selector)
    for i, toleration in enumerate(pod.tolerations or []):
        check.toleration(f"{path}.tolerations[{i}]", toleration)
    if pod.service_account_name:
        check.dns1123_subdomain(f"{path}.serviceAccountName", pod.service_account_name)
    if pod.extra.get("priorityClassName"):
        check.dns1123_subdomain(f"{path}.priorityClassName", pod.extra["priorityClassName"])
    for i, secret in enumerate(pod.image_pull_secrets or []):
        if isinstance(secret, dict) and secret.get("name"):
            check.dns1123_subdomain(f"{path}.imagePullSecrets[{i}].name", secret["name"])
    if pod.extra.get("affinity") is not None:
        affinity_checks.affinity(f"{path}.affinity", pod.extra["affinity"])
    volumes(f"{path}.volumes", pod.extra.get("volumes") or [])
    for j, init in enumerate(pod.extra.get("initContainers") or []):
        if isinstance(init, dict) and init.get("securityContext") is not None:
            security_context(f"{path}.initContainers[{j}].securityContext", init["securityContext"])
    for j, container in enumerate(pod.containers):
        cpath = f"{path}.containers[{j}]"
        if container.extra.get("securityContext") is not None:
            security_context(f"{cpath}.securityContext", container.extra["securityContext"])
        if container.image:
            check.image(f"{cpath}.image", container.image)
        if container.resources is not None:
            check.resources(f"{cpath}.resources", container.resources)
        mounted: dict[str, int] = {}
        for k, mount in enumerate(container.extra.get("volumeMounts") or []):
            mount_path = str(mount.get("mountPath")) if isinstance(mount, dict) else ""
            if mount_path in mounted:
                raise JobSpecError(
                    f"{cpath}.volumeMounts[{k}].mountPath",
                    f"{mount_path!r} is already mounted by volumeMounts[{mounted[mount_path]}]: each path once",
                )
            mounted[mount_path] = k
        for k, var in enumerate(container.env or []):
            ref = (var.value_from or {}).get("secretKeyRef")
            if isinstance(ref, dict):
                check.dns1123_subdomain(f"{cpath}.env[{k}].valueFrom.secretKeyRef.name", ref.get("name") or "")
                check.secret_key(f"{cpath}.env[{k}].valueFrom.secretKeyRef.key", str(ref.get("key") or ""))


def _validate_env(env: list[EnvVar], path: str) -> None:
    """Each variable by :func:`kftrain.job.pod_checks.env_var`, each name once (kubelet would silently keep only
    the last)."""
    first: dict[str, int] = {}
    for j, var in enumerate(env):
        check.env_var(f"{path}[{j}]", var)
        if var.name in first:
            raise JobSpecError(
                f"{path}[{j}].name", f"{var.name!r} is already set by {path}[{first[var.name]}]; set it once"
            )
        first[var.name] = j


def _validate_run_policy(job: TrainingJob, kind: Kind) -> None:
    """The run policy's fields, named where the kind holds them (:attr:`KindSpec.run_policy_field`)."""
    rp, where = job.run_policy, kind.spec.run_policy_field
    if rp.managed_by is not None and kind.spec.managers and rp.managed_by not in kind.spec.managers:
        raise JobSpecError(f"{where}.managedBy", f"{rp.managed_by!r} is not one of: {', '.join(kind.spec.managers)}")
    for attr, key in (
        ("backoff_limit", "backoffLimit"),
        ("active_deadline_seconds", "activeDeadlineSeconds"),
        ("ttl_seconds_after_finished", "ttlSecondsAfterFinished"),
    ):
        value = getattr(rp, attr)
        if value is not None and value < 0:
            raise JobSpecError(f"{where}.{key}", f"must be >= 0, got {value}")
    if rp.active_deadline_seconds == 0:
        raise JobSpecError(f"{where}.activeDeadlineSeconds", "must be > 0 when set")
