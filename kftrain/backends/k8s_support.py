"""Pure helpers of the Kubernetes backend: retries, job names, labels, MPIJob versions, pod settings.

Kept apart from :mod:`kftrain.backends.kubernetes` because none of these talk to a cluster
(except :func:`call_with_retry`, which only wraps a call): they are unit-testable on their own.
"""

from __future__ import annotations

import copy
import hashlib
import http.client
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from kftrain.errors import JobSpecError
from kftrain.job.kinds import GROUP, kind_spec
from kftrain.job.model import (
    Container,
    EnvVar,
    JobKind,
    LauncherCreationPolicy,
    MPIImplementation,
    RunPolicy,
    TrainingJob,
)
from kftrain.job.validate import main_container_name

log = logging.getLogger(__name__)

T = TypeVar("T")

RUN_ID_LABEL = "kftrain.io/run-id"
TASK_ID_LABEL = "kftrain.io/task-id"
# The full ids, in case sanitizing them into label values lost something.
RUN_ID_ANNOTATION = "kftrain.io/run-id"
TASK_ID_ANNOTATION = "kftrain.io/task-id"

# Labels the operators put on replica pods (training-operator and mpi-operator share the keys).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"

GPU_RESOURCE = "nvidia.com/gpu"

# -- retries -------------------------------------------------------------------------------------

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff: ``initial_s * 2**n`` capped at ``max_s``, at most ``attempts`` tries."""

    attempts: int = 6
    initial_s: float = 0.5
    max_s: float = 10.0

    def delay(self, attempt: int) -> float:
        return float(min(self.initial_s * 2**attempt, self.max_s))


def is_retryable(exc: BaseException) -> bool:
    """Errors that say "try again" rather than "you are wrong": throttling, server errors, broken connections."""
    if isinstance(exc, ApiException):
        # status 0: the client raised it without a response (e.g. a watch stream cut mid-way).
        return exc.status in RETRYABLE_STATUS or 500 <= (exc.status or 0) < 600 or exc.status == 0
    return isinstance(exc, urllib3.exceptions.HTTPError | http.client.HTTPException | ConnectionError | TimeoutError)


def retry_after_s(exc: BaseException) -> float | None:
    """The server's Retry-After (seconds) on a 429/503, if it sent one."""
    headers = getattr(exc, "headers", None)
    if not headers:
        return None
    value = headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def call_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``; on a retryable error wait and try again, up to ``policy.attempts`` tries in all.

    Every API call of the backend goes through here: an API server restarting, a throttled
    request or a connection reset must not fail a training run that may have taken hours.
    """
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            attempt += 1
            if not is_retryable(exc) or attempt >= policy.attempts:
                raise
            delay = policy.delay(attempt - 1)
            hinted = retry_after_s(exc)
            if hinted is not None:
                delay = min(max(delay, hinted), policy.max_s)
            log.warning("%s failed (%s); retry %d/%d in %.2fs", what, _short(exc), attempt, policy.attempts - 1, delay)
            sleep(delay)


def _short(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"[:200]


# -- names and labels ----------------------------------------------------------------------------

_NOT_NAME = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")
# Room left for the operator's suffixes: it names pods and Services "<job>-worker-<i>" and
# "<job>-launcher", and both must stay within 63 characters.
DEFAULT_NAME_LENGTH = 48
_HASH_LENGTH = 8


def job_name_for(run_id: str, task_id: str, base: str = "", max_length: int = DEFAULT_NAME_LENGTH) -> str:
    """A deterministic job name for one task of one KFP run: ``<base>-<run id>-<hash>``.

    The same (run, task) always gives the same name, so a restarted launcher finds the job it
    created; the hash covers the full ids, so truncation never makes two tasks collide. The
    result is an RFC 1123 label that starts with a letter (Service names need one), at most
    ``max_length`` (<= 63) characters.
    """
    if not run_id or not task_id:
        raise ValueError("job_name_for needs both a run id and a task id")
    max_length = min(max_length, 63)
    digest = hashlib.sha256(f"{run_id}\0{task_id}".encode()).hexdigest()[:_HASH_LENGTH]
    stem = "-".join(p for p in (_sanitize_name(base), _sanitize_name(run_id)[:8]) if p)
    if not stem or not stem[0].isalpha():
        stem = f"kft-{stem}" if stem else "kft"
    stem = stem[: max_length - _HASH_LENGTH - 1].strip("-")
    return f"{stem}-{digest}"


def _sanitize_name(text: str) -> str:
    return _NOT_NAME.sub("-", text.lower()).strip("-")


def label_value(text: str) -> str:
    """``text`` as a valid label value: [A-Za-z0-9._-], at most 63, alphanumeric at both ends."""
    value = _NOT_LABEL.sub("-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def replica_label(labels: Mapping[str, str] | None) -> str:
    """``worker-1`` for a replica pod, from the operator's labels (the prefix of its log lines).

    training-operator sets replica-type (lower case) and replica-index; mpi-operator sets only
    job-role (launcher/worker), plus replica-index on workers. A launcher without an index is
    ``launcher-0``, as the local backend names it.
    """
    labels = labels or {}
    rtype = labels.get(REPLICA_TYPE_LABEL) or labels.get(JOB_ROLE_LABEL) or "pod"
    index = labels.get(REPLICA_INDEX_LABEL) or "0"
    return f"{rtype.lower()}-{index}"


# -- MPIJob versions -----------------------------------------------------------------------------

MPI_V2BETA1 = f"{GROUP}/v2beta1"
MPI_V1 = f"{GROUP}/v1"
MPI_V1_CONTAINER = "mpi"


def mpijob_to_v1(job: TrainingJob) -> TrainingJob:
    """A v2beta1 MPIJob (mpi-operator) as a kubeflow.org/v1 MPIJob (training-operator).

    v1 has no sshAuthMountPath, launcherCreationPolicy, runLauncherAsWorker or
    mpiImplementation; it injects its environment into the container named ``mpi``. Fields whose
    non-default value would change what runs are refused rather than silently dropped.
    """
    _require_mpi(job)
    if job.api_version == MPI_V1:
        return copy.deepcopy(job)
    out = copy.deepcopy(job)
    spec = out.spec
    if spec.run_launcher_as_worker:
        raise JobSpecError("spec.runLauncherAsWorker", "is true, which kubeflow.org/v1 MPIJob cannot express")
    if spec.launcher_creation_policy not in (None, LauncherCreationPolicy.AT_STARTUP):
        raise JobSpecError(
            "spec.launcherCreationPolicy",
            f"{spec.launcher_creation_policy.value} is not supported by kubeflow.org/v1 MPIJob",
        )
    if spec.mpi_implementation == MPIImplementation.MPICH:
        raise JobSpecError("spec.mpiImplementation", "MPICH is not supported by kubeflow.org/v1 MPIJob")
    # v1 reaches workers with kubectl exec, not ssh, and reads Intel MPI from env: nothing to keep.
    spec.ssh_auth_mount_path = None
    spec.launcher_creation_policy = None
    spec.run_launcher_as_worker = None
    spec.mpi_implementation = None
    for rspec in out.replica_specs.values():
        containers = rspec.template.spec.containers
        if containers and not any(c.name == MPI_V1_CONTAINER for c in containers):
            # v2beta1 uses the first container; v1 looks the main one up by name.
            containers[0].name = MPI_V1_CONTAINER
    out.api_version = MPI_V1
    return out


def mpijob_to_v2beta1(job: TrainingJob) -> TrainingJob:
    """A kubeflow.org/v1 MPIJob as a v2beta1 one: mainContainer first, spec.cleanPodPolicy into runPolicy."""
    _require_mpi(job)
    if job.api_version == MPI_V2BETA1:
        return copy.deepcopy(job)
    out = copy.deepcopy(job)
    main = main_container_name(out)
    for rspec in out.replica_specs.values():
        containers = rspec.template.spec.containers
        # v2beta1 has no mainContainer: the operator injects into containers[0].
        idx = next((i for i, c in enumerate(containers) if c.name == main), 0)
        containers.insert(0, containers.pop(idx))
    if out.spec.clean_pod_policy is not None:
        run_policy = out.spec.run_policy or RunPolicy()
        if run_policy.clean_pod_policy is None:  # v1 lets runPolicy win when both are set
            run_policy.clean_pod_policy = out.spec.clean_pod_policy
        out.spec.run_policy = run_policy
    out.spec.clean_pod_policy = None
    out.spec.main_container = None
    out.api_version = MPI_V2BETA1
    return out


def convert_mpijob(job: TrainingJob, api_version: str) -> TrainingJob:
    return mpijob_to_v1(job) if api_version == MPI_V1 else mpijob_to_v2beta1(job)


def _require_mpi(job: TrainingJob) -> None:
    if job.kind != JobKind.MPIJOB:
        raise JobSpecError("kind", f"{job.kind.value} is not an MPIJob")


# -- pod settings --------------------------------------------------------------------------------


def apply_pod_settings(
    job: TrainingJob,
    *,
    gpus: int | None = None,
    cpu: str | float | None = None,
    memory: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Iterable[Mapping[str, Any]] | None = None,
    service_account: str | None = None,
    image_pull_secrets: Iterable[str] | None = None,
    secret_env: Mapping[str, tuple[str, str]] | None = None,
    replica_types: Iterable[str] | None = None,
) -> TrainingJob:
    """A copy of ``job`` with these pod settings on every replica type (or only ``replica_types``).

    Resources go on the main container: ``gpus`` as a limit (Kubernetes takes the request from
    it; GPUs cannot be overcommitted), ``cpu`` as a request only (a CPU limit throttles a trainer
    for nothing), ``memory`` as request and limit (a pod above its request is the first evicted).
    An MPIJob launcher gets no GPU unless it also runs as a worker: it only runs mpirun.
    ``secret_env`` maps ``ENV`` to ``(secret, key)`` as a secretKeyRef, never a literal value.
    """
    out = copy.deepcopy(job)
    wanted = set(replica_types) if replica_types is not None else set(out.replica_specs)
    main = main_container_name(out)
    for rtype, rspec in out.replica_specs.items():
        if rtype not in wanted:
            continue
        pod = rspec.template.spec
        if node_selector:
            pod.node_selector = {**(pod.node_selector or {}), **node_selector}
        if tolerations:
            pod.tolerations = [*(pod.tolerations or []), *(dict(t) for t in tolerations)]
        if service_account:
            pod.service_account_name = service_account
        if image_pull_secrets:
            have = {s.get("name") for s in pod.image_pull_secrets or []}
            pod.image_pull_secrets = [*(pod.image_pull_secrets or [])] + [
                {"name": s} for s in image_pull_secrets if s not in have
            ]
        if not pod.containers:
            continue
        container = next((c for c in pod.containers if c.name == main), pod.containers[0])
        launcher_only = out.kind == JobKind.MPIJOB and rtype == "Launcher" and not out.spec.run_launcher_as_worker
        _set_resources(container, gpus=None if launcher_only else gpus, cpu=cpu, memory=memory)
        for env_name, (secret, key) in (secret_env or {}).items():
            env = [e for e in container.env or [] if e.name != env_name]
            env.append(EnvVar(name=env_name, value_from={"secretKeyRef": {"name": secret, "key": key}}))
            container.env = env
    return out


def _set_resources(container: Container, *, gpus: int | None, cpu: str | float | None, memory: str | None) -> None:
    if gpus is None and cpu is None and memory is None:
        return
    resources = copy.deepcopy(container.resources or {})
    requests: dict[str, Any] = dict(resources.get("requests") or {})
    limits: dict[str, Any] = dict(resources.get("limits") or {})
    if gpus:
        limits[GPU_RESOURCE] = str(gpus)
    if cpu is not None:
        requests["cpu"] = str(cpu)
    if memory is not None:
        requests["memory"] = limits["memory"] = str(memory)
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    container.resources = resources


def mpi_served_version(served: Iterable[str]) -> str:
    """The MPIJob version to render, given the versions that serve ``mpijobs``: v2beta1 preferred."""
    versions = list(served)
    for version in ("v2beta1", "v1"):
        if version in versions:
            return f"{GROUP}/{version}"
    raise JobSpecError(
        "apiVersion",
        "no MPIJob CRD is served by this cluster (looked for mpijobs in kubeflow.org/v2beta1 and kubeflow.org/v1); "
        "install mpi-operator or the training-operator",
    )


def plural_of(kind: str, api_version: str | None) -> str:
    return kind_spec(kind, api_version).plural
