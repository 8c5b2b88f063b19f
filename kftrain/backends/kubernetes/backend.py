"""Run a training job as a TFJob, PyTorchJob or MPIJob custom resource on a Kubernetes cluster.

What the backend does, and why:

* **submit** creates the custom resource. A launch step names and labels the job from its run and
  task ids (:mod:`kftrain.job.naming`), so a launcher pod that KFP restarts finds its job again: on
  409 AlreadyExists the backend checks those labels and reattaches.
* The launcher pod (``KFP_POD_NAME``/``KFP_POD_UID``) becomes an owner of the job, so deleting
  the run garbage-collects the job; a reattaching launcher adds itself as a further owner.
* **wait** watches the single resource from the resourceVersion it listed (re-listing on 410
  Gone), maps the operator's conditions to a :class:`JobResult`, streams every replica's log
  prefixed ``[worker-1]``, fails a job whose pods stay Pending on an image pull or scheduling
  problem, and enforces the overall timeout. Failures carry the failing replica's last log
  lines and its recent events.
* **cancel** (what :meth:`Backend.run` calls on SIGTERM or Ctrl-C) deletes the job.
* Every API call is retried on 429, 5xx and connection errors (:func:`kftrain.retry.call_with_retry`).
* MPIJob is rendered in the version the cluster serves (v2beta1 preferred, else v1).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from kftrain.backends.base import Backend, JobHandle, JobPhase, JobResult
from kftrain.backends.console import Console
from kftrain.backends.kubernetes.api import api_message, describe, is_transient
from kftrain.backends.kubernetes.config import KubernetesConfig
from kftrain.backends.kubernetes.pods import JOB_NAME_LABEL, replica_label
from kftrain.errors import KftrainError
from kftrain.job.kinds import GROUP, kind_for, kind_of
from kftrain.job.kinds.mpijob import served_version
from kftrain.job.manifest import render_manifest
from kftrain.job.model import JobKind, TrainingJob
from kftrain.job.naming import RUN_ID_LABEL, TASK_ID_LABEL, run_identity
from kftrain.job.validate import validate_job
from kftrain.retry import call_with_retry

__all__ = ["KubernetesBackend"]


# Reasons of pods that will not start without someone fixing something: waiting on them is pointless.
STUCK_WAITING_REASONS = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}
)
_TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


class KubernetesBackend(Backend):
    name = "kubernetes"
    config: KubernetesConfig

    def __init__(self, config: KubernetesConfig | None = None, api_client: client.ApiClient | None = None) -> None:
        self.config = self.options = config or KubernetesConfig()
        self.console = Console(self.config.out)
        self._api_client = api_client
        self._kubeconfig_namespace: str | None = None
        self._deleted: set[tuple[str | None, str]] = set()
        self._mpi_version: str | None = self.options.mpi_api_version

    # -- clients ---------------------------------------------------------------------------------

    @property
    def api_client(self) -> client.ApiClient:
        if self._api_client is None:
            self._api_client = self._load_config()
        return self._api_client

    def _load_config(self) -> client.ApiClient:
        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except ConfigException:
            try:
                config.load_kube_config(client_configuration=cfg)
                _, active = config.list_kube_config_contexts()
                self._kubeconfig_namespace = (active or {}).get("context", {}).get("namespace")
            except (ConfigException, OSError) as exc:
                raise KftrainError(
                    f"kubernetes backend: no cluster configuration (not in a pod, and no usable kubeconfig): {exc}"
                ) from None
        return client.ApiClient(cfg)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        return call_with_retry(fn, policy=self.options.retry, is_transient=is_transient, what=what, describe=describe)

    def _say(self, message: str) -> None:
        self.console.say(message)

    def _write(self, text: str) -> None:
        self.console.write(text)

    # -- submit ----------------------------------------------------------------------------------

    def resolve_namespace(self, job: TrainingJob | None = None) -> str:
        if self.options.namespace:
            return self.options.namespace
        if job is not None and job.metadata.namespace:
            return job.metadata.namespace
        with contextlib.suppress(OSError):
            ns = self.options.namespace_file.read_text().strip()
            if ns:
                return ns
        _ = self.api_client  # loading the kubeconfig is what tells its namespace
        return self._kubeconfig_namespace or "default"

    def served_mpijob_versions(self) -> list[str]:
        """Versions of kubeflow.org that serve ``mpijobs``, from discovery (/apis/kubeflow.org)."""
        try:
            group = self._call(
                "discovery of kubeflow.org",
                lambda: self.api_client.call_api(
                    f"/apis/{GROUP}",
                    "GET",
                    header_params={"Accept": "application/json"},
                    response_type="object",
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                ),
            )
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        served = []
        for entry in (group or {}).get("versions", []):
            version = entry.get("version")
            resources = self._call(
                f"discovery of {GROUP}/{version}", functools.partial(self.custom.get_api_resources, GROUP, version)
            )
            if any(r.name == "mpijobs" for r in resources.resources or []):
                served.append(version)
        return served

    def prepare(self, job: TrainingJob) -> TrainingJob:
        """The job as it will be created: namespace, owner, MPIJob version (its name and labels are the job's)."""
        validate_job(job)
        out = copy.deepcopy(job)  # never change the caller's job
        if out.kind == JobKind.MPIJOB:
            if self._mpi_version is None:
                self._mpi_version = served_version(self.served_mpijob_versions())
            if out.api_version != self._mpi_version:
                self._say(f"this cluster serves MPIJob {self._mpi_version}: converting from {out.api_version}")
                out = kind_of(out).convert(out, self._mpi_version)
        meta = out.metadata
        meta.namespace = self.resolve_namespace(job)
        if not meta.name:
            raise KftrainError("kubernetes backend: the job needs metadata.name")
        owner = self._owner_reference()
        if owner is not None:
            meta.extra = {**meta.extra, "ownerReferences": [owner]}
        validate_job(out)
        return out

    def _owner_reference(self) -> dict[str, Any] | None:
        name = self.options.owner_pod_name or os.environ.get("KFP_POD_NAME")
        uid = self.options.owner_pod_uid or os.environ.get("KFP_POD_UID")
        if not name or not uid:
            return None
        # Not a controller, and never blocking: the pod only anchors garbage collection of the job.
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "uid": uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }

    def submit(self, job: TrainingJob) -> JobHandle:
        prepared = self.prepare(job)
        manifest = render_manifest(prepared)
        kspec = kind_of(prepared).spec
        name = prepared.name
        namespace = str(prepared.metadata.namespace)
        version = kspec.version
        try:
            obj = self._call(
                f"create {kspec.kind.value} {namespace}/{name}",
                lambda: self.custom.create_namespaced_custom_object(GROUP, version, namespace, kspec.plural, manifest),
            )
            self._say(f"created {kspec.kind.value} {namespace}/{name}")
        except ApiException as exc:
            if exc.status != 409:
                raise KftrainError(
                    f"kubernetes backend: creating {kspec.kind.value} {namespace}/{name} failed: "
                    f"HTTP {exc.status} {api_message(exc)}"
                ) from None
            obj = self._reattach(prepared, kspec.plural, version)
        return JobHandle(
            backend=self.name,
            name=name,
            namespace=namespace,
            api_version=prepared.api_version,
            kind=prepared.kind.value,
            uid=(obj.get("metadata") or {}).get("uid"),
        )

    def _reattach(self, job: TrainingJob, plural: str, version: str) -> dict[str, Any]:
        """The job already exists (a restarted launcher, or a retried create): use it if it is ours."""
        namespace, name = str(job.metadata.namespace), job.name
        existing: dict[str, Any] = self._call(
            f"get {plural} {namespace}/{name}",
            lambda: self.custom.get_namespaced_custom_object(GROUP, version, namespace, plural, name),
        )
        meta = existing.get("metadata") or {}
        have = meta.get("labels") or {}
        want = run_identity(job)
        if not want or any(have.get(k) != v for k, v in want.items()):
            found = {k: have.get(k) for k in (RUN_ID_LABEL, TASK_ID_LABEL)}
            raise KftrainError(
                f"kubernetes backend: {job.kind.value} {namespace}/{name} already exists and was not created by "
                f"this task (its labels {found} do not match {want or 'a KFP run and task id'}); delete it or "
                "choose another name"
            )
        if meta.get("deletionTimestamp"):
            raise KftrainError(f"kubernetes backend: {job.kind.value} {namespace}/{name} is being deleted; retry later")
        self._say(f"reattached to {job.kind.value} {namespace}/{name} (created by an earlier attempt of this task)")
        owner = self._owner_reference()
        owners = list(meta.get("ownerReferences") or [])
        if owner is not None and all(o.get("uid") != owner["uid"] for o in owners):
            # The earlier launcher pod will be garbage-collected; owned by it alone, the job would go with it.
            patch = {"metadata": {"ownerReferences": [*owners, owner]}}
            existing = self._call(
                f"patch {plural} {namespace}/{name}",
                lambda: self.custom.patch_namespaced_custom_object(GROUP, version, namespace, plural, name, patch),
            )
        return existing

    # -- wait ------------------------------------------------------------------------------------

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobResult:
        started = time.monotonic()
        result = self._wait(handle, timeout, started)
        result.duration_s = time.monotonic() - started
        self._say(f"{handle.name} {result.phase.value.lower()} in {result.duration_s:.1f}s")
        return result

    def _wait(self, handle: JobHandle, timeout: float | None, started: float) -> JobResult:
        job = _JobRef.of(handle)
        opts = self.options
        deadline = started + timeout if timeout is not None else None
        logs = _LogFollower(self, job) if opts.stream_logs else None
        pending = _PendingTracker(self, job)
        if logs is not None:
            logs.start()
        try:
            obj, rv = self._list_one(job)
            state = _StatusPrinter(self, job)
            suspended_since: float | None = None
            next_check = 0.0
            failures = 0
            while True:
                if obj is None:
                    if (job.namespace, job.name) in self._deleted:
                        return JobResult(JobPhase.FAILED, reason="Cancelled", message="job deleted by this launcher")
                    return JobResult(
                        JobPhase.FAILED,
                        reason="Deleted",
                        message=f"{job.kind} {job.namespace}/{job.name} was deleted while running",
                    )
                result = self._result_of(job, obj, logs)
                if result is not None:
                    return result
                state.show(obj)
                now = time.monotonic()
                suspended_since = (suspended_since or now) if _is_suspended(obj) else None
                if deadline is not None and now >= deadline:
                    self._delete(job)
                    return JobResult(
                        JobPhase.FAILED, reason="Timeout", message=f"job ran longer than {timeout:g}s; deleted it"
                    )
                if (
                    suspended_since is not None
                    and opts.suspended_timeout_s is not None
                    and now - suspended_since >= opts.suspended_timeout_s
                ):
                    self._delete(job)
                    return JobResult(
                        JobPhase.FAILED,
                        reason="Suspended",
                        message=f"job stayed suspended for {opts.suspended_timeout_s:g}s; deleted it",
                    )
                if now >= next_check:
                    next_check = now + opts.poll_interval_s
                    stuck = pending.check() if opts.pending_timeout_s is not None else None
                    if stuck is not None:
                        self._delete(job)
                        return stuck
                window = max(1, int(min(opts.watch_window_s, _remaining(deadline, next_check))))
                try:
                    obj, rv = self._watch_window(job, obj, rv, window, deadline, next_check)
                    failures = 0
                except ApiException as exc:
                    if exc.status == 410:
                        # The history behind our resourceVersion was compacted: start again from a fresh list.
                        self._say("watch expired (410 Gone); re-listing")
                        obj, rv = self._list_one(job)
                        continue
                    if not is_transient(exc):
                        raise
                    failures = self._backoff(failures, exc)
                except Exception as exc:
                    if not is_transient(exc):
                        raise
                    failures = self._backoff(failures, exc)
                    obj, rv = self._list_one(job)  # the stream broke: we may have missed events
        finally:
            if logs is not None:
                logs.finish(opts.log_drain_s)

    def _backoff(self, failures: int, exc: BaseException) -> int:
        if failures + 1 >= self.options.retry.attempts:
            raise exc
        delay = self.options.retry.delay(failures)
        self._say(
            f"watch failed ({exc.__class__.__name__}: {str(exc).splitlines()[0][:120]}); retrying in {delay:.1f}s"
        )
        time.sleep(delay)
        return failures + 1

    def _list_one(self, job: _JobRef) -> tuple[dict[str, Any] | None, str | None]:
        """The job (or None if gone) and the resourceVersion to watch from."""
        listed: dict[str, Any] = self._call(
            f"list {job.plural} {job.namespace}/{job.name}",
            lambda: self.custom.list_namespaced_custom_object(
                GROUP, job.version, job.namespace, job.plural, field_selector=f"metadata.name={job.name}"
            ),
        )
        items = listed.get("items") or []
        rv = (listed.get("metadata") or {}).get("resourceVersion")
        return (items[0] if items else None), rv

    def _watch_window(
        self,
        job: _JobRef,
        obj: dict[str, Any],
        rv: str | None,
        window: int,
        deadline: float | None,
        next_check: float,
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Follow the job's events for one window; return as soon as it changes in a way that matters."""
        w = watch.Watch()
        # timeout_seconds also makes Watch hand us 410 instead of retrying once itself from a stale version.
        stream = w.stream(
            self.custom.list_namespaced_custom_object,
            GROUP,
            job.version,
            job.namespace,
            job.plural,
            field_selector=f"metadata.name={job.name}",
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=window,
            _request_timeout=(10, window + 10),
        )
        try:
            for event in stream:
                kind = event.get("type")
                raw = event.get("raw_object") or {}
                rv = (raw.get("metadata") or {}).get("resourceVersion") or rv
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    return None, rv
                obj = raw
                if _conditions_changed(obj) or _is_terminal(obj):
                    return obj, rv
                if time.monotonic() >= min(next_check, deadline if deadline is not None else next_check):
                    return obj, rv
        finally:
            w.stop()
            stream.close()
        return obj, rv

    def _result_of(self, job: _JobRef, obj: dict[str, Any], logs: _LogFollower | None) -> JobResult | None:
        cond = _terminal_condition(obj)
        if cond is None:
            return None
        if cond["type"] == "Succeeded":
            return JobResult(
                JobPhase.SUCCEEDED,
                reason=cond.get("reason") or "Succeeded",
                message=cond.get("message") or f"{job.name} succeeded",
            )
        if logs is not None:
            logs.finish(self.options.log_drain_s)  # the streamed output ends before the verdict is printed
        result = JobResult(
            JobPhase.FAILED,
            reason=cond.get("reason") or "Failed",
            message=cond.get("message") or f"{job.name} failed",
            exit_code=1,
        )
        self._add_failure_details(job, result, logs)
        return result

    def _add_failure_details(self, job: _JobRef, result: JobResult, logs: _LogFollower | None) -> None:
        """Which replica failed, its exit code, its last log lines, and recent events of it and the job."""
        try:
            pods = self._job_pods(job)
        except ApiException:
            pods = []
        failed = _failing_pod(pods)
        involved = [job.name]
        if failed is not None:
            pod, container, exit_code, previous = failed
            label = replica_label(pod.metadata.labels)
            result.failed_replica = label
            result.exit_code = exit_code or 1
            involved.insert(0, pod.metadata.name)
            with contextlib.suppress(ApiException):
                text = self._call(
                    f"log of {pod.metadata.name}",
                    lambda: self.core.read_namespaced_pod_log(
                        pod.metadata.name,
                        job.namespace,
                        container=container,
                        tail_lines=self.options.log_tail_lines,
                        previous=previous,
                    ),
                )
                result.log_tail = str(text).splitlines()[-self.options.log_tail_lines :]
            if not result.log_tail and logs is not None:
                result.log_tail = logs.tail(label)
        elif logs is not None:
            # The operator may already have deleted the pods (cleanPodPolicy): use what we streamed.
            result.failed_replica, result.log_tail = logs.last_failed_tail()
        events = self._recent_events(job.namespace, involved)
        if events:
            result.message += "\nrecent events:\n" + "\n".join(f"  {e}" for e in events)

    def _recent_events(self, namespace: str, names: list[str]) -> list[str]:
        lines: list[tuple[str, str]] = []
        for name in names:
            try:
                listed = self._call(
                    f"events of {name}",
                    functools.partial(
                        self.core.list_namespaced_event, namespace, field_selector=f"involvedObject.name={name}"
                    ),
                )
            except ApiException:
                continue
            for ev in listed.items or []:
                when = ev.last_timestamp or ev.event_time or ev.first_timestamp or ev.metadata.creation_timestamp
                stamp = when.isoformat() if when is not None else ""
                obj = ev.involved_object
                lines.append((stamp, f"{ev.type or ''} {ev.reason or ''} {obj.kind}/{obj.name}: {ev.message or ''}"))
        lines.sort(key=lambda x: x[0])
        return [text.strip() for _, text in lines[-self.options.event_lines :]]

    def _job_pods(self, job: _JobRef) -> list[client.V1Pod]:
        listed = self._call(
            f"list pods of {job.name}",
            lambda: self.core.list_namespaced_pod(job.namespace, label_selector=f"{JOB_NAME_LABEL}={job.name}"),
        )
        return list(listed.items or [])

    # -- cancel ----------------------------------------------------------------------------------

    def cancel(self, handle: JobHandle) -> None:
        job = _JobRef.of(handle)
        if (job.namespace, job.name) in self._deleted:
            return
        self._delete(job)
        self._say(f"deleted {job.kind} {job.namespace}/{job.name}")

    def _delete(self, job: _JobRef) -> None:
        body = client.V1DeleteOptions(propagation_policy=self.options.propagation_policy)
        try:
            self._call(
                f"delete {job.plural} {job.namespace}/{job.name}",
                lambda: self.custom.delete_namespaced_custom_object(
                    GROUP, job.version, job.namespace, job.plural, job.name, body=body
                ),
            )
        except ApiException as exc:
            if exc.status != 404:  # already gone is what we wanted
                raise
        self._deleted.add((job.namespace, job.name))


# -- helpers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _JobRef:
    name: str
    namespace: str
    kind: str
    api_version: str
    plural: str
    version: str
    # The container the operator runs the replica's program in; None: the first one (mpi-operator).
    main_container: str | None

    @classmethod
    def of(cls, handle: JobHandle) -> _JobRef:
        if not handle.kind or not handle.namespace:
            raise KftrainError(f"kubernetes backend: handle {handle} lacks kind or namespace")
        kspec = kind_for(handle.kind, handle.api_version).spec
        return cls(
            handle.name,
            handle.namespace,
            kspec.kind.value,
            kspec.api_version,
            kspec.plural,
            kspec.version,
            kspec.default_container,
        )


def _conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _true(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in _conditions(obj) if c.get("type") == ctype and c.get("status") == "True"), None)


