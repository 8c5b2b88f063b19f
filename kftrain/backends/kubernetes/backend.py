"""Run a training job as its kind's custom resource (TFJob, PyTorchJob, MPIJob, TrainJob) on a Kubernetes cluster.

**prepare** puts the job in its namespace, owned by the launcher pod (``KFP_POD_NAME``/``KFP_POD_UID``: deleting the
run garbage-collects it), in the version the cluster serves. **submit** creates it; on 409 AlreadyExists a job with
this run's and task's labels (:mod:`kftrain.job.naming`) is reattached. **wait** follows the job and its pods by
watches (:mod:`.watch`) and decides on every change or deadline: a condition ended it, a pod cannot start or stayed
unscheduled too long (:mod:`.pending`), or the timeout passed; a job given up on is deleted, every replica's log is
in the step's output (:mod:`.logs`), and a failure names its replica, exit code, last lines and events.
**cancel** (SIGTERM, Ctrl-C) deletes the job, unless the SIGTERM is this pod's eviction (:mod:`.eviction`). Every
request goes through :class:`KubeApi`, under a whole-call deadline: a run's calls end by the step's timeout, a stop's
(the delete after a SIGTERM or the timeout) by ``stop_s`` of its own, a ``kftrain jobs`` command's by
``call_deadline_s``; a delete that cannot get through says the job is left and where.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kftrain.backends.base import Backend, JobHandle, JobPhase, JobResult, JobStatus
from kftrain.backends.console import Console
from kftrain.backends.kubernetes.api import JobRef, KubeApi, KubeCallError, api_message, describe
from kftrain.backends.kubernetes.config import KubernetesConfig
from kftrain.backends.kubernetes.eviction import eviction_of, read_pod, workflow_owner
from kftrain.backends.kubernetes.jobs import ClusterJobs
from kftrain.backends.kubernetes.logs import LogFollower
from kftrain.backends.kubernetes.pending import PendingTracker, SuspensionTracker, suspension
from kftrain.backends.kubernetes.pod_state import FailureMemory, diagnose_failure
from kftrain.backends.kubernetes.refused import RefusedPods
from kftrain.backends.kubernetes.watch import JobWatches, ProgressRelay, StatusPrinter, result_of
from kftrain.deadline import Deadline
from kftrain.errors import JobSpecError, KftrainError
from kftrain.job.kinds import KINDS, kind_of, without_mesh_sidecars
from kftrain.job.kinds.base import ClusterObject
from kftrain.job.manifest import render_manifest
from kftrain.job.model import TrainingJob
from kftrain.job.naming import RUN_ID_LABEL, TASK_ID_LABEL, run_identity
from kftrain.job.validate import validate_for_cluster, validate_job
from kftrain.signals import wait_for

__all__ = ["KubernetesBackend"]


class Clock:
    """What the wait reads the time from and how it sleeps until its next deadline or a change: real time.

    A wait's deadlines (the pending timeout, the suspension limit, the autoscaler's recheck) are seconds to minutes
    away; a test substitutes a clock it moves itself (:data:`CLOCK`), so that they pass when it says.
    """

    def now(self) -> float:
        return time.monotonic()

    def wait(self, changed: threading.Event, seconds: float | None) -> None:
        """Sleep until ``changed`` is set or ``seconds`` (from the last :meth:`now`) have passed; None: until set.
        A SIGTERM ends the sleep within :data:`~kftrain.signals.SIGNAL_LATENCY_S` (see :func:`wait_for`)."""
        wait_for(changed, seconds)


# The clock of every wait, read when the wait begins. A module-level default rather than a config field: a caller
# that builds its own config (the launch step, from its inputs) still waits on the clock a test puts here.
CLOCK = Clock()


class KubernetesBackend(Backend):
    name = "kubernetes"
    config: KubernetesConfig

    def __init__(self, config: KubernetesConfig | None = None, api_client: client.ApiClient | None = None) -> None:
        self.config = config or KubernetesConfig()
        self.console = Console(self.config.out, self.config.line_sinks)
        self.api = KubeApi(
            self.config.retry,
            api_client,
            namespace_file=self.config.namespace_file,
            call_deadline_s=self.config.call_deadline_s,
        )
        self._deleted: set[tuple[str, str]] = set()
        # Jobs whose delete could not get through, said once (a failed stop is not tried again by the cancel after).
        self._left: set[tuple[str, str]] = set()
        self._step = Deadline()  # a run's: its timeout from its start
        self._workflow: dict[str, Any] | None = None  # the run's Workflow as the job's owner ({}: none); read once
        # Jobs this backend created, as the create returned them: waiting on one watches it and its pods from
        # that version, with no first list of either (all its pods are created after it).
        self._created: dict[tuple[str, str], dict[str, Any]] = {}
        # The version of each kind served in several to create (configured, else asked once of the cluster).
        self._versions: dict[str, str] = dict(self.config.api_versions)

    # -- submit ----------------------------------------------------------------------------------

    def resolve_namespace(self, job: TrainingJob | None = None) -> str:
        """The configured namespace, else the job's own, else this pod's, else the kubeconfig's, else default."""
        return self.api.resolve_namespace(self.config.namespace, job.metadata.namespace if job is not None else None)

    def prepare(self, job: TrainingJob) -> TrainingJob:
        """The job as it will be created: namespace, owner, the version the cluster serves (its name and labels are the
        job's)."""
        validate_job(job)
        validate_for_cluster(job)
        self.config.check_replicas(job)
        out = copy.deepcopy(job)  # never change the caller's job
        if len(KINDS.versions(out.kind)) > 1:
            version = self._served_version(out.kind)
            if out.api_version != version:
                self.console.say(f"this cluster serves {out.kind} {version}: converting from {out.api_version}")
                out = kind_of(out).convert(out, version)
        meta = out.metadata
        meta.namespace = self.resolve_namespace(job)
        if not meta.name:
            raise KftrainError("kubernetes backend: the job needs metadata.name")
        dependency = kind_of(out).cluster_dependency(out)
        if dependency is not None:
            self._check_dependency(dependency, meta.namespace)
        owners = self._owner_references(meta.namespace)
        if owners:
            meta.extra = {**meta.extra, "ownerReferences": owners}
        without_mesh_sidecars(out)  # every kind's pods, however the job came (launch step, kftrain launch)
        validate_job(out)
        return out

    def _served_version(self, kind: str) -> str:
        """The version of ``kind`` to create: the configured one, else the preferred one the cluster serves."""
        if kind not in self._versions:
            group, plural = KINDS.get(kind).spec.group, KINDS.get(kind).spec.plural
            served = [f"{group}/{v}" for v in self.api.served_versions(group, plural)]
            self._versions[kind] = KINDS.preferred(kind, served).spec.api_version
        return self._versions[kind]

    def _check_dependency(self, needed: ClusterObject, namespace: str) -> None:
        """Read what the job depends on (a TrainJob's runtime) and check it, before anything is created; create it
        first when the job brings it (``needed.create``) and the cluster has none of that name."""
        where = f" in namespace {namespace}" if needed.namespaced else ""
        try:
            served = self.api.get_cluster_object(
                needed.group, needed.version, needed.plural, needed.name, namespace if needed.namespaced else None
            )
        except ApiException as exc:
            if exc.status == 404 and needed.create is not None and needed.namespaced:
                self._create_dependency(needed, namespace)
                return
            if exc.status == 404:
                raise JobSpecError(
                    "spec.runtimeRef",
                    f"the cluster has no {needed.kind} named {needed.name!r}{where}: {needed.missing_hint}",
                ) from None
            if exc.status == 403:
                raise KftrainError(
                    f"kubernetes backend: not allowed to read {needed.kind} {needed.name!r}{where} "
                    f"({api_message(exc)}): grant get on {needed.plural}.{needed.group} (deploy/rbac/)"
                ) from None
            raise KftrainError(
                f"kubernetes backend: reading {needed.kind} {needed.name!r}{where} failed: HTTP {exc.status} "
                f"{api_message(exc)}"
            ) from None
        needed.check(served)

    def _create_dependency(self, needed: ClusterObject, namespace: str) -> None:
        manifest = copy.deepcopy(dict(needed.create or {}))
        meta = manifest.setdefault("metadata", {})
        if meta.get("namespace") not in (None, namespace):
            raise JobSpecError(
                f"{needed.kind} {needed.name}: metadata.namespace",
                f"{meta['namespace']!r}, but the TrainJob runs in {namespace!r}: a TrainJob finds its TrainingRuntime "
                "in its own namespace",
            )
        meta["namespace"] = namespace
        try:
            self.api.create_namespaced_object(needed.group, needed.version, needed.plural, namespace, manifest)
        except ApiException as exc:
            if exc.status == 409:  # created meanwhile (another step of the same run): it must match ours
                self._check_dependency(dataclasses.replace(needed, create=None), namespace)
                return
            grant = f" (grant create on {needed.plural}.{needed.group}: deploy/rbac/)" if exc.status == 403 else ""
            raise KftrainError(
                f"kubernetes backend: creating {needed.kind} {needed.name!r} in {namespace} failed: HTTP {exc.status} "
                f"{api_message(exc)}{grant}"
            ) from None
        self.console.say(f"created {needed.kind} {needed.name} in {namespace} (from the job's manifest)")

    def _owner_reference(self) -> dict[str, Any] | None:
        name = self.config.owner_pod_name or os.environ.get("KFP_POD_NAME")
        uid = self.config.owner_pod_uid or os.environ.get("KFP_POD_UID")
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

    def _owner_references(self, namespace: str) -> list[dict[str, Any]]:
        """The step's pod and the run's Workflow (the pod's owner, read once in the job's ``namespace``, an owner's
        only one): an evicted pod never takes the job, however soon the step dies (finding N12)."""
        pod = self._owner_reference()
        if pod is None:
            return []
        if self._workflow is None:
            try:
                self._workflow = workflow_owner(read_pod(self.api, pod["name"], namespace)) or {}
            except Exception:  # the eviction's own read says what failed; the pod still anchors the job
                self._workflow = {}
        return [pod, self._workflow] if self._workflow else [pod]

    def submit(self, job: TrainingJob) -> JobHandle:
        prepared = self.prepare(job)
        ref = JobRef.make(prepared.kind, prepared.api_version, prepared.name, str(prepared.metadata.namespace))
        try:
            obj = self.api.create_job(ref, render_manifest(prepared))
            self.console.say(f"created {ref}")
            self._created[(ref.namespace, ref.name)] = obj
        except ApiException as exc:
            if isinstance(exc, KubeCallError) and exc.status == 0:  # no answer in time: the server may have it
                raise KftrainError(
                    f"{exc}; it may yet be created: kubectl -n {ref.namespace} get {ref.plural}.{ref.group} {ref.name}"
                ) from None
            if exc.status != 409:
                raise KftrainError(
                    f"kubernetes backend: creating {ref} failed: HTTP {exc.status} {api_message(exc)}"
                ) from None
            obj = self._reattach(prepared, ref)
        return JobHandle(
            backend=self.name,
            name=ref.name,
            namespace=ref.namespace,
            api_version=ref.api_version,
            kind=ref.kind,
            uid=(obj.get("metadata") or {}).get("uid"),
        )

    def _reattach(self, job: TrainingJob, ref: JobRef) -> dict[str, Any]:
        """The job already exists (a restarted launcher, or a retried create): use it if it is ours."""
        existing = self.api.get_job(ref)
        meta = existing.get("metadata") or {}
        have = meta.get("labels") or {}
        want = run_identity(job)
        if not want or any(have.get(k) != v for k, v in want.items()):
            found = {k: have.get(k) for k in (RUN_ID_LABEL, TASK_ID_LABEL)}
            raise KftrainError(
                f"kubernetes backend: {ref} already exists and was not created by this task (its labels "
                f"{found} do not match {want or 'a KFP run and task id'}); delete it or choose another name"
            )
        if meta.get("deletionTimestamp"):
            raise KftrainError(f"kubernetes backend: {ref} is being deleted; retry later")
        self.console.say(f"reattached to {ref} (created by an earlier attempt of this task)")
        owners = list(meta.get("ownerReferences") or [])
        missing = [
            o for o in self._owner_references(ref.namespace) if all(have.get("uid") != o["uid"] for have in owners)
        ]
        if missing:
            # The earlier launcher pod will be garbage-collected; owned by it alone, the job would go with it.
            existing = self.api.patch_job(ref, {"metadata": {"ownerReferences": [*owners, *missing]}})
        return existing

    def run(self, job: TrainingJob, timeout: float | None = None) -> JobResult:
        """:meth:`Backend.run`, every call before the stop ending by the step's ``timeout`` (the create included)."""
        self._step = Deadline.after(timeout)
        try:
            with self.api.capped(self._step):
                return super().run(job, timeout)
        finally:
            self._step = Deadline()

    # -- wait ------------------------------------------------------------------------------------

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobResult:
        left = self._step.left()
        if timeout is not None and left is not None:
            timeout = min(timeout, left)  # what the submit took is the step's too
        clock = CLOCK
        started = clock.now()
        with self.api.capped(Deadline.after(timeout).sooner(self._step)):  # a call in the wait ends by its end
            result = self._wait(JobRef.of(handle), timeout, started, clock)
        result.duration_s = clock.now() - started
        self.console.say(f"{handle.name} {result.phase.value.lower()} in {result.duration_s:.1f}s")
        return result

    def _wait(self, job: JobRef, timeout: float | None, started: float, clock: Clock) -> JobResult:
        """Follow the job and its pods, each by a watch in a thread of its own, and decide whenever either
        changes or a deadline comes."""
        cfg = self.config
        changed = threading.Event()  # set by either watch on every change
        retry = cfg.retry.lasting(cfg.outage_s)
        watches = JobWatches(self.api, self.console, job, retry=retry, window_s=cfg.watch_window_s, changed=changed)
        jobs, pods = watches.job, watches.pods
        logs = LogFollower(self.api, self.console, job, tail_lines=cfg.log_tail_lines) if cfg.stream_logs else None
        if logs is not None:
            pods.add_listener(logs.update)
        failures = FailureMemory()
        pods.add_listener(failures.update)
        if cfg.progress_sinks:
            jobs.add_listener(ProgressRelay(job.name, KINDS.get(job.kind).reported_progress, cfg.progress_sinks).update)
        created = self._created.pop((job.namespace, job.name), None)
        since = ((created or {}).get("metadata") or {}).get("resourceVersion")
        if created is not None and since:
            jobs.resume({job.name: created}, since)
            pods.resume({}, since)
        watching = _Watching(
            timeout=timeout,
            deadline=started + timeout if timeout is not None else None,
            printer=StatusPrinter(self.console, job.name),
            queue=SuspensionTracker(self.console, job.name, cfg.suspended_timeout_s),
            pending=PendingTracker(self.api, self.console, job, cfg.pending_timeout_s, recheck_s=cfg.poll_interval_s),
            refused=RefusedPods(self.api, job, recheck_s=cfg.poll_interval_s),
        )
        watches.start()
        try:
            while True:
                watches.begin_round()
                now = clock.now()
                obj = jobs.items().get(job.name) if jobs.listed else None
                if jobs.listed and obj is None:
                    if (job.namespace, job.name) in self._deleted:
                        return JobResult(JobPhase.FAILED, reason="Cancelled", message="job deleted by this launcher")
                    return JobResult(JobPhase.FAILED, reason="Deleted", message=f"{job} was deleted while running")
                ended = result_of(job.name, obj) if obj is not None else None
                if ended is not None:
                    # Ended by the timeout's time maybe: the logs and the verdict have time of their own.
                    with self.api.capped(Deadline.after(cfg.log_drain_s + cfg.stop_s / 2)):
                        if logs is not None:
                            logs.finish(cfg.log_drain_s, collect=True)  # every replica's log before the verdict
                        if not ended.succeeded:
                            self._explain_failure(job, obj, ended, logs, failures)
                    return ended
                give_up = watching.check(obj, pods.items() if pods.listed else None, now)
                if give_up is not None:
                    if give_up.failed_replica is None:
                        # A replica in a crash loop is the likely cause, whatever ended the wait: name it, its code.
                        # Best-effort, in time of its own (the step's may be spent), half a stop's.
                        with self.api.capped(Deadline.after(cfg.stop_s / 2)):
                            self._explain_failure(job, obj, give_up, logs, failures)
                    left = self._stop(job)
                    give_up.message += f"; {left}" if left else "; deleted the job"
                    return give_up
                clock.wait(changed, watching.sleep_s(now))
        except BaseException:
            # Interrupted (SIGTERM, Ctrl-C, an API error): the caller deletes the job next; waiting for its
            # log streams to drain would only delay that.
            if logs is not None:
                logs.finish(0.0, collect=False)
            raise
        finally:
            watches.stop()
            if logs is not None:
                logs.finish(cfg.log_drain_s, collect=False)  # a no-op once finished

    def _explain_failure(
        self,
        job: JobRef,
        obj: dict[str, Any] | None,
        result: JobResult,
        logs: LogFollower | None,
        failures: FailureMemory,
    ) -> None:
        """Add to ``result`` which replica failed, its exit code, its last log lines and the recent events of this
        job (``obj``, as last seen), not of an earlier one of its name."""
        found = diagnose_failure(
            api=self.api,
            job=job,
            served=obj,
            log_lines=self.config.log_tail_lines,
            event_lines=self.config.event_lines,
        )
        seen = failures.last()
        if found.replica is not None:
            result.failed_replica = found.replica
            result.exit_code = found.exit_code
            result.log_tail = found.log_tail or (logs.tail(found.replica) if logs is not None else [])
        elif seen is not None:
            # Its pod is gone (deleted by the operator as it failed the job): what the pod watch saw of it.
            result.failed_replica, result.exit_code = seen
            result.log_tail = logs.tail(seen[0]) if logs is not None else []
        elif logs is not None:
            # The operator may already have deleted the pods (cleanPodPolicy): use what was streamed.
            result.failed_replica, result.log_tail = logs.last_failed_tail()
        if found.events:
            result.message += "\nrecent events:\n" + "\n".join(f"  {e}" for e in found.events)

    # -- the jobs kftrain launched here -------------------------------------------------------------

    def _jobs(self) -> ClusterJobs:
        return ClusterJobs(self.api, self.resolve_namespace(), self.config)

    def list_jobs(self) -> list[JobStatus]:
        with self.api.capped(Deadline.after(self.config.call_deadline_s)):  # the command's, whole
            return self._jobs().list_jobs()

    def get_job(self, name: str) -> JobStatus:
        with self.api.capped(Deadline.after(self.config.call_deadline_s)):  # the command's, whole
            return self._jobs().get_job(name)

    def job_logs(
        self, name: str, replica: str | None = None, tail: int | None = None, follow: bool = False
    ) -> Iterator[tuple[str, str]]:
        return self._jobs().job_logs(name, replica, tail, follow)

    def delete_job(self, name: str) -> None:
        with self.api.capped(Deadline.after(self.config.call_deadline_s)):  # the command's, whole
            self._jobs().delete_job(name)

    # -- cancel ----------------------------------------------------------------------------------

    def cancel(self, handle: JobHandle) -> None:
        job = JobRef.of(handle)
        if (job.namespace, job.name) in self._deleted | self._left:
            return  # deleted, or its delete already said it is left
        left = self._stop(job)
        if left:
            raise KftrainError(left)
        self.console.say(f"deleted {job}")

    def left_running(self, handle: JobHandle) -> str:
        """Leave the job running when this step's pod is evicted and its run goes on (:mod:`.eviction`): Argo's retry
        of the step reattaches to it. The run's workflow is made an owner of the job first, so the evicted pod's
        garbage collection does not take the job with it (deleting the run still does)."""
        pod = self.config.owner_pod_name or os.environ.get("KFP_POD_NAME")
        if not pod:
            return ""
        job = JobRef.of(handle)
        try:
            with self.api.capped(Deadline.after(self.config.stop_s / 4)):  # the delete after it has stop_s
                eviction = eviction_of(self.api, pod, self.api.resolve_namespace())
                if eviction is None:
                    return ""
                owners = list((self.api.get_job(job).get("metadata") or {}).get("ownerReferences") or [])
                if all(o.get("uid") != eviction.workflow["uid"] for o in owners):
                    self.api.patch_job(job, {"metadata": {"ownerReferences": [*owners, eviction.workflow]}})
        except Exception as exc:  # cannot tell: a cancel, as always
            self.console.say(f"could not tell an eviction of pod {pod} from a cancel ({describe(exc)}): a cancel")
            return ""
        why = f"pod {pod} is evicted ({eviction.reason}); {job} left running for the step's retry to reattach"
        self.console.say(why)
        return why

    def _stop(self, job: JobRef) -> str:
        """Delete the job within ``stop_s`` of its own (the step's time may be spent): "" once deleted, else the line
        saying it is left on the cluster, where, and why (said once: a cancel after it does not try again)."""
        try:
            with self.api.capped(Deadline.after(self.config.stop_s)):
                self.api.delete_job(job, self.config.propagation_policy)  # already gone is what we wanted
        except KftrainError as exc:
            self._left.add((job.namespace, job.name))
            return f"{job} was created and is left on the cluster: deleting it failed ({exc})"
        self._deleted.add((job.namespace, job.name))
        return ""


