"""``kftrain jobs``: list, inspect, read the logs of, delete and download the jobs kftrain launched.

``--backend local`` (the default) reads the local backend's state folder (:mod:`kftrain.backends.local.state`);
``--backend kubernetes`` asks the cluster for the jobs of every kind kftrain launches (TFJob, PyTorchJob,
MPIJob, TrainJob) labelled ``app.kubernetes.io/managed-by=kftrain``. Logs come from the running replicas (the
live log files, the pods), else from the logs the launch step kept beside the model; where those and the model
are, the job itself records (:func:`kftrain.job.naming.outputs_of`), so ``logs`` and ``download`` work
after the pods are gone. ``logs --follow`` prints every replica's new lines until the job ends, those of
replicas that start meanwhile (a scale-up, a replacement pod) too; on a cluster it is the launch step's own
log follower (:class:`kftrain.backends.kubernetes.logs.LogFollower`) on the same two watches.
"""

from __future__ import annotations

import argparse
import functools
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kftrain import storage
from kftrain.backends.console import Console
from kftrain.backends.local import state as local_state
from kftrain.errors import KftrainError
from kftrain.job.naming import MANAGED_BY, MANAGED_BY_LABEL, outputs_of
from kftrain.progress import format_duration

if TYPE_CHECKING:
    from kftrain.backends.kubernetes.api import JobRef

MANAGED = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
Line = tuple[str, str]  # (replica, one line of its log)


def add_commands(sub: Any) -> None:
    jobs = sub.add_parser("jobs", help="list, inspect, read the logs of, delete and download launched jobs")
    jobs.add_argument("--backend", choices=("local", "kubernetes"), default="local")
    jobs.add_argument("--namespace", default=None, help="kubernetes: the namespace (default: kubeconfig's)")
    verbs = jobs.add_subparsers(dest="verb", required=True)
    verbs.add_parser("list", help="jobs with kind, phase, age, run and task")
    verbs.add_parser("status", help="conditions, replicas, restarts, events").add_argument("name")
    logs = verbs.add_parser("logs", help="a job's replica logs (live, else the kept ones)")
    logs.add_argument("name")
    logs.add_argument("--replica", default=None, help="one replica (worker-1); default: every one")
    logs.add_argument("--tail", type=int, default=None, help="only the last N lines of each")
    logs.add_argument("--follow", action="store_true", help="then print new lines while the replicas run")
    verbs.add_parser("delete", help="stop and forget the job").add_argument("name")
    download = verbs.add_parser("download", help="copy the job's model and logs to a local folder")
    download.add_argument("name")
    download.add_argument("dest")
    jobs.set_defaults(func=cmd_jobs)


def cmd_jobs(args: argparse.Namespace) -> int:
    ops = LocalJobs() if args.backend == "local" else KubernetesJobs(args.namespace)
    if args.verb == "list":
        rows = ops.rows()
        print(f"{'NAME':40} {'KIND':11} {'PHASE':10} {'AGE':>7}  RUN/TASK")
        for row in rows:
            print(f"{row['name']:40} {row['kind']:11} {row['phase']:10} {row['age']:>7}  {row['run']}")
        return 0
    if args.verb == "status":
        for line in ops.status(args.name):
            print(line)
        return 0
    if args.verb == "logs":
        for label, line in ops.logs(args.name, args.replica, args.tail, args.follow):
            print(f"[{label}] {line}", flush=True)  # followed lines show as they come
        return 0
    if args.verb == "delete":
        print(ops.delete(args.name))
        return 0
    return download(ops.locations(args.name), args.name, Path(args.dest))


def download(locations: tuple[str, str], name: str, dest: Path) -> int:
    """Copy the job's model (when it wrote one) and every kept replica log under ``dest``."""
    model_uri, logs_uri = locations
    if not (model_uri or logs_uri):
        raise KftrainError(f"job {name} records no model or logs location (it was launched without a model URI)")
    dest = dest.absolute()
    if model_uri and storage.exists(model_uri):
        storage.download(model_uri, str(dest / "model"))
        print(f"model: {model_uri} -> {dest / 'model'}")
    else:
        print(f"model: none at {model_uri} (the job wrote none)")
    for label in kept_logs(logs_uri):
        source = storage.join(logs_uri, f"{label}.log")
        target = dest / "logs" / f"{label}.log"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(storage.read_bytes(source))
        print(f"log: {source} -> {target}")
    return 0


def kept_logs(logs_uri: str) -> list[str]:
    """The replicas whose log the launch step kept at ``logs_uri``."""
    if not logs_uri or not storage.exists(logs_uri):
        return []
    return sorted(name[: -len(".log")] for name in storage.list_files(logs_uri) if name.endswith(".log"))