def _terminal_condition(obj: dict[str, Any]) -> dict[str, Any] | None:
    # Failed wins if both are somehow set: reporting success for a failed job is the worse mistake.
    return _true(obj, "Failed") or _true(obj, "Succeeded")


def _is_terminal(obj: dict[str, Any]) -> bool:
    return _terminal_condition(obj) is not None


def _is_suspended(obj: dict[str, Any]) -> bool:
    return _true(obj, "Suspended") is not None


def _conditions_changed(obj: dict[str, Any]) -> bool:
    # Any event that carries a condition is worth a look by the main loop; cheap to evaluate.
    return bool(_conditions(obj))


def _remaining(deadline: float | None, next_check: float) -> float:
    now = time.monotonic()
    ends = [next_check] + ([deadline] if deadline is not None else [])
    return max(0.0, min(ends) - now) + 0.5


def _failing_pod(pods: list[client.V1Pod]) -> tuple[client.V1Pod, str | None, int, bool] | None:
    """The pod whose container ended non-zero most recently: (pod, container, exit code, is it a previous run)."""
    best: tuple[Any, client.V1Pod, str | None, int, bool] | None = None
    for pod in pods:
        for cs in (pod.status.container_statuses if pod.status else None) or []:
            for state, previous in ((cs.state, False), (cs.last_state, True)):
                term = state.terminated if state is not None else None
                if term is None or not term.exit_code:
                    continue
                when = term.finished_at or pod.metadata.creation_timestamp
                key = when.timestamp() if when is not None else 0.0
                if best is None or key > best[0]:
                    best = (key, pod, cs.name, int(term.exit_code), previous)
    if best is None:
        failed = [p for p in pods if p.status is not None and p.status.phase == "Failed"]
        return (failed[0], None, 1, False) if failed else None
    return best[1], best[2], best[3], best[4]


