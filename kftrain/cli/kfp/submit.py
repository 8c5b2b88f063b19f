"""Submit and schedule pipelines on a Kubeflow Pipelines API server with the real ``kfp.Client``.

    kftrain submit PIPELINE [--param NAME=VALUE ...] [--experiment NAME] [--wait]
    kftrain schedule create PIPELINE (--cron "0 0 3 * * *" | --interval-seconds N) [--max-concurrency N]
                            [--no-catchup] [--start RFC3339] [--end RFC3339]
    kftrain schedule list
    kftrain schedule enable|disable|delete ID_OR_NAME

``PIPELINE`` is a shipped pipeline by name (``pytorch-digits``: its committed ``pipeline.yaml``) or
the path of a compiled pipeline file. The server is ``--host`` / ``KFP_HOST``; the namespace (multi-user
deployments) ``--namespace`` / ``KFP_NAMESPACE``; a bearer token ``--token`` / ``KFP_TOKEN``.

The pipeline is uploaded once by name; when a pipeline of that name exists, the file is uploaded as
a new version named ``<package version>-<git sha>`` (``nogit`` outside a git checkout), and a version
of that name that already exists is reused, so submitting the same commit twice uploads nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import logging
import os
import re
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kftrain import __version__
from kftrain.cli.params import parse_params
from kftrain.errors import KftrainError

log = logging.getLogger(__name__)

ENV_HOST = "KFP_HOST"
ENV_NAMESPACE = "KFP_NAMESPACE"
ENV_TOKEN = "KFP_TOKEN"
DEFAULT_EXPERIMENT = "Default"
SUCCEEDED = "SUCCEEDED"
# KFP v2 runtime states that never change again (v1's "Error" kept for old servers).
TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "SKIPPED", "CANCELED", "ERROR"})
PAGE_SIZE = 100
MAX_CONCURRENCY_RANGE = (1, 10)  # what the KFP API server accepts


# --- the pipeline file ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelinePackage:
    path: Path
    name: str  # pipelineInfo.name, the default display name on the server
    parameters: frozenset[str] | None  # the root's input parameters (None: not known, no check)


def resolve_package(pipeline: str) -> PipelinePackage:
    """A shipped pipeline by name (its committed ``pipeline.yaml``) or a compiled pipeline file by path."""
    path = Path(pipeline)
    if not (path.suffix in (".yaml", ".yml", ".json", ".zip", ".gz", ".tgz") or path.exists()):
        from kftrain.cli.pipelines import shipped_pipelines

        shipped = shipped_pipelines()
        if pipeline not in shipped:
            raise KftrainError(
                f"unknown pipeline {pipeline!r}: not a file, and not one of {', '.join(sorted(shipped))}"
            )
        import importlib.util

        spec = importlib.util.find_spec(shipped[pipeline])
        if spec is None or spec.origin is None:
            raise KftrainError(f"pipeline {pipeline!r}: cannot locate module {shipped[pipeline]}")
        path = Path(spec.origin).with_name("pipeline.yaml")
        if not path.is_file():
            raise KftrainError(f"pipeline {pipeline!r}: {path} is missing (run `kftrain compile`)")
    elif not path.is_file():
        raise KftrainError(f"pipeline file {path} does not exist")
    return _read_package(path)


def _read_package(path: Path) -> PipelinePackage:
    if path.suffix not in (".yaml", ".yml", ".json"):  # an archive: the server reads it
        return PipelinePackage(path=path, name=path.name.split(".")[0], parameters=None)
    import yaml

    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster on a compiled pipeline
        docs = [d for d in yaml.load_all(path.read_text(), Loader=loader) if d is not None]
    except yaml.YAMLError as exc:
        raise KftrainError(f"{path}: not valid YAML: {exc}") from exc
    spec = docs[0] if docs else None
    if isinstance(spec, dict) and "pipelineSpec" in spec:  # a PipelineJob wrapper
        spec = spec["pipelineSpec"]
    if not isinstance(spec, dict) or "pipelineInfo" not in spec or "root" not in spec:
        raise KftrainError(f"{path}: not a compiled KFP pipeline (no pipelineInfo/root)")
    name = str(spec["pipelineInfo"].get("name") or path.parent.name)
    params = spec["root"].get("inputDefinitions", {}).get("parameters", {}) or {}
    return PipelinePackage(path=path, name=name, parameters=frozenset(params))


def check_params(package: PipelinePackage, params: Mapping[str, Any]) -> None:
    if package.parameters is None:
        return
    unknown = sorted(set(params) - package.parameters)
    if unknown:
        raise KftrainError(
            f"{package.name}: unknown parameter(s) {', '.join(unknown)}; "
            f"the pipeline takes {', '.join(sorted(package.parameters)) or 'none'}"
        )


def git_sha(where: Path) -> str:
    """``git rev-parse --short HEAD`` in ``where``, or ``nogit``."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "nogit"
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and sha else "nogit"


