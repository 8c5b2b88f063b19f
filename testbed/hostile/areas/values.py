"""Issue 52, class 6: values nobody checked (kftrain/cli/param_values.py, numbers.py, kfp/schedule_spec.py,
tracking/export.py, backends/local/jobs.py): ``--param`` values of the wrong kind given to ``kftrain submit`` (a fake
KFP server in the case's process, which must receive no upload and no run) and ``kftrain run``; numeric options out
of range; a schedule that can never fire; a registry name MLflow refuses (``..hidden``), which ``kftrain run``
must refuse before any step; a record's fields holding terminal escapes; a forged Running record naming another live
process, and a garbage record, under ``kftrain jobs delete``.

The typed pipeline is tests/cli/test_param_values.py's ``TYPED``; records are written as
tests/backends/local/test_jobs_safety.py's ``record`` writes them.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

from testbed.hostile.bystander import bystander, delete_spares
from testbed.hostile.case import CLEAR, FINE, LOSS, WRONG, Case, Observed, Sandbox

AREA = "values"
DOWN = "http://127.0.0.1:9"  # nothing listens: a command that got past its checks would say it cannot reach it
ESC = "\x1b]0;owned\x07\x1b[2J"


def _typed(sb: Sandbox) -> str:
    from tests.cli.test_param_values import TYPED

    sb.write("typed_pipeline.py", TYPED)
    return "typed_pipeline.py:typed"


def _submit(param: str, pipeline: str = "") -> Callable[[Sandbox], int]:
    """``kftrain submit PIPELINE --param PARAM`` (the typed one by default) to a fake KFP: refused with nothing
    uploaded or run."""

    def run(sb: Sandbox) -> int:
        from testbed.fake_kfp import FakeKFP

        ref = pipeline or _typed(sb)
        server = FakeKFP().start()
        try:
            code = sb.cli("submit", ref, "--param", param, "--host", server.url, "--timeout", "30")
            sent = server.calls("POST", ".*")
        finally:
            server.stop()
        if code != 0 and sent:
            raise Observed(WRONG, f"refused, but {len(sent)} request(s) were sent first: {sent[0].path}")
        return code

    return run


def _run(param: str) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        code = sb.cli("run", _typed(sb), "--param", param, "--pipeline-root", "runs")
        if code and (sb.work / "runs").exists():
            raise Observed(WRONG, "a refused run created its pipeline root")
        return code

    return run


def _cli(*argv: str) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        if argv[:2] == ("jobs", "logs"):  # a job whose kept log a --tail that got past its check would print
            logs = sb.state / f"{argv[2]}.logs"
            logs.mkdir(parents=True)
            (logs / "master-0.log").write_text("a line\n")
            _record(sb, argv[2], kept_logs=str(logs))
        return sb.cli(*argv)

    return run


def _register_hidden(sb: Sandbox) -> int:
    """``kftrain run`` of the shipped pipeline registering as ``..hidden``: refused before its first step (the
    tracking server is down, so a run that got past the check would train and then be refused at the export)."""
    sb.write("digits.csv", "a,b,label\n" + "".join(f"{i},{i % 7},{i % 2}\n" for i in range(40)))
    code = sb.cli(
        "run",
        "train-evaluate-export",
        "--param",
        "source=digits.csv",
        "--param",
        "register_model=..hidden",
        "--mlflow",
        DOWN,
        "--pipeline-root",
        "runs",
    )
    if code and any((sb.work / "runs").rglob("*")):
        raise Observed(WRONG, "refused, but after steps had run: the pipeline root holds their outputs")
    return code


def _record(sb: Sandbox, name: str, **fields: Any) -> None:
    body = {"name": name, "created": time.time(), "kind": "PyTorchJob", "phase": "Succeeded", "replicas": ["master-0"]}
    (sb.state / f"{name}.json").write_text(json.dumps({**body, **fields}))


def _escapes_listed(verb: str) -> Callable[[Sandbox], int]:
    """A record whose fields hold terminal escapes (an OSC title, a screen clear): listed escaped, never raw."""

    def run(sb: Sandbox) -> int:
        import contextlib
        import io

        _record(sb, "esc", kind=f"Py{ESC}Job", phase=f"Succ{ESC}eeded", details=[f"line{ESC}"], run_id=f"r{ESC}")
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = sb.cli("jobs", verb, *(["esc"] if verb != "list" else []))
        printed = out.getvalue()
        print(printed.encode("unicode_escape").decode()[-400:])
        if "\x1b" in printed or "\x07" in printed:
            raise Observed(WRONG, f"jobs {verb} printed a raw escape sequence")
        return code

    return run


def _forged_running(sb: Sandbox) -> int:
    """A forged Running record naming a live process of the user's (its pid and start time): ``jobs delete`` must
    not signal it."""
    with bystander(60) as (process, started):
        _record(sb, "forged", phase="Running", launcher_pid=process.pid, launcher_started=started)
        return delete_spares(sb, "forged", process, LOSS, "jobs delete signalled the bystander process")


def _garbage_while_running(sb: Sandbox) -> int:
    """A job running under its name, its record replaced by garbage: ``jobs delete`` says what it did truly (it
    stops the job, or says it could not), never "deleted" while the job runs on."""
    from kftrain.backends.local import state as local_state
    from testbed.hostile.areas.local_jobs import _waiting_job

    job = sb.process("launch", "--local", "-f", _waiting_job(sb, "live"), "--timeout", "120")
    try:
        deadline = time.monotonic() + 60
        while (local_state.read("live") or {}).get("phase") != "Running":
            if time.monotonic() > deadline or job.proc.poll() is not None:
                raise AssertionError(f"the job never ran: {job.output()[-1500:]}")
            time.sleep(0.05)
        (sb.state / "live.json").write_text("{garbage")
        code = sb.cli("jobs", "delete", "live")
        if code == 0:
            try:
                job.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                raise Observed(WRONG, "jobs delete said it deleted the job, and it runs on") from None
        return code
    finally:
        (sb.work / "go").touch()
        job.stop()


# (--param, what the refusal names)
PARAMS = [
    ("i=abc", "--param i="),
    ("i=1.5", "--param i="),
    (f"i={2**63}", "int64"),
    ("b=yes", "--param b="),
    ("f=Infinity", "--param f="),
    ('items={"a": 1}', "--param items="),
    ('mapping={"k": NaN}', "--param mapping="),
]
TYPED = "typed_pipeline.py:typed"
# (name, command line, what the refusal names)
NUMBERS: list[tuple[str, tuple[str, ...], str]] = [
    (
        "submit --poll-seconds -1",
        ("submit", "pytorch-digits", "--host", DOWN, "--poll-seconds", "-1"),
        "--poll-seconds",
    ),
    (
        "submit --poll-seconds nan",
        ("submit", "pytorch-digits", "--host", DOWN, "--poll-seconds", "nan"),
        "--poll-seconds",
    ),
    ("submit --timeout -5", ("submit", "pytorch-digits", "--host", DOWN, "--timeout", "-5"), "--timeout"),
    (
        "schedule --interval-seconds 1e20",
        ("schedule", "create", "pytorch-digits", "--host", DOWN, "--interval-seconds", "1e20"),
        "--interval-seconds",
    ),
    (
        "schedule --cron on 31 February",
        ("schedule", "create", "pytorch-digits", "--host", DOWN, "--cron", "0 0 0 31 2 *"),
        "never run",
    ),
    (
        "schedule --end in 1900",
        (
            "schedule",
            "create",
            "pytorch-digits",
            "--host",
            DOWN,
            "--interval-seconds",
            "60",
            "--end",
            "1900-01-01T00:00:00Z",
        ),
        "--end",
    ),
    ("jobs logs --tail -1", ("jobs", "logs", "some-job", "--tail", "-1"), "--tail"),
    ("jobs logs --tail 0", ("jobs", "logs", "some-job", "--tail", "0"), "--tail"),
]

CASES: list[Case] = [
    *(
        Case(AREA, f"submit --param {param}", CLEAR, "kftrain submit MODULE:FUNCTION", _submit(param), names=(said,))
        for param, said in PARAMS
    ),
    *(
        Case(AREA, f"run --param {param}", CLEAR, "kftrain run MODULE:FUNCTION", _run(param), names=(said,))
        for param, said in PARAMS
    ),
    *(Case(AREA, name, CLEAR, f"kftrain {argv[0]}", _cli(*argv), names=(said,)) for name, argv, said in NUMBERS),
    Case(
        AREA,
        "submit register_model=..hidden",
        CLEAR,
        "kftrain submit train-evaluate-export",
        _submit("register_model=..hidden", "train-evaluate-export"),
        names=("register_model", "..hidden"),
    ),
    Case(
        AREA,
        "run register_model=..hidden",
        CLEAR,
        "kftrain run train-evaluate-export --mlflow",
        _register_hidden,
        names=("register_model", "..hidden"),
        timeout_s=180,
    ),
    *(
        Case(AREA, f"jobs {verb}: terminal escapes in a record", FINE, f"kftrain jobs {verb}", _escapes_listed(verb))
        for verb in ("list", "status")
    ),
    Case(
        AREA, "jobs delete: a forged Running record naming a live process", FINE, "kftrain jobs delete", _forged_running
    ),
    Case(
        AREA,
        "jobs delete: a running job's record replaced by garbage",
        FINE,
        "kftrain jobs delete",
        _garbage_while_running,
        timeout_s=120,
    ),
]
