"""Run a case in a process of its own under its deadline, and classify what came of it by observation.

The order of the checks is the order of their gravity: a case that never ended is a hang (its process group and
every process it started are killed); a Python traceback anywhere in its output is a traceback; a change in its
``outside`` folder (or a new entry beside its folders) is an escape; a secret value in its output or in a file its
call wrote is a leak; a file it said must stay (:meth:`Sandbox.keep`) that is gone or changed is a loss; a process
it started that outlived it is left running. Then how its call ended: succeeded is fine (or accepted wrongly, where
a clear error was expected); an error is a clear error when its message is one line under 1 KB naming what the case
says it must (else an unclear error).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from testbed import REPO_ROOT
from testbed.hostile.case import (
    CANARY,
    CLEAR,
    ESCAPE,
    FINE,
    FOLDERS,
    HANG,
    LEAK,
    LEFT_RUNNING,
    LOSS,
    OUTCOME,
    S3_ENDPOINT_ENV,
    SKIPPED,
    SNAPSHOT,
    TRACEBACK,
    UNCLEAR,
    WRONG,
    Case,
    fingerprint,
    stamps,
    tree,
)

TRACEBACK_HEAD = "Traceback (most recent call last)"
MAX_MESSAGE = 1024  # a clear error's line, whatever it quotes
# The launching shell's settings that would reach into a case: each case gets its own (or none).
_DROPPED_ENV = (
    "KFTRAIN_STATE_DIR",
    "KFTRAIN_TRAINER_RUNTIMES",
    "KFTRAIN_ARTIFACT_ROOT",
    "KFP_POD_NAME",
    "MLFLOW_TRACKING_URI",
    "XDG_STATE_HOME",
    "PYTEST_CURRENT_TEST",
    "PYTEST_XDIST_WORKER",
    "HF_ENDPOINT",
    "STORAGE_URI",
)
_DROPPED_PREFIXES = ("AWS_", "MINIO_", "PET_", "KUBEFLOW_", "OMPI_")


@dataclass
class Result:
    case: Case
    observed: str
    message: str
    output: str  # the case's stdout then stderr, as it wrote them
    seconds: float

    @property
    def as_expected(self) -> bool:
        return self.observed in (self.case.expect, SKIPPED)


def missing_needs(case: Case) -> list[str]:
    from testbed.needs import installed
    from testbed.reference import CRD_DIR

    missing = []
    for need in case.needs:
        if need == "s3":
            if not os.environ.get(S3_ENDPOINT_ENV):
                missing.append("a local S3 server")
        elif need == "crds":
            if not CRD_DIR.is_dir():
                missing.append(f"the reference CRDs ({CRD_DIR})")
        elif not installed(need):
            missing.append(need)
    return missing


def case_env(case: Case, sandbox: Path, mark: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV and not k.startswith(_DROPPED_PREFIXES)}
    if os.environ.get(S3_ENDPOINT_ENV):
        env[S3_ENDPOINT_ENV] = os.environ[S3_ENDPOINT_ENV]
    env.update(
        HOME=str(sandbox / "home"),
        TMPDIR=str(sandbox / "tmp"),
        KFTRAIN_STATE_DIR=str(sandbox / "state"),
        PYTHONPATH=str(REPO_ROOT),
        PYTHONUNBUFFERED="1",
        HARDEN_MARK=mark,  # testbed.local_harness.marked: every process the case starts carries it
    )
    env.update(case.env)
    return env


def run_case(case: Case, root: Path) -> Result:
    """Run ``case`` in a sandbox under ``root`` (removed after it), and classify its outcome."""
    started = time.monotonic()
    missing = missing_needs(case)
    if missing:
        return Result(case, SKIPPED, f"needs {', '.join(missing)}", "", 0.0)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", case.id.replace("/", "__"))
    sandbox = root / slug
    for folder in FOLDERS:
        (sandbox / folder).mkdir(parents=True)
    (sandbox / "outside" / CANARY).write_text("nothing may write here\n")
    before = {"stamps": {}, "outside": tree(sandbox / "outside"), "kept": {}}  # where the case never said ready
    out_path, err_path = root / f"{slug}.out", root / f"{slug}.err"
    mark = uuid.uuid4().hex
    try:
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "testbed.hostile.child", case.id, case.run.__module__, str(sandbox)],
                cwd=REPO_ROOT,
                env=case_env(case, sandbox, mark),
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        hung = not _wait(proc, case.timeout_s)
        left = _stop_what_it_left(proc, mark)
        stdout = out_path.read_text(errors="replace")
        stderr = err_path.read_text(errors="replace")
        observed, message = classify(case, sandbox, before, proc.returncode, stdout, stderr, hung, left)
        return Result(
            case, observed, _short(message, sandbox), _short(stdout + stderr, sandbox), time.monotonic() - started
        )
    finally:
        _remove(sandbox)
        out_path.unlink(missing_ok=True)
        err_path.unlink(missing_ok=True)


def _short(text: str, sandbox: Path) -> str:
    """``text`` with the sandbox's paths shortened: the case's own files by their name, the rest from <sandbox>."""
    return text.replace(f"{sandbox / 'work'}/", "").replace(str(sandbox), "<sandbox>")


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def _stop_what_it_left(proc: subprocess.Popen[bytes], mark: str) -> list[str]:
    """Kill the case's process (when it hung) and every process it started that is still alive (each carries its
    mark): what was alive once the case's own process had ended, for the report."""
    from testbed.local_harness import marked

    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        hung = True
    else:
        hung = False
    left = []
    for _ in range(3):  # a supervisor may start its replica's end as it goes: look again
        found = [p for p in marked(mark) if p.pid != proc.pid]
        if not found:
            break
        for p in found:
            with contextlib.suppress(psutil.Error):
                left.append(" ".join(p.cmdline())[:120] or str(p.pid))
                p.kill()
        time.sleep(0.2)
    return [] if hung else left