def default_version_name(package: PipelinePackage) -> str:
    return f"{__version__}-{git_sha(package.path.resolve().parent)}"


# --- cron -------------------------------------------------------------------------------------------

_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# (name, low, high, names mapped to numbers)
_CRON_FIELDS: list[tuple[str, int, int, dict[str, int]]] = [
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {m: i + 1 for i, m in enumerate(_MONTHS)}),
    ("day-of-week", 0, 6, {d: i for i, d in enumerate(_DAYS)}),
]
_CRON_PART = re.compile(r"^(?P<range>\*|\?|[0-9A-Za-z]+(?:-[0-9A-Za-z]+)?)(?:/(?P<step>[0-9]+))?$")


def validate_cron(expr: str) -> str:
    """Check a KFP cron expression (6 fields, seconds first, robfig/cron syntax); return it normalized.

    Raises :class:`KftrainError` naming the field that is wrong, before anything talks to the server.
    """
    fields = expr.split()
    if len(fields) != 6:
        hint = ""
        if len(fields) == 5:
            hint = f"; a 5-field crontab needs a seconds field first: '0 {' '.join(fields)}'"
        raise KftrainError(
            f"--cron {expr!r}: KFP cron needs 6 fields (second minute hour day-of-month month day-of-week), "
            f"got {len(fields)}{hint}"
        )
    for value, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for part in value.split(","):
            match = _CRON_PART.match(part)
            if not match:
                raise KftrainError(f"--cron {expr!r}: {name} field {value!r}: cannot parse {part!r}")
            bounds = match["range"]
            if bounds not in ("*", "?"):
                ends = [_cron_number(expr, name, b, low, high, names) for b in bounds.split("-")]
                if len(ends) == 2 and ends[0] > ends[1]:
                    raise KftrainError(f"--cron {expr!r}: {name} field {value!r}: range {bounds} is backwards")
            if match["step"] is not None and int(match["step"]) == 0:
                raise KftrainError(f"--cron {expr!r}: {name} field {value!r}: step must be > 0")
    return " ".join(fields)


def _cron_number(expr: str, name: str, text: str, low: int, high: int, names: Mapping[str, int]) -> int:
    if text.upper() in names:
        return names[text.upper()]
    if not text.isdigit():
        raise KftrainError(f"--cron {expr!r}: {name} field: {text!r} is not a number or name")
    number = int(text)
    if not low <= number <= high:
        raise KftrainError(f"--cron {expr!r}: {name} field: {number} is outside {low}-{high}")
    return number