class _StatusPrinter:
    """Prints each condition the job reaches once: Created, Running, Restarting, Suspended."""

    def __init__(self, backend: KubernetesBackend, job: _JobRef) -> None:
        self._backend = backend
        self._job = job
        self._seen: set[tuple[str, str, str]] = set()

    def show(self, obj: dict[str, Any]) -> None:
        for cond in _conditions(obj):
            key = (str(cond.get("type")), str(cond.get("status")), str(cond.get("lastTransitionTime")))
            if cond.get("status") != "True" or key in self._seen:
                continue
            self._seen.add(key)
            message = cond.get("message") or ""
            self._backend._say(f"{self._job.name}: {cond.get('type')}{': ' + message if message else ''}")


class _PendingTracker:
    """Notices pods that stay Pending for a reason that will not fix itself."""

    def __init__(self, backend: KubernetesBackend, job: _JobRef) -> None:
        self._backend = backend
        self._job = job
        self._since: dict[str, float] = {}

    def check(self) -> JobResult | None:
        limit = self._backend.options.pending_timeout_s
        try:
            pods = self._backend._job_pods(self._job)
        except ApiException:
            return None
        now = time.monotonic()
        stuck_now: set[str] = set()
        for pod in pods:
            if pod.status is None or pod.status.phase != "Pending":
                continue
            why = _stuck_reason(pod) or self._reason_from_events(pod)
            if why is None:
                continue
            uid = pod.metadata.uid or pod.metadata.name
            stuck_now.add(uid)
            since = self._since.setdefault(uid, now)
            if limit is not None and now - since >= limit:
                reason, detail = why
                label = replica_label(pod.metadata.labels)
                return JobResult(
                    JobPhase.FAILED,
                    reason=reason,
                    message=f"pod {pod.metadata.name} ({label}) stayed Pending for {now - since:.0f}s: "
                    f"{reason}: {detail}; deleted the job",
                    failed_replica=label,
                    exit_code=1,
                )
        self._since = {k: v for k, v in self._since.items() if k in stuck_now}
        return None

    def _reason_from_events(self, pod: client.V1Pod) -> tuple[str, str] | None:
        try:
            listed = self._backend._call(
                f"events of {pod.metadata.name}",
                lambda: self._backend.core.list_namespaced_event(
                    self._job.namespace, field_selector=f"involvedObject.name={pod.metadata.name}"
                ),
            )
        except ApiException:
            return None
        for ev in reversed(listed.items or []):
            text = f"{ev.reason or ''} {ev.message or ''}"
            if ev.reason == "FailedScheduling":
                return "Unschedulable", ev.message or ""
            for reason in STUCK_WAITING_REASONS:
                if reason in text:
                    return reason, ev.message or ""
        return None