def classify(
    case: Case,
    sandbox: Path,
    before: dict[str, Any],
    code: int | None,
    stdout: str,
    stderr: str,
    hung: bool,
    left: list[str],
) -> tuple[str, str]:
    """The class of what the case's process left (its output, its outcome file, its sandbox); ``before``: the
    sandbox's state before the case ran, for a case that never said its inputs were ready."""
    output = stdout + stderr
    if hung:
        return HANG, f"no end within {case.timeout_s:g} s; last line: {_last_line(output)}"
    if _has_traceback(output, indented_ok=bool(case.users_traceback)):
        return TRACEBACK, _traceback_line(output)
    outcome = _read_json(sandbox / OUTCOME)
    if outcome is None:
        return TRACEBACK, f"the case's process ended with {code} before its outcome: {_last_line(output)}"
    snapshot = _read_json(sandbox / SNAPSHOT) or before
    escaped = _escaped(sandbox, snapshot)
    if escaped:
        return ESCAPE, escaped
    leaked = _leaked(case, sandbox, snapshot, output)
    if leaked:
        return LEAK, leaked
    lost = _lost(snapshot)
    if lost:
        return LOSS, lost
    if left:
        return LEFT_RUNNING, f"{len(left)} process(es) outlived the case: {left[0]}"
    kind = outcome["kind"]
    if kind == "exception":
        return TRACEBACK, _traceback_line(output)
    if kind == "observed":
        return str(outcome["class"]), str(outcome["message"])
    if kind == "returned" or (kind == "exit" and outcome["code"] == 0):
        said = _last_line(stdout) or "succeeded"
        return (WRONG, f"succeeded: {said}") if case.expect == CLEAR else (FINE, said)
    message = str(outcome.get("message") or _last_line(stderr) or _last_line(stdout))
    return _error_class(case, message, output), message


def _has_traceback(output: str, indented_ok: bool) -> bool:
    """Whether ``output`` shows a Python traceback; ``indented_ok``: but one in a step's log that kftrain quotes
    (indented under the step's line) of the user's own code."""
    if not indented_ok:
        return TRACEBACK_HEAD in output
    return any(line.startswith(TRACEBACK_HEAD) for line in output.splitlines())