def validate_time(flag: str, text: str | None) -> str | None:
    """An RFC 3339 time (``2026-01-31T03:00:00Z``) as the server wants it, or None."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise KftrainError(f"{flag} {text!r}: expected an RFC 3339 time such as 2026-01-31T03:00:00Z") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the server -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connection:
    host: str
    namespace: str | None = None
    token: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Connection:
        host = args.host or os.environ.get(ENV_HOST)
        if not host:
            raise KftrainError(f"no KFP API server: pass --host or set {ENV_HOST} (e.g. http://localhost:8888)")
        namespace = args.namespace or os.environ.get(ENV_NAMESPACE) or None
        token = args.token or os.environ.get(ENV_TOKEN) or None
        return cls(host=host.rstrip("/"), namespace=namespace, token=token)

    def ui_link(self, fragment: str) -> str:
        return f"{self.host}/#/{fragment}"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """kfp.Client prints links and warns on construction; keep our output ours (the text goes to debug)."""
    buffer = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buffer):
        warnings.simplefilter("ignore", FutureWarning)
        yield
    if buffer.getvalue().strip():
        log.debug("kfp: %s", buffer.getvalue().strip())


def connect(conn: Connection) -> Any:
    """The real ``kfp.Client`` for this server (no kubeconfig lookup: the host is always explicit)."""
    import kfp

    with _quiet():
        return kfp.Client(host=conn.host, namespace=conn.namespace or "kubeflow", existing_token=conn.token)


def _api_error_message(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    detail = ""
    if body:
        try:
            payload = json.loads(body)
            detail = str(payload.get("message") or payload.get("error_message") or body)
        except (ValueError, AttributeError):
            detail = str(body)
    detail = detail.strip().splitlines()[0] if detail.strip() else str(getattr(exc, "reason", "") or exc)
    return f"HTTP {status}: {detail}" if status else detail


def _api_errors(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn the server's and the network's exceptions into a :class:`KftrainError` with a readable message."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        from kfp_server_api.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return func(args)
        except ApiException as exc:
            hint = " (check --token / KFP_TOKEN)" if exc.status in (401, 403) else ""
            raise KftrainError(f"KFP API server: {_api_error_message(exc)}{hint}") from exc
        except HTTPError as exc:
            host = getattr(args, "host", None) or os.environ.get(ENV_HOST)
            raise KftrainError(f"cannot reach the KFP API server at {host}: {exc}") from exc

    return wrapper


def _pages(call: Callable[..., Any], items: str, **kwargs: Any) -> Iterator[Any]:
    """Every item of a paginated list call."""
    token = ""
    while True:
        response = call(page_token=token, page_size=PAGE_SIZE, **kwargs)
        yield from getattr(response, items, None) or []
        token = getattr(response, "next_page_token", None) or ""
        if not token:
            return


def _eq_filter(value: str, key: str = "display_name") -> str:
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": key, "stringValue": value}]})


def _display_name(obj: Any) -> str:
    return str(getattr(obj, "display_name", None) or getattr(obj, "name", None) or "")


def ensure_experiment(client: Any, conn: Connection, name: str) -> tuple[Any, bool]:
    """The experiment of that name, created when missing; (experiment, created)."""
    try:
        with _quiet():
            return client.get_experiment(experiment_name=name, namespace=conn.namespace), False
    except ValueError as exc:
        if not str(exc).startswith("No experiment is found"):
            raise KftrainError(f"experiment {name!r}: {exc}") from exc
    with _quiet():
        return client.create_experiment(name=name, namespace=conn.namespace), True


@dataclass(frozen=True)
class Uploaded:
    pipeline_id: str
    version_id: str
    version_name: str
    action: str  # "uploaded pipeline", "uploaded version", "reused version"


def find_pipeline(client: Any, conn: Connection, name: str) -> Any | None:
    found = [
        p
        for p in _pages(client.list_pipelines, "pipelines", filter=_eq_filter(name), namespace=conn.namespace)
        if _display_name(p) == name
    ]
    if len(found) > 1:
        ids = ", ".join(p.pipeline_id for p in found)
        raise KftrainError(f"{len(found)} pipelines are named {name!r} ({ids}); pass --pipeline-name")
    return found[0] if found else None


def find_version(client: Any, pipeline_id: str, name: str) -> Any | None:
    for version in _pages(
        client.list_pipeline_versions, "pipeline_versions", pipeline_id=pipeline_id, filter=_eq_filter(name)
    ):
        if _display_name(version) == name:
            return version
    return None


def ensure_pipeline(
    client: Any, conn: Connection, package: PipelinePackage, name: str, version_name: str, description: str | None
) -> Uploaded:
    """Upload the pipeline, or a version of it named ``version_name`` (reused when it exists)."""
    existing = find_pipeline(client, conn, name)
    if existing is None:
        with _quiet():
            pipeline = client.upload_pipeline(
                str(package.path), pipeline_name=name, description=description, namespace=conn.namespace
            )
        versions = client.list_pipeline_versions(
            pipeline_id=pipeline.pipeline_id, page_size=1, sort_by="created_at desc"
        ).pipeline_versions
        if not versions:
            raise KftrainError(f"pipeline {name!r} ({pipeline.pipeline_id}) was uploaded but has no version")
        return Uploaded(pipeline.pipeline_id, versions[0].pipeline_version_id, _display_name(versions[0]), "uploaded")
    version = find_version(client, existing.pipeline_id, version_name)
    if version is not None:
        return Uploaded(existing.pipeline_id, version.pipeline_version_id, version_name, "reused existing version")
    with _quiet():
        version = client.upload_pipeline_version(
            str(package.path),
            pipeline_version_name=version_name,
            pipeline_id=existing.pipeline_id,
            description=description,
        )
    return Uploaded(existing.pipeline_id, version.pipeline_version_id, version_name, "uploaded new version")


def _prepare(args: argparse.Namespace) -> tuple[PipelinePackage, dict[str, Any], str, str]:
    """Everything checked locally before the first request: package, params, pipeline and version names."""
    package = resolve_package(args.pipeline)
    params = parse_params(args.param)
    check_params(package, params)
    name = args.pipeline_name or package.name
    from kfp.client.client import validate_pipeline_display_name

    try:
        validate_pipeline_display_name(name)
    except ValueError as exc:
        raise KftrainError(f"--pipeline-name {name!r}: {exc}") from exc
    version_name = args.version_name or default_version_name(package)
    return package, params, name, version_name


def _experiment(client: Any, conn: Connection, name: str) -> Any:
    experiment, created = ensure_experiment(client, conn, name)
    print(f"[kftrain] {'created' if created else 'using'} experiment {name!r} ({experiment.experiment_id})")
    return experiment


def _upload(
    client: Any, conn: Connection, args: argparse.Namespace, package: PipelinePackage, name: str, version_name: str
) -> Uploaded:
    uploaded = ensure_pipeline(client, conn, package, name, version_name, args.description)
    print(
        f"[kftrain] {uploaded.action}: pipeline {name!r} ({uploaded.pipeline_id}) "
        f"version {uploaded.version_name!r} ({uploaded.version_id})"
    )
    return uploaded


# --- submit -----------------------------------------------------------------------------------------


def wait_for_run(
    client: Any,
    run_id: str,
    *,
    poll_seconds: float = 5.0,
    timeout: float | None = None,
    out: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    max_transient_errors: int = 5,
) -> str:
    """Poll the run until its state is terminal, reporting every change; return the final state.

    A server error (5xx) or a dropped connection while polling is retried ``max_transient_errors`` times in a
    row before it is raised: a long run should not be lost to one API server restart.
    """
    from kfp_server_api.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    started = time.monotonic()
    last: str | None = None
    errors = 0
    while True:
        try:
            run = client.get_run(run_id)
            errors = 0
        except (ApiException, HTTPError) as exc:
            transient = not isinstance(exc, ApiException) or (exc.status or 0) >= 500
            errors += 1
            if not transient or errors > max_transient_errors:
                raise
            out(f"[kftrain] run {run_id}: polling failed ({_api_error_message(exc)}), retrying")
            sleep(poll_seconds)
            continue
        state = str(run.state or "PENDING").upper()
        if state != last:
            out(f"[kftrain] run {run_id}: {state} ({time.monotonic() - started:.0f}s)")
            last = state
        if state in TERMINAL_STATES:
            if state != SUCCEEDED and getattr(run, "error", None) is not None:
                message = getattr(run.error, "message", None)
                if message:
                    out(f"[kftrain] run {run_id}: {message}")
            return state
        if timeout is not None and time.monotonic() - started > timeout:
            raise KftrainError(f"run {run_id} still {state} after {timeout:g}s (it keeps running on the server)")
        sleep(poll_seconds)


@_api_errors
def cmd_submit(args: argparse.Namespace) -> int:
    package, params, name, version_name = _prepare(args)
    conn = Connection.from_args(args)
    client = connect(conn)
    experiment = _experiment(client, conn, args.experiment)
    uploaded = _upload(client, conn, args, package, name, version_name)
    run_name = args.run_name or f"{name} {uploaded.version_name} {datetime.now(UTC):%Y-%m-%d %H:%M:%S}"
    with _quiet():
        run = client.run_pipeline(
            experiment_id=experiment.experiment_id,
            job_name=run_name,
            params=params,
            pipeline_id=uploaded.pipeline_id,
            version_id=uploaded.version_id,
            pipeline_root=args.pipeline_root,
            service_account=args.service_account,
        )
    print(f"[kftrain] created run {run_name!r} ({run.run_id}): {conn.ui_link(f'runs/details/{run.run_id}')}")
    if not args.wait:
        return 0
    state = wait_for_run(client, run.run_id, poll_seconds=args.poll_seconds, timeout=args.timeout)
    if state == SUCCEEDED:
        print(f"[kftrain] run {run.run_id} succeeded")
        return 0
    print(f"[kftrain] run {run.run_id} ended {state}", file=sys.stderr)
    return 1


# --- schedule ---------------------------------------------------------------------------------------


@_api_errors
def cmd_schedule_create(args: argparse.Namespace) -> int:
    # Every local check first: a bad schedule must not upload anything.
    cron = validate_cron(args.cron) if args.cron is not None else None
    if args.interval_seconds is not None and args.interval_seconds <= 0:
        raise KftrainError(f"--interval-seconds {args.interval_seconds}: must be > 0")
    low, high = MAX_CONCURRENCY_RANGE
    if not low <= args.max_concurrency <= high:
        raise KftrainError(f"--max-concurrency {args.max_concurrency}: KFP accepts {low} to {high}")
    start = validate_time("--start", args.start)
    end = validate_time("--end", args.end)
    if start and end and end <= start:
        raise KftrainError(f"--end {args.end} is not after --start {args.start}")
    package, params, name, version_name = _prepare(args)
    conn = Connection.from_args(args)
    client = connect(conn)
    schedule_name = args.name or f"{name} schedule"
    experiment = _experiment(client, conn, args.experiment)
    clash = [
        r
        for r in _pages(
            client.list_recurring_runs,
            "recurring_runs",
            experiment_id=experiment.experiment_id,
            filter=_eq_filter(schedule_name),
        )
        if _display_name(r) == schedule_name
    ]
    if clash:
        raise KftrainError(
            f"a recurring run named {schedule_name!r} already exists ({clash[0].recurring_run_id}); "
            "delete it (kftrain schedule delete) or pass another --name"
        )
    uploaded = _upload(client, conn, args, package, name, version_name)
    with _quiet():
        job = client.create_recurring_run(
            experiment_id=experiment.experiment_id,
            job_name=schedule_name,
            description=args.description,
            start_time=start,
            end_time=end,
            interval_second=args.interval_seconds,
            cron_expression=cron,
            max_concurrency=args.max_concurrency,
            no_catchup=args.no_catchup,
            params=params,
            pipeline_id=uploaded.pipeline_id,
            version_id=uploaded.version_id,
            enabled=not args.disabled,
            pipeline_root=args.pipeline_root,
            service_account=args.service_account,
        )
    every = f"cron {cron!r}" if cron else f"every {args.interval_seconds}s"
    print(
        f"[kftrain] created recurring run {schedule_name!r} ({job.recurring_run_id}): {every}, "
        f"max concurrency {args.max_concurrency}, catch-up {'off' if args.no_catchup else 'on'}"
        f"{', disabled' if args.disabled else ''}"
    )
    print(f"[kftrain] {conn.ui_link(f'recurringrun/details/{job.recurring_run_id}')}")
    return 0


def _describe_trigger(trigger: Any) -> str:
    if trigger is None:
        return "-"
    if trigger.cron_schedule is not None and trigger.cron_schedule.cron:
        return f"cron {trigger.cron_schedule.cron}"
    if trigger.periodic_schedule is not None and trigger.periodic_schedule.interval_second:
        return f"every {trigger.periodic_schedule.interval_second}s"
    return "-"


def _schedule_status(job: Any) -> str:
    status = str(job.status or "")
    if status in ("ENABLED", "DISABLED"):
        return status.lower()
    return {"ENABLE": "enabled", "DISABLE": "disabled"}.get(str(job.mode or ""), status.lower() or "-")


@_api_errors
def cmd_schedule_list(args: argparse.Namespace) -> int:
    conn = Connection.from_args(args)
    client = connect(conn)
    kwargs: dict[str, Any] = {}
    if args.experiment:
        experiment = find_experiment(client, conn, args.experiment)
        kwargs["experiment_id"] = experiment.experiment_id
    elif conn.namespace:
        kwargs["namespace"] = conn.namespace
    jobs = list(_pages(client.list_recurring_runs, "recurring_runs", **kwargs))
    if not jobs:
        print("no recurring runs")
        return 0
    rows = [("ID", "NAME", "STATUS", "TRIGGER", "MAX", "CATCH-UP")]
    for job in jobs:
        rows.append(
            (
                str(job.recurring_run_id),
                _display_name(job),
                _schedule_status(job),
                _describe_trigger(job.trigger),
                str(job.max_concurrency or "-"),
                "off" if job.no_catchup else "on",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def find_experiment(client: Any, conn: Connection, name: str) -> Any:
    try:
        with _quiet():
            return client.get_experiment(experiment_name=name, namespace=conn.namespace)
    except ValueError as exc:
        raise KftrainError(f"experiment {name!r}: {exc}") from exc


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def resolve_recurring_run(client: Any, conn: Connection, ref: str) -> Any:
    """A recurring run by id (a UUID) or by its display name (which must be unique)."""
    if _is_uuid(ref):
        return client.get_recurring_run(ref)
    kwargs: dict[str, Any] = {"namespace": conn.namespace} if conn.namespace else {}
    found = [
        r
        for r in _pages(client.list_recurring_runs, "recurring_runs", filter=_eq_filter(ref), **kwargs)
        if _display_name(r) == ref
    ]
    if not found:
        raise KftrainError(f"no recurring run named {ref!r} (kftrain schedule list shows them)")
    if len(found) > 1:
        ids = ", ".join(r.recurring_run_id for r in found)
        raise KftrainError(f"{len(found)} recurring runs are named {ref!r}: use the id ({ids})")
    return found[0]


@_api_errors
def cmd_schedule_change(args: argparse.Namespace) -> int:
    conn = Connection.from_args(args)
    client = connect(conn)
    job = resolve_recurring_run(client, conn, args.ref)
    action = args.schedule_action
    if action == "enable":
        client.enable_recurring_run(job.recurring_run_id)
    elif action == "disable":
        client.disable_recurring_run(job.recurring_run_id)
    elif action == "delete":
        client.delete_recurring_run(job.recurring_run_id)
    else:  # pragma: no cover (argparse restricts the choices)
        raise KftrainError(f"unknown action {action!r}")
    done = {"enable": "enabled", "disable": "disabled", "delete": "deleted"}[action]
    print(f"[kftrain] {done} recurring run {_display_name(job)!r} ({job.recurring_run_id})")
    return 0


# --- the command line -------------------------------------------------------------------------------


def _connection_parser() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("KFP API server")
    group.add_argument("--host", help=f"API server URL (env {ENV_HOST}), e.g. http://localhost:8888")
    group.add_argument("--namespace", help=f"namespace of a multi-user deployment (env {ENV_NAMESPACE})")
    group.add_argument("--token", help=f"bearer token sent as Authorization (env {ENV_TOKEN}; prefer the env)")
    return parent


def _pipeline_parser() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("pipeline", help="a shipped pipeline (e.g. pytorch-digits) or a compiled pipeline file")
    parent.add_argument("--param", action="append", metavar="NAME=VALUE", help="pipeline parameter (JSON or text)")
    parent.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="experiment, created when missing")
    parent.add_argument("--pipeline-name", help="pipeline name on the server (default: the file's pipelineInfo)")
    parent.add_argument(
        "--version-name", help="version name when the pipeline exists (default: <package version>-<git sha>)"
    )
    parent.add_argument("--description", help="description of an uploaded pipeline / version / schedule")
    parent.add_argument("--pipeline-root", help="root of the run's artifacts (default: the server's)")
    parent.add_argument("--service-account", help="Kubernetes service account the run's pods use")
    return parent


def add_commands(subparsers: Any) -> None:
    """Register ``submit`` and ``schedule`` on the ``kftrain`` command's subparsers."""
    conn = _connection_parser()
    pipeline = _pipeline_parser()

    submit = subparsers.add_parser(
        "submit", parents=[conn, pipeline], help="upload a pipeline (or a new version) to KFP and start a run"
    )
    submit.add_argument("--run-name", help="display name of the run (default: pipeline, version and time)")
    submit.add_argument("--wait", action="store_true", help="follow the run; exit non-zero unless it SUCCEEDED")
    submit.add_argument("--poll-seconds", type=float, default=5.0, help="with --wait: seconds between polls")
    submit.add_argument("--timeout", type=float, default=None, help="with --wait: give up after S seconds")
    submit.set_defaults(func=cmd_submit)

    schedule = subparsers.add_parser("schedule", help="recurring runs: create, list, enable, disable, delete")
    actions = schedule.add_subparsers(dest="schedule_action", required=True)

    create = actions.add_parser("create", parents=[conn, pipeline], help="create a recurring run")
    when = create.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="KFP cron, 6 fields with seconds first: '0 0 3 * * *' is 03:00 daily")
    when.add_argument("--interval-seconds", type=int, help="run every N seconds")
    create.add_argument("--name", help="name of the recurring run (default: '<pipeline> schedule')")
    create.add_argument("--max-concurrency", type=int, default=1, help="runs at once (1-10, default 1)")
    create.add_argument(
        "--no-catchup", action="store_true", help="do not backfill intervals missed while paused (default: catch up)"
    )
    create.add_argument("--start", help="RFC 3339 time of the first possible run")
    create.add_argument("--end", help="RFC 3339 time after which nothing runs")
    create.add_argument("--disabled", action="store_true", help="create it disabled")
    create.set_defaults(func=cmd_schedule_create)

    listing = actions.add_parser("list", parents=[conn], help="list recurring runs")
    listing.add_argument("--experiment", help="only this experiment's")
    listing.set_defaults(func=cmd_schedule_list)

    for action, text in (("enable", "enable"), ("disable", "disable"), ("delete", "delete")):
        change = actions.add_parser(action, parents=[conn], help=f"{text} a recurring run")
        change.add_argument("ref", metavar="ID_OR_NAME", help="recurring run id, or its unique name")
        change.set_defaults(func=cmd_schedule_change)
