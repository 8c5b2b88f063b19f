"""``kftrain schedule create|list|enable|disable|delete``: recurring runs of a pipeline on the server.

A recurring run is found by its id (a UUID) or by its display name, which must then be unique.
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from kftrain.cli.kfp.connection import Connection, api_errors, connect, display_name, eq_filter, pages, quiet
from kftrain.cli.kfp.package import Prepared, prepare
from kftrain.cli.kfp.schedule_spec import ScheduleSpec
from kftrain.cli.kfp.upload import find_experiment, run_target, upload, use_experiment
from kftrain.errors import KftrainError

# What ``schedule ACTION`` does to one recurring run, and the word that reports it.
CHANGES = {"enable": "enabled", "disable": "disabled", "delete": "deleted"}


@api_errors
def cmd_schedule_create(args: argparse.Namespace) -> int:
    """``schedule create PIPELINE``: upload the pipeline (or a version) and create a recurring run of it."""
    # Every local check first: a bad schedule must not upload anything.
    spec = ScheduleSpec.from_args(args)
    with prepare(args) as prepared:
        return _create(spec, prepared, args)


def _create(spec: ScheduleSpec, prepared: Prepared, args: argparse.Namespace) -> int:
    conn = Connection.from_args(args)
    client = connect(conn)
    schedule_name = args.name or f"{prepared.name} schedule"
    experiment = use_experiment(client, conn, args.experiment)
    clash = [
        r
        for r in pages(
            client.list_recurring_runs,
            "recurring_runs",
            experiment_id=experiment.experiment_id,
            filter=eq_filter(schedule_name),
        )
        if display_name(r) == schedule_name
    ]
    if clash:
        raise KftrainError(
            f"a recurring run named {schedule_name!r} already exists ({clash[0].recurring_run_id}); "
            "delete it (kftrain schedule delete) or pass another --name"
        )
    uploaded = upload(client, conn, prepared, args.description)
    with quiet():
        job = client.create_recurring_run(
            experiment_id=experiment.experiment_id,
            job_name=schedule_name,
            description=args.description,
            start_time=spec.start,
            end_time=spec.end,
            interval_second=spec.interval_seconds,
            cron_expression=spec.cron,
            max_concurrency=spec.max_concurrency,
            no_catchup=args.no_catchup,
            enabled=not args.disabled,
            **run_target(prepared, uploaded, args),
        )
    print(
        f"[kftrain] created recurring run {schedule_name!r} ({job.recurring_run_id}): {spec.describe()}, "
        f"max concurrency {spec.max_concurrency}, catch-up {'off' if args.no_catchup else 'on'}"
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


@api_errors
def cmd_schedule_list(args: argparse.Namespace) -> int:
    """``schedule list``: a table of the recurring runs (of one experiment, or of the namespace)."""
    conn = Connection.from_args(args)
    client = connect(conn)
    kwargs: dict[str, Any] = {}
    if args.experiment:
        experiment = find_experiment(client, conn, args.experiment)
        kwargs["experiment_id"] = experiment.experiment_id
    elif conn.namespace:
        kwargs["namespace"] = conn.namespace
    jobs = list(pages(client.list_recurring_runs, "recurring_runs", **kwargs))
    if not jobs:
        print("no recurring runs")
        return 0
    rows = [("ID", "NAME", "STATUS", "TRIGGER", "MAX", "CATCH-UP")]
    for job in jobs:
        rows.append(
            (
                str(job.recurring_run_id),
                display_name(job),
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
        for r in pages(client.list_recurring_runs, "recurring_runs", filter=eq_filter(ref), **kwargs)
        if display_name(r) == ref
    ]
    if not found:
        raise KftrainError(f"no recurring run named {ref!r} (kftrain schedule list shows them)")
    if len(found) > 1:
        ids = ", ".join(r.recurring_run_id for r in found)
        raise KftrainError(f"{len(found)} recurring runs are named {ref!r}: use the id ({ids})")
    return found[0]


@api_errors
def cmd_schedule_change(args: argparse.Namespace) -> int:
    """``schedule enable|disable|delete ID_OR_NAME``."""
    conn = Connection.from_args(args)
    client = connect(conn)
    job = resolve_recurring_run(client, conn, args.ref)
    action = args.schedule_action
    change = {
        "enable": client.enable_recurring_run,
        "disable": client.disable_recurring_run,
        "delete": client.delete_recurring_run,
    }[action]
    change(job.recurring_run_id)
    print(f"[kftrain] {CHANGES[action]} recurring run {display_name(job)!r} ({job.recurring_run_id})")
    return 0
