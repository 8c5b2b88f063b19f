"""The ``submit`` and ``schedule`` subcommands of ``kftrain``: their options, and the function each runs."""

from __future__ import annotations

import argparse
from typing import Any

from kftrain.cli.kfp.connection import ENV_HOST, ENV_NAMESPACE, ENV_TOKEN
from kftrain.cli.kfp.schedule import CHANGES, cmd_schedule_change, cmd_schedule_create, cmd_schedule_list
from kftrain.cli.kfp.submit import cmd_submit
from kftrain.cli.kfp.upload import DEFAULT_EXPERIMENT
from kftrain.cli.numbers import seconds, whole
from kftrain.cli.reference import HELP as PIPELINE_HELP


def connection_parser() -> argparse.ArgumentParser:
    """The options naming the server (each with an environment variable), shared by every command."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("KFP API server")
    group.add_argument("--host", help=f"API server URL (env {ENV_HOST}), e.g. http://localhost:8888")
    group.add_argument("--namespace", help=f"namespace of a multi-user deployment (env {ENV_NAMESPACE})")
    group.add_argument("--token", help=f"bearer token sent as Authorization (env {ENV_TOKEN}; prefer the env)")
    return parent


def pipeline_parser() -> argparse.ArgumentParser:
    """The options naming the pipeline and how it runs, shared by ``submit`` and ``schedule create``."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("pipeline", help=PIPELINE_HELP)
    parent.add_argument("--param", action="append", metavar="NAME=VALUE", help="pipeline parameter (JSON or text)")
    parent.add_argument("--params-file", metavar="FILE", help="pipeline parameters as a YAML mapping (--param wins)")
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
    conn = connection_parser()
    pipeline = pipeline_parser()

    submit = subparsers.add_parser(
        "submit", parents=[conn, pipeline], help="upload a pipeline (or a new version) to KFP and start a run"
    )
    submit.add_argument("--run-name", help="display name of the run (default: pipeline, version and time)")
    submit.add_argument("--wait", action="store_true", help="follow the run; exit non-zero unless it SUCCEEDED")
    submit.add_argument("--poll-seconds", type=seconds, default=5.0, help="with --wait: seconds between polls")
    submit.add_argument("--timeout", type=seconds, default=None, help="with --wait: give up after S seconds")
    submit.set_defaults(func=cmd_submit)

    schedule = subparsers.add_parser("schedule", help="recurring runs: create, list, enable, disable, delete")
    actions = schedule.add_subparsers(dest="schedule_action", required=True)

    create = actions.add_parser("create", parents=[conn, pipeline], help="create a recurring run")
    when = create.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="KFP cron, 6 fields with seconds first: '0 0 3 * * *' is 03:00 daily")
    when.add_argument("--interval-seconds", type=whole("seconds", low=1), help="run every N seconds")
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

    for action in CHANGES:
        change = actions.add_parser(action, parents=[conn], help=f"{action} a recurring run")
        change.add_argument("ref", metavar="ID_OR_NAME", help="recurring run id, or its unique name")
        change.set_defaults(func=cmd_schedule_change)
