"""The jobs kftrain launched on a cluster, as ``kftrain jobs`` sees them: every kind at every version the cluster
serves, labelled ``app.kubernetes.io/managed-by=kftrain``; described from their conditions, replica statuses,
pods and events; their logs read from the pods (else the logs the launch step kept beside the model, where the
job's annotations say), followed by the launch step's own :class:`~.logs.LogFollower` on the same two watches,
so a pod that starts while following (a scale-up, a replacement) is followed from its first line."""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from kftrain.backends.base import JobStatus
from kftrain.backends.console import Console
from kftrain.backends.kept import kept_logs, read_kept
from kftrain.backends.kubernetes.api import JobRef, KubeApi
from kftrain.backends.kubernetes.config import KubernetesConfig
from kftrain.backends.kubernetes.logs import LogFollower
from kftrain.backends.kubernetes.pod_state import main_container, pod_label, pod_name, pod_phase
from kftrain.backends.kubernetes.watch import JobWatches, result_of
from kftrain.errors import KftrainError
from kftrain.job.kinds import KINDS
from kftrain.job.naming import MANAGED_BY, MANAGED_BY_LABEL, RUN_ID_LABEL, TASK_ID_LABEL, outputs_of
from kftrain.signals import wait_for

MANAGED = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
Line = tuple[str, str]  # (replica, one line of its log)