def _stuck_reason(pod: client.V1Pod) -> tuple[str, str] | None:
    status = pod.status
    for cs in [*(status.init_container_statuses or []), *(status.container_statuses or [])]:
        waiting = cs.state.waiting if cs.state is not None else None
        if waiting is not None and waiting.reason in STUCK_WAITING_REASONS:
            return waiting.reason, waiting.message or f"container {cs.name}, image {cs.image}"
    for cond in status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
            return "Unschedulable", cond.message or ""
    return None


class _LogFollower:
    """Streams the log of every replica pod, one thread per pod, each line prefixed ``[worker-1] ``.

    Pods are found by the operator's job-name label (both operators set it) and polled for, so
    pods created later (restarts, a launcher created once workers are ready) are picked up.
    A Pending pod is waited on rather than skipped; a container restarted in place is followed again.
    """

    def __init__(self, backend: KubernetesBackend, job: _JobRef) -> None:
        self._backend = backend
        self._job = job
        self._stop = threading.Event()
        self._threads: dict[str, threading.Thread] = {}
        self._responses: set[Any] = set()
        self._lock = threading.Lock()
        self._tails: dict[str, collections.deque[str]] = {}
        self._failed: list[str] = []
        self._discoverer = threading.Thread(target=self._discover, name=f"logs-{job.name}", daemon=True)
        self._finished = False

    def start(self) -> None:
        self._discoverer.start()

    def tail(self, label: str) -> list[str]:
        return list(self._tails.get(label, ()))

    def last_failed_tail(self) -> tuple[str | None, list[str]]:
        label = self._failed[-1] if self._failed else None
        return label, self.tail(label) if label else []

    def finish(self, grace_s: float) -> None:
        """Let streams of ended pods deliver their last lines, then cut the rest."""
        if self._finished:
            return
        self._finished = True
        end = time.monotonic() + grace_s
        for thread in list(self._threads.values()):
            thread.join(max(0.0, end - time.monotonic()))
        self._stop.set()
        with self._lock:
            responses = list(self._responses)
        for resp in responses:
            _cut(resp)

    def _discover(self) -> None:
        interval = self._backend.options.poll_interval_s
        while not self._stop.is_set():
            try:
                pods = self._backend._job_pods(self._job)
            except Exception:  # a broken discovery must not end the job; the next poll tries again
                pods = []
            for pod in pods:
                uid = pod.metadata.uid or pod.metadata.name
                if uid not in self._threads and not self._stop.is_set():
                    thread = threading.Thread(
                        target=self._follow_safely, args=(pod,), name=f"log-{pod.metadata.name}", daemon=True
                    )
                    self._threads[uid] = thread
                    thread.start()
            self._stop.wait(interval)

    def _follow_safely(self, pod: client.V1Pod) -> None:
        with contextlib.suppress(Exception):
            self._follow(pod)

    def _follow(self, pod: client.V1Pod) -> None:
        backend, ns, name = self._backend, self._job.namespace, pod.metadata.name
        label = replica_label(pod.metadata.labels)
        tail = self._tails.setdefault(label, collections.deque(maxlen=backend.options.log_tail_lines))
        streamed_instance = -1
        while not self._stop.is_set():
            try:
                current = backend._call(f"get pod {name}", lambda: backend.core.read_namespaced_pod(name, ns))
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            if current.metadata.uid != pod.metadata.uid:
                return  # recreated under the same name: the discoverer starts a thread for the new one
            phase = current.status.phase if current.status else None
            container, instance, running = _main_container_state(current, self._job.main_container)
            if phase == "Pending" and not running:
                self._stop.wait(backend.options.poll_interval_s)  # not started yet: wait, do not skip
                continue
            if instance == streamed_instance:
                if phase in _TERMINAL_POD_PHASES:
                    return
                self._stop.wait(backend.options.poll_interval_s)  # same run, already streamed: wait for a restart
                continue
            streamed_instance = instance
            for line in self._stream(name, container):
                tail.append(line)
                if not self._stop.is_set():
                    backend._write(f"[{label}] {line}\n")
            if _exit_code(backend, name, ns, container) not in (None, 0):
                self._failed.append(label)

    def _stream(self, pod_name: str, container: str | None) -> Iterator[str]:
        backend = self._backend
        resp = backend._call(
            f"log of {pod_name}",
            lambda: backend.core.read_namespaced_pod_log(
                pod_name, self._job.namespace, container=container, follow=True, _preload_content=False
            ),
        )
        with self._lock:
            self._responses.add(resp)
        try:
            yield from watch.watch.iter_resp_lines(resp)
        finally:
            with self._lock:
                self._responses.discard(resp)
            with contextlib.suppress(Exception):
                resp.release_conn()


