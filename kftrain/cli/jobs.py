"""``kftrain jobs``: list, inspect, read the logs of, delete and download the jobs kftrain launched.

The backend named (``--backend local``, the default, or ``kubernetes``) answers every verb through its one
interface (:class:`kftrain.backends.base.Backend`: ``list_jobs``, ``get_job``, ``job_logs``, ``delete_job``);
this module parses the command line and prints. ``download`` copies the model and the kept logs from where the job
records them (:mod:`kftrain.backends.kept`), so it works once the job's pods or processes are gone.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import time
import unicodedata
from pathlib import Path
from typing import Any

from kftrain.backends import KubernetesConfig, LocalConfig, make_backend
from kftrain.backends.base import Backend, JobPhase, JobStatus
from kftrain.backends.kept import download_outputs
from kftrain.backends.local.state import LOST
from kftrain.cli.numbers import whole
from kftrain.errors import KftrainError
from kftrain.metrics.collect import Collector
from kftrain.progress import format_duration

_POD_LINE = re.compile(r"pod \S+ \(([^)]+)\): ")


def add_commands(sub: Any) -> None:
    jobs = sub.add_parser("jobs", help="list, inspect, read the logs of, delete and download launched jobs")
    jobs.add_argument("--backend", choices=("local", "kubernetes"), default="local")
    jobs.add_argument("--namespace", default=None, help="kubernetes: the namespace (default: kubeconfig's)")
    verbs = jobs.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="jobs with kind, phase, age, run and task")
    listing.add_argument("--all", action="store_true", help="local: every user's jobs in a shared state folder")
    verbs.add_parser("status", help="conditions, replicas, restarts, events, progress").add_argument("name")
    logs = verbs.add_parser("logs", help="a job's replica logs (live, else the kept ones)")
    logs.add_argument("name")
    logs.add_argument("--replica", default=None, help="one replica (worker-1); default: every one")
    logs.add_argument("--tail", type=whole("lines", low=1), default=None, help="only the last N lines of each")
    logs.add_argument("--follow", action="store_true", help="then print new lines while the replicas run")
    verbs.add_parser("delete", help="stop and forget the job").add_argument("name")
    download = verbs.add_parser("download", help="copy the job's model and logs to a local folder")
    download.add_argument("name")
    download.add_argument("dest")
    jobs.set_defaults(func=cmd_jobs)


def backend_for(args: argparse.Namespace) -> Backend:
    if args.backend == "local":
        return make_backend(LocalConfig(every_user=getattr(args, "all", False)))
    return make_backend(KubernetesConfig(namespace=args.namespace))


def cmd_jobs(args: argparse.Namespace) -> int:
    backend = backend_for(args)
    if args.verb == "list":
        listed = backend.list_jobs()  # a failure is its one line alone, with no table header before it
        print(f"{'NAME':40} {'KIND':11} {'PHASE':10} {'AGE':>7}  RUN/TASK")
        for job in map(printable_job, listed):
            print(f"{job.name:40} {job.kind:11} {job.phase:10} {_age(job):>7}  {_run_of(job)}")
    elif args.verb == "status":
        job = printable_job(backend.get_job(args.name))
        print(f"{job.name}: {job.kind} {job.phase} ({_age(job)} old)")
        for line in job.details:
            print(f"  {line}")
        if (progress := progress_of(backend, args.name)) is not None:
            print(f"  {printable(progress)}")
        if job.model_uri or job.logs_uri:
            print(f"  model: {job.model_uri}\n  logs: {job.logs_uri}")
    elif args.verb == "logs":
        if args.replica is not None:
            _check_replica(printable_job(backend.get_job(args.name)), printable(args.replica), following=args.follow)
        for label, line in backend.job_logs(args.name, args.replica, args.tail, args.follow):
            print(f"[{printable(label)}] {line}", flush=True)  # followed lines show as they come
    elif args.verb == "delete":
        backend.delete_job(args.name)
        print(f"deleted {args.name}")
    else:
        job = backend.get_job(args.name)
        for what, source, target in download_outputs(job, Path(args.dest)):
            source, target = printable(source), printable(target)
            print(f"{what}: {source} -> {target}" if target else f"{what}: none at {source} (the job wrote none)")
    return 0


def progress_of(backend: Backend, name: str) -> str | None:
    """The job's progress as its launch step prints it (``progress: epoch 3/20 loss 0.41 (master-0)``), from the
    metrics lines of its replicas' logs so far (:class:`kftrain.metrics.collect.Collector`); None when they reported
    none, or the logs cannot be read."""
    said: list[str] = []
    collector = Collector(said.append, every_s=math.inf, clock=lambda: 0.0)  # no rate: the points came long ago
    try:
        for label, line in backend.job_logs(name, None, None, False):
            collector.feed(label, line)
    except (KftrainError, OSError):
        return None
    collector.close()
    return next((line for line in reversed(said) if line.startswith("progress:")), None)


def printable(text: str) -> str:
    """``text`` with every control character (a terminal's escape sequences, a carriage return, C1 controls, line
    separators, bidirectional overrides) written as its escape, ``\\x1b``: what a record holds is never a command
    to the terminal."""
    return "".join(_escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    if unicodedata.category(ch) in ("Cc", "Zl", "Zp") or "\u202a" <= ch <= "\u202e" or "\u2066" <= ch <= "\u2069":
        return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
    return ch


def printable_job(job: JobStatus) -> JobStatus:
    """``job`` with every text field :func:`printable`: the one way a job's fields reach the terminal."""
    changed: dict[str, Any] = {}
    for item in dataclasses.fields(job):
        value = getattr(job, item.name)
        if isinstance(value, str):
            changed[item.name] = printable(value)
        elif isinstance(value, tuple):
            changed[item.name] = tuple(printable(str(v)) for v in value)
    return dataclasses.replace(job, **changed)


def _check_replica(job: JobStatus, replica: str, *, following: bool) -> None:
    """Refuse a replica the job does not have, naming those it has; a job followed while it runs may still start
    it (a scale-up), so it is not refused then."""
    known = replicas_of(job)
    ended = job.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED, LOST)
    if known and replica not in known and (ended or not following):
        raise KftrainError(f"job {job.name} has no replica {replica!r}; its replicas: {', '.join(known)}")


def replicas_of(job: JobStatus) -> list[str]:
    """The replicas a backend's status lists: the local backend's ``replicas: a, b`` line
    (:func:`kftrain.backends.local.jobs.get_job`), a cluster's ``pod NAME (replica): ...`` lines
    (:class:`kftrain.backends.kubernetes.jobs`); empty when it lists none."""
    found: list[str] = []
    for line in job.details:
        if line.startswith("replicas: "):
            found += [name for name in line.removeprefix("replicas: ").split(", ") if name]
        elif pod := _POD_LINE.match(line):
            found.append(pod.group(1))
    return sorted(set(found))


def _age(job: JobStatus) -> str:
    return format_duration(max(0.0, time.time() - job.created))


def _run_of(job: JobStatus) -> str:
    return f"{job.run_id}/{job.task_id}" if job.run_id or job.task_id else "-"