def read_kept(logs_uri: str, label: str) -> str | None:
    """The kept log of replica ``label``; None when there is none."""
    source = storage.join(logs_uri, f"{label}.log") if logs_uri else ""
    if not source or not storage.exists(source):
        return None
    return storage.read_bytes(source).decode("utf-8", "replace")


def _age(created: float) -> str:
    return format_duration(max(0.0, time.time() - created))


def _run_of(labels: dict[str, str]) -> str:
    run, task = labels.get("kftrain.io/run-id", ""), labels.get("kftrain.io/task-id", "")
    return f"{run}/{task}" if run or task else "-"


def _tail(lines: list[str], n: int | None) -> list[str]:
    return lines[-n:] if n else lines


class LocalJobs:
    def _record(self, name: str) -> dict[str, Any]:
        record = local_state.read(name)
        if record is None:
            raise KftrainError(f"no local job named {name} (in {local_state.state_dir()})")
        return record

    def rows(self) -> list[dict[str, str]]:
        return [
            {
                "name": r["name"],
                "kind": r.get("kind", ""),
                "phase": r.get("phase", ""),
                "age": _age(float(r.get("created", 0))),
                "run": _run_of(r.get("labels") or {}),
            }
            for r in local_state.records()
        ]

    def status(self, name: str) -> list[str]:
        r = self._record(name)
        lines = [f"{r['name']}: {r.get('kind')} {r.get('phase')}" + (f" ({r['reason']})" if r.get("reason") else "")]
        if r.get("message"):
            lines.append(f"  message: {r['message']}")
        if r.get("exit_code"):
            lines.append(f"  exit code: {r['exit_code']}")
        lines.append(f"  replicas: {', '.join(r.get('replicas') or [])}")
        lines.append(f"  launched by pid {r.get('launcher_pid')}, {_age(float(r.get('created', 0)))} ago")
        if r.get("model_uri"):
            lines += [f"  model: {r['model_uri']}", f"  logs: {r.get('logs_uri')}"]
        return lines

    def logs(self, name: str, replica: str | None, tail: int | None, follow: bool) -> Iterator[Line]:
        r = self._record(name)
        live = Path(r.get("workdir", "")) / "logs"
        labels = [replica] if replica else list(r.get("replicas") or [])
        offsets: dict[str, int] = {}  # live log -> how much of it was printed
        for label in labels:
            path = live / f"{label}.log"
            if path.is_file():
                data = path.read_bytes()
                # Following, only whole lines now: the rest of a line being written comes with what follows.
                offsets[label] = data.rfind(b"\n") + 1 if follow else len(data)
                text: str | None = data[: offsets[label]].decode("utf-8", "replace")
            else:
                text = read_kept(r.get("logs_uri", ""), label)
            for line in _tail((text or "").splitlines(), tail):
                yield label, line
        if follow and r.get("phase") == local_state.RUNNING:
            yield from self._follow(name, live, labels, offsets, joining=replica is None)

    def _follow(
        self, name: str, live: Path, labels: list[str], offsets: dict[str, int], joining: bool
    ) -> Iterator[Line]:
        """The whole lines appended to the replicas' live logs from ``offsets`` on, until the job has ended;
        ``joining``: also of the replicas the job starts meanwhile (scaled up), from their first line."""
        while True:
            record = local_state.read(name) or {}
            running = record.get("phase") == local_state.RUNNING
            if joining:
                labels += [label for label in record.get("replicas") or [] if label not in labels]
            printed = False
            for label in labels:
                path = live / f"{label}.log"
                try:
                    with path.open("rb") as log:
                        log.seek(offsets.get(label, 0))
                        data = log.read()
                except OSError:
                    continue  # not started yet (or its folder is gone with the job)
                whole = data[: data.rfind(b"\n") + 1]
                offsets[label] = offsets.get(label, 0) + len(whole)
                for line in whole.decode("utf-8", "replace").splitlines():
                    printed = True
                    yield label, line
            if not running:
                return  # what the replicas wrote before the job ended is printed
            if not printed:
                time.sleep(0.2)

    def delete(self, name: str) -> str:
        r = self._record(name)
        if r.get("phase") == local_state.RUNNING:
            os.kill(int(r["launcher_pid"]), signal.SIGTERM)  # its launcher stops every replica, as on cancel
            deadline = time.monotonic() + 30
            while (local_state.read(name) or {}).get("phase") == local_state.RUNNING and time.monotonic() < deadline:
                time.sleep(0.1)
        local_state.remove(name)
        return f"deleted {name}"

    def locations(self, name: str) -> tuple[str, str]:
        r = self._record(name)
        return r.get("model_uri", ""), r.get("logs_uri", "")