@dataclass
class _Watching:
    """What the wait decides from, besides the job ending: its deadline, its queue, its pending pods."""

    timeout: float | None
    deadline: float | None
    printer: StatusPrinter
    queue: SuspensionTracker
    pending: PendingTracker
    refused: RefusedPods

    def check(self, obj: dict[str, Any] | None, pods: dict[str, Any] | None, now: float) -> JobResult | None:
        """The failure to end a job still running with (it is then deleted), or None to go on waiting.

        ``obj`` is the job, ``pods`` its pods by name; None for what has not been listed yet.
        """
        if obj is not None:
            self.printer.show(obj)
            if self.queue.update(obj, now):
                return JobResult(JobPhase.FAILED, reason="Suspended", message=self.queue.gave_up)
        if self.deadline is not None and now >= self.deadline:
            waiting = self.queue.describe() or self.pending.describe()
            return JobResult(
                JobPhase.FAILED,
                reason="Timeout",
                message=f"job did not end within {self.timeout:g}s" + (f"; it was still {waiting}" if waiting else ""),
            )
        if pods is None:
            return None
        # A suspended job has no pods on purpose: only a job that runs waits for its pods.
        refused = self.refused.update(obj if obj is not None and suspension(obj) is None else None, pods, now)
        if refused is not None:
            return refused
        return self.pending.update(pods.values(), now)

    def sleep_s(self, now: float) -> float | None:
        """How long nothing needs a look unless the job or a pod changes; None: until one does."""
        checks = (self.deadline, self.pending.next_check, self.queue.next_check, self.refused.next_check)
        wake = [t for t in checks if t is not None]
        return max(0.0, min(wake) - now) if wake else None
