"""``kftrain submit``: upload the pipeline (or a new version of it), start a run, and optionally follow it."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from kftrain.cli.kfp.connection import (
    Connection,
    api_error_message,
    api_errors,
    connect,
    is_transient_api_error,
    quiet,
)
from kftrain.cli.kfp.package import Prepared, prepare
from kftrain.cli.kfp.upload import run_target, upload, use_experiment
from kftrain.errors import KftrainError
from kftrain.retry import RetryPolicy, call_with_retry

SUCCEEDED = "SUCCEEDED"
# KFP v2 runtime states that never change again (v1's "Error" kept for old servers).
TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "SKIPPED", "CANCELED", "ERROR"})


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
    row, ``poll_seconds`` apart, before it is raised: a long run should not be lost to one API server restart.
    """
    policy = RetryPolicy(attempts=max_transient_errors + 1, initial_s=poll_seconds, max_s=poll_seconds)

    def retrying(exc: BaseException) -> str:
        # call_with_retry describes the error once per retry, before it waits: the moment to tell the user.
        message = api_error_message(exc)
        out(f"[kftrain] run {run_id}: polling failed ({message}), retrying")
        return message

    started = time.monotonic()
    last: str | None = None
    while True:
        run = call_with_retry(
            lambda: client.get_run(run_id),
            policy=policy,
            is_transient=is_transient_api_error,
            what=f"polling run {run_id}",
            sleep=sleep,
            describe=retrying,
        )
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


@api_errors
def cmd_submit(args: argparse.Namespace) -> int:
    """``submit PIPELINE``: upload the pipeline (or a version), start a run; with ``--wait``, follow it to its end."""
    with prepare(args) as prepared:
        return _submit(prepared, args)


def _submit(prepared: Prepared, args: argparse.Namespace) -> int:
    conn = Connection.from_args(args)
    client = connect(conn)
    experiment = use_experiment(client, conn, args.experiment)
    uploaded = upload(client, conn, prepared, args.description)
    run_name = (
        args.run_name or f"{prepared.name} {uploaded.version_name} {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S}"
    )
    with quiet():
        run = client.run_pipeline(
            experiment_id=experiment.experiment_id,
            job_name=run_name,
            **run_target(prepared, uploaded, args),
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