class KubernetesJobs:
    def __init__(self, namespace: str | None, api_client: Any = None) -> None:
        from kftrain.backends.kubernetes.api import KubeApi
        from kftrain.retry import RetryPolicy

        self.api = KubeApi(RetryPolicy(), api_client)
        self.namespace = self.api.resolve_namespace(namespace)

    def _jobs(self) -> list[dict[str, Any]]:
        """kftrain's jobs of every kind at every version the cluster serves (one a cluster lacks is skipped)."""
        from kubernetes.client.exceptions import ApiException

        from kftrain.job.kinds import KINDS

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
                found.setdefault((k.kind.value, obj["metadata"]["name"]), {**obj, "kind": k.kind.value})
        return list(found.values())

    def _job(self, name: str) -> dict[str, Any]:
        for obj in self._jobs():
            if obj["metadata"]["name"] == name:
                return obj
        raise KftrainError(f"no job named {name} launched by kftrain in namespace {self.namespace}")

    def _ref(self, obj: dict[str, Any]) -> JobRef:
        from kftrain.backends.kubernetes.api import JobRef

        return JobRef.make(obj["kind"], obj.get("apiVersion"), obj["metadata"]["name"], self.namespace)

    def rows(self) -> list[dict[str, str]]:
        from datetime import datetime

        rows = []
        for obj in self._jobs():
            meta = obj["metadata"]
            created = datetime.fromisoformat(str(meta.get("creationTimestamp", "")).replace("Z", "+00:00"))
            rows.append(
                {
                    "name": meta["name"],
                    "kind": obj["kind"],
                    "phase": _phase(obj),
                    "age": _age(created.timestamp()),
                    "run": _run_of(meta.get("labels") or {}),
                }
            )
        return rows

    def status(self, name: str) -> list[str]:
        from kftrain.backends.kubernetes.pods import main_container, pod_label, pod_name, pod_phase

        obj = self._job(name)
        lines = [f"{name}: {obj['kind']} {_phase(obj)}"]
        for cond in (obj.get("status") or {}).get("conditions") or []:
            lines.append(f"  condition {cond.get('type')}={cond.get('status')}: {cond.get('message', '')}".rstrip())
        for rtype, counts in ((obj.get("status") or {}).get("replicaStatuses") or {}).items():
            lines.append(f"  {rtype}: {', '.join(f'{k} {v}' for k, v in counts.items() if k != 'selector')}")
        ref = self._ref(obj)
        for pod in sorted(self.api.job_pods(ref), key=pod_label):
            main = main_container(pod, ref.main_container)
            ended = f", exit code {main.exit_code}" if main.exit_code is not None else ""
            if main.previous_exit_code:  # a crash loop shows here: the code the last run ended with
                ended += f", previous run exited {main.previous_exit_code}"
            lines.append(f"  pod {pod_name(pod)} ({pod_label(pod)}): {pod_phase(pod)}, {main.run} restart(s){ended}")
            lines += [f"    event {e.reason}: {e.message}" for e in self.api.events_of(self.namespace, pod_name(pod))]
        return lines

    def logs(self, name: str, replica: str | None, tail: int | None, follow: bool) -> Iterator[Line]:
        from kftrain.backends.kubernetes.pods import main_container, pod_label, pod_name

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
            for line in _tail((text or "").splitlines(), tail):
                yield label, line
        if follow:
            yield from self._follow(ref, replica, tail)

    def _follow(self, ref: JobRef, replica: str | None, tail: int | None) -> Iterator[Line]:
        """The replica pods' logs as they are written, until the job has ended (or is deleted): the launcher's
        own :class:`LogFollower` on the launcher's pod and job watches, so a pod that starts later (a scale-up,
        a replacement) is followed too, and a container restarted in place again."""
        from kftrain.backends.kubernetes.config import KubernetesConfig
        from kftrain.backends.kubernetes.logs import LogFollower
        from kftrain.backends.kubernetes.watch import JobWatches, result_of

        cfg = KubernetesConfig()
        changed = threading.Event()  # a watch saw a change, or a line came
        lines: queue.Queue[Line] = queue.Queue()
        console = _Collected(lines, changed)
        follower = LogFollower(self.api, console, ref, tail_lines=cfg.log_tail_lines, stream_from=tail, replica=replica)
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
                if ended:
                    return
                changed.wait()
        finally:
            watches.stop()
            follower.finish(0.0, collect=False)

    def delete(self, name: str) -> str:
        self.api.delete_job(self._ref(self._job(name)), "Background")
        return f"deleted {name}"

    def locations(self, name: str) -> tuple[str, str]:
        return outputs_of(self._job(name)["metadata"].get("annotations"))


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