class ClusterJobs:
    """kftrain's jobs in one namespace of a cluster."""

    def __init__(self, api: KubeApi, namespace: str, config: KubernetesConfig) -> None:
        self.api = api
        self.namespace = namespace
        self.config = config

    def _jobs(self) -> list[dict[str, Any]]:
        """kftrain's jobs of every kind at every version the cluster serves (one a cluster lacks is skipped)."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for kind in KINDS:
            k = kind.spec
            request = functools.partial(
                self.api.custom.list_namespaced_custom_object,
                k.group,
                k.version,
                self.namespace,
                k.plural,
                label_selector=MANAGED,
            )
            try:
                listed: dict[str, Any] = self.api.call(f"list {k.plural}.{k.group}/{k.version}", request)
            except ApiException as exc:
                if exc.status != 404:  # 404: this version of the kind is not installed
                    raise
                continue
            for obj in listed.get("items") or []:
                # A kind served at two versions lists each job twice; the first (the kind's default) is kept.
                found.setdefault((k.kind, obj["metadata"]["name"]), {**obj, "kind": k.kind})
        return list(found.values())

    def _job(self, name: str) -> dict[str, Any]:
        for obj in self._jobs():
            if obj["metadata"]["name"] == name:
                return obj
        raise KftrainError(f"no job named {name} launched by kftrain in namespace {self.namespace}")

    def _ref(self, obj: dict[str, Any]) -> JobRef:
        return JobRef.make(obj["kind"], obj.get("apiVersion"), obj["metadata"]["name"], self.namespace)

    def list_jobs(self) -> list[JobStatus]:
        return sorted((self._status(obj) for obj in self._jobs()), key=lambda s: -s.created)

    def get_job(self, name: str) -> JobStatus:
        obj = self._job(name)
        details = []
        for cond in (obj.get("status") or {}).get("conditions") or []:
            details.append(f"condition {cond.get('type')}={cond.get('status')}: {cond.get('message', '')}".rstrip())
        for rtype, counts in ((obj.get("status") or {}).get("replicaStatuses") or {}).items():
            details.append(f"{rtype}: {', '.join(f'{k} {v}' for k, v in counts.items() if k != 'selector')}")
        ref = self._ref(obj)
        for pod in sorted(self.api.job_pods(ref), key=pod_label):
            main = main_container(pod, ref.main_container)
            ended = f", exit code {main.exit_code}" if main.exit_code is not None else ""
            if main.previous_exit_code:  # a crash loop shows here: the code the last run ended with
                ended += f", previous run exited {main.previous_exit_code}"
            details.append(f"pod {pod_name(pod)} ({pod_label(pod)}): {pod_phase(pod)}, {main.run} restart(s){ended}")
            details += [f"  event {e.reason}: {e.message}" for e in self.api.events_of(self.namespace, pod_name(pod))]
        return self._status(obj, tuple(details))

    def _status(self, obj: dict[str, Any], details: tuple[str, ...] = ()) -> JobStatus:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        created = datetime.fromisoformat(str(meta.get("creationTimestamp", "")).replace("Z", "+00:00"))
        model_uri, logs_uri = outputs_of(meta.get("annotations"))
        return JobStatus(
            name=meta["name"],
            kind=obj["kind"],
            phase=_phase(obj),
            created=created.timestamp(),
            run_id=labels.get(RUN_ID_LABEL, ""),
            task_id=labels.get(TASK_ID_LABEL, ""),
            details=details,
            model_uri=model_uri,
            logs_uri=logs_uri,
        )

    def job_logs(self, name: str, replica: str | None, tail: int | None, follow: bool) -> Iterator[Line]:
        obj = self._job(name)
        ref = self._ref(obj)
        pods = {pod_label(p): p for p in self.api.job_pods(ref)}
        _, logs_uri = outputs_of(obj["metadata"].get("annotations"))
        labels = [replica] if replica else sorted({*pods, *kept_logs(logs_uri)})
        for label in labels:
            if label in pods:
                if follow:
                    continue  # followed below, from the same last lines
                pod, container = pod_name(pods[label]), main_container(pods[label], ref.main_container).name
                text: str | None = self.api.pod_log(self.namespace, pod, container, tail_lines=tail, previous=False)
            else:
                text = read_kept(logs_uri, label)
            lines = (text or "").splitlines()
            for line in lines[-tail:] if tail else lines:
                yield label, line
        if follow:
            yield from self._follow(ref, replica, tail)

    def _follow(self, ref: JobRef, replica: str | None, tail: int | None) -> Iterator[Line]:
        """The replica pods' logs as they are written, until the job has ended (or is deleted): the launcher's
        own :class:`LogFollower` on the launcher's pod and job watches, so a pod that starts later (a scale-up,
        a replacement) is followed too, and a container restarted in place again."""
        cfg = self.config
        changed = threading.Event()  # a watch saw a change, or a line came
        lines: queue.Queue[Line] = queue.Queue()
        console = _Collected(lines, changed)
        follower = LogFollower(
            self.api,
            console,
            ref,
            tail_lines=cfg.log_tail_lines,
            stream_from=tail,
            replica=replica,
            on_refused=lambda _: changed.set(),  # raised here, below
        )
        watches = JobWatches(self.api, console, ref, retry=cfg.retry, window_s=cfg.watch_window_s, changed=changed)
        watches.pods.add_listener(follower.update)
        watches.start()
        try:
            while True:
                watches.begin_round()
                obj = watches.job.items().get(ref.name)
                ended = watches.job.listed and (obj is None or result_of(ref.name, obj) is not None)
                if ended:
                    # The streams of ended containers end; a run no stream printed (it ended between two
                    # changes the watch delivered) is read whole.
                    follower.finish(cfg.log_drain_s, collect=True)
                while not lines.empty():
                    yield lines.get()
                if follower.refused:
                    raise KftrainError(follower.refused)
                if ended:
                    return
                wait_for(changed, None)  # Ctrl-C is handled at once
        finally:
            watches.stop()
            follower.finish(0.0, collect=False)

    def delete_job(self, name: str) -> None:
        self.api.delete_job(self._ref(self._job(name)), self.config.propagation_policy)


class _Collected(Console):
    """A backend console whose replica lines and notes become the ``(label, line)`` pairs ``logs`` yields."""

    def __init__(self, lines: queue.Queue[Line], changed: threading.Event) -> None:
        super().__init__()
        self._lines = lines
        self._changed = changed

    def say(self, message: str) -> None:
        self.replica_line("kftrain", message)

    def replica_line(self, label: str, line: str) -> None:
        self._lines.put((label, line))
        self._changed.set()


def _phase(obj: dict[str, Any]) -> str:
    """The job's latest true condition (Created, Running, Succeeded, Failed...)."""
    true = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    return str(true[-1].get("type")) if true else "Pending"