def _cut(resp: Any) -> None:
    """Unblock a thread reading a follow stream.

    ``resp.close()`` from another thread would wait for the reader's buffer lock (the reader
    holds it while blocked in recv); shutting the socket down makes that recv return instead.
    """
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _main_container_state(pod: client.V1Pod, preferred: str | None) -> tuple[str | None, int, bool]:
    """(name of the main container, its restart count, whether it has started)."""
    names = [c.name for c in (pod.spec.containers if pod.spec else None) or []]
    name = preferred if preferred in names else (names[0] if names else None)
    for cs in (pod.status.container_statuses if pod.status else None) or []:
        if cs.name == name:
            started = cs.state is not None and (cs.state.running is not None or cs.state.terminated is not None)
            return name, int(cs.restart_count or 0), started
    return name, 0, False


def _exit_code(backend: KubernetesBackend, pod_name: str, namespace: str, container: str | None) -> int | None:
    """Exit code of the container's last run, None while it runs or if the pod is gone."""
    try:
        fresh = backend.core.read_namespaced_pod(pod_name, namespace)
    except Exception:
        return None
    for cs in (fresh.status.container_statuses if fresh.status else None) or []:
        if cs.name == container and cs.state is not None and cs.state.terminated is not None:
            return int(cs.state.terminated.exit_code)
    return None
