"""``kftrain jobs``: list, inspect, read the logs of, delete and download the jobs kftrain launched.

``--backend local`` (the default) reads the local backend's state folder (:mod:`kftrain.backends.local.state`);
``--backend kubernetes`` asks the cluster for the TFJobs, PyTorchJobs and MPIJobs labelled
``app.kubernetes.io/managed-by=kftrain``. Logs come from the running replicas (the live log files, the pods),
else from the logs the launch step kept beside the model (``<model>-logs/<replica>.log``).
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import time
from typing import Any

from kftrain import storage
from kftrain.backends.local import state as local_state
from kftrain.contract import MODEL_ENV
from kftrain.errors import KftrainError
from kftrain.progress import format_duration

KINDS = (("TFJob", "tfjobs", "v1"), ("PyTorchJob", "pytorchjobs", "v1"), ("MPIJob", "mpijobs", "v2beta1"))
MANAGED = "app.kubernetes.io/managed-by=kftrain"


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
    logs.add_argument("--follow", action="store_true", help="keep printing while the job runs (local)")
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
            print(f"[{label}] {line}")
        return 0
    if args.verb == "delete":
        print(ops.delete(args.name))
        return 0
    model_uri, logs_uri = ops.locations(args.name)
    dest = os.path.abspath(args.dest)
    if model_uri and storage.exists(model_uri):
        storage.download(model_uri, os.path.join(dest, "model"))
        print(f"model: {model_uri} -> {os.path.join(dest, 'model')}")
    for name in storage.list_files(logs_uri) if logs_uri and storage.exists(logs_uri) else []:
        target = os.path.join(dest, "logs", name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as out:
            out.write(storage.read_bytes(storage.join(logs_uri, name)))
        print(f"log: {storage.join(logs_uri, name)} -> {target}")
    return 0


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

    def logs(self, name: str, replica: str | None, tail: int | None, follow: bool) -> Any:
        r = self._record(name)
        labels = [replica] if replica else list(r.get("replicas") or [])
        live = os.path.join(r.get("workdir", ""), "logs")
        for label in labels:
            path = os.path.join(live, f"{label}.log")
            if os.path.exists(path):
                with open(path, encoding="utf-8", errors="replace") as live_log:
                    text = live_log.read()
            elif r.get("logs_uri") and storage.exists(storage.join(r["logs_uri"], f"{label}.log")):
                text = storage.read_bytes(storage.join(r["logs_uri"], f"{label}.log")).decode("utf-8", "replace")
            else:
                continue
            for line in _tail(text.splitlines(), tail):
                yield label, line
        if follow and len(labels) == 1:
            yield from self._follow(name, os.path.join(live, f"{labels[0]}.log"), labels[0])

    def _follow(self, name: str, path: str, label: str) -> Any:
        """Lines appended to a running replica's live log until the job ends."""
        with open(path, encoding="utf-8", errors="replace") as log:
            log.seek(0, os.SEEK_END)
            while True:
                line = log.readline()
                if line:
                    yield label, line.rstrip("\n")
                elif (local_state.read(name) or {}).get("phase") != local_state.RUNNING:
                    return
                else:
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
        found = []
        for kind, plural, version in KINDS:
            request = functools.partial(
                self.api.custom.list_namespaced_custom_object,
                "kubeflow.org",
                version,
                self.namespace,
                plural,
                label_selector=MANAGED,
            )
            listed: dict[str, Any] = self.api.call(f"list {plural}", request)
            found += [{**obj, "kind": kind} for obj in listed.get("items") or []]
        return found

    def _job(self, name: str) -> dict[str, Any]:
        for obj in self._jobs():
            if obj["metadata"]["name"] == name:
                return obj
        raise KftrainError(f"no job named {name} launched by kftrain in namespace {self.namespace}")

    def _ref(self, obj: dict[str, Any]) -> Any:
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

    def logs(self, name: str, replica: str | None, tail: int | None, follow: bool) -> Any:
        from kftrain.backends.kubernetes.pods import main_container, pod_label, pod_name

        obj = self._job(name)
        ref = self._ref(obj)
        pods = {pod_label(p): p for p in self.api.job_pods(ref)}
        _, logs_uri = self._locations(obj)
        labels = [replica] if replica else sorted(pods)
        for label in labels:
            if label in pods:
                pod = pods[label]
                text = self.api.pod_log(
                    self.namespace,
                    pod_name(pod),
                    main_container(pod, ref.main_container).name,
                    tail_lines=tail,
                    previous=False,
                )
            elif logs_uri and storage.exists(storage.join(logs_uri, f"{label}.log")):
                text = storage.read_bytes(storage.join(logs_uri, f"{label}.log")).decode("utf-8", "replace")
            else:
                continue
            for line in _tail(text.splitlines(), tail):
                yield label, line

    def delete(self, name: str) -> str:
        self.api.delete_job(self._ref(self._job(name)), "Background")
        return f"deleted {name}"

    def _locations(self, obj: dict[str, Any]) -> tuple[str, str]:
        for spec in _replica_specs(obj).values():
            for container in (((spec.get("template") or {}).get("spec") or {}).get("containers")) or []:
                for env in container.get("env") or []:
                    if env.get("name") == MODEL_ENV and env.get("value"):
                        uri = str(env["value"])
                        return uri, f"{uri.rstrip('/')}-logs"
        return "", ""

    def locations(self, name: str) -> tuple[str, str]:
        return self._locations(self._job(name))


def _replica_specs(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec") or {}
    for key in ("tfReplicaSpecs", "pytorchReplicaSpecs", "mpiReplicaSpecs"):
        if key in spec:
            return dict(spec[key])
    return {}


def _phase(obj: dict[str, Any]) -> str:
    """The job's latest true condition (Created, Running, Succeeded, Failed...)."""
    true = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    return str(true[-1].get("type")) if true else "Pending"