def _error_class(case: Case, message: str, output: str) -> str:
    if not message or "\n" in message.strip() or len(message) > MAX_MESSAGE:
        return UNCLEAR
    if any(name not in message for name in case.names):
        return UNCLEAR
    longest = max((len(line) for line in output.splitlines()), default=0)
    if longest > 4 * MAX_MESSAGE:
        return UNCLEAR  # an error that echoes its input whole, on some line of the output
    return CLEAR


def _escaped(sandbox: Path, snapshot: dict[str, Any]) -> str:
    expected = set(FOLDERS) | {SNAPSHOT, OUTCOME}
    extra = sorted(p.name for p in sandbox.iterdir() if p.name not in expected and not p.name.startswith("kftrain-"))
    if extra:
        return f"written beside the case's folders: {', '.join(extra[:5])}"
    now = tree(sandbox / "outside")
    before = snapshot["outside"]
    changed = sorted(set(now) ^ set(before) | {k for k in now.keys() & before.keys() if now[k] != before[k]})
    if changed:
        return f"written in the folder outside: {', '.join(changed[:5])}"
    return ""


def _leaked(case: Case, sandbox: Path, snapshot: dict[str, Any], output: str) -> str:
    for secret in case.secrets:
        if secret in output:
            line = next(line for line in output.splitlines() if secret in line)
            return f"{secret!r} in the output: {line[:200]}"
    if not case.secrets:
        return ""
    before = snapshot["stamps"]
    for path, stamp in stamps(sandbox).items():
        if before.get(path) == stamp or Path(path).name in (SNAPSHOT, OUTCOME):
            continue
        for secret in case.secrets:
            if _holds(Path(path), secret.encode()):
                return f"{secret!r} written to {Path(path).relative_to(sandbox)}"
    return ""


def _holds(path: Path, needle: bytes) -> bool:
    with contextlib.suppress(OSError), path.open("rb") as handle:
        tail = b""
        for block in iter(lambda: handle.read(1 << 20), b""):
            if needle in tail + block:
                return True
            tail = block[-len(needle) :]
    return False


def _lost(snapshot: dict[str, Any]) -> str:
    for path, before in snapshot["kept"].items():
        target = Path(path)
        if not (target.exists() or target.is_symlink()):
            return f"{path} is gone"
        if fingerprint(target) != before:
            return f"{path} changed"
    return ""


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _traceback_line(output: str) -> str:
    """The exception line that ends the first traceback in ``output``."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if TRACEBACK_HEAD in line), 0)
    for line in lines[start + 1 :]:
        if line and not line.startswith((" ", "\t")):
            return line.strip()
    return _last_line(output)


def _remove(folder: Path) -> None:
    """Remove a sandbox whatever its case left in it (folders without write permission included)."""

    def unlock(function: Any, path: str, _: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), stat.S_IRWXU)
            os.chmod(path, stat.S_IRWXU)
        with contextlib.suppress(OSError):
            function(path)

    if folder.exists():
        shutil.rmtree(folder, onerror=unlock)


@contextlib.contextmanager
def s3_server_if(needed: bool) -> Iterator[None]:
    """The run's local S3 server (moto) while the cases run, for those that need one; its endpoint in the env."""
    if not needed:
        yield
        return
    from testbed.s3_server import MotoServer

    with MotoServer() as server:
        os.environ[S3_ENDPOINT_ENV] = server.endpoint
        try:
            yield
        finally:
            os.environ.pop(S3_ENDPOINT_ENV, None)


def verdict(result: Result) -> str:
    """``observed`` where it is the expected class, else ``observed (expected X)``."""
    if result.as_expected:
        return result.observed
    return f"{result.observed} (expected {result.case.expect})"


__all__ = ["FINE", "Result", "classify", "run_case", "s3_server_if", "verdict"]
