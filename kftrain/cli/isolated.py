"""A user's pipeline module imported and compiled in a child process, so that what it does at import cannot make
kftrain lie, hang or leave processes: ``os._exit`` there is a child that wrote no result, a thread or a wait there
is a deadline passed, a process started there is stopped with the child's process group and with every process
that carries the child's token (:data:`TOKEN_ENV`, inherited by whatever it starts, also past a ``setsid``).
The parent trusts only the child's result file and a compiled file that is really there.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from kftrain.errors import KftrainError

TOKEN_ENV = "KFTRAIN_IMPORT_TOKEN"
DEADLINE_S = 300.0  # compiling a pipeline takes seconds; more is a module that waits at import
# The child's own interpreter, without its folder first on sys.path (kftrain.cli.user_module's rule).
_CHILD = "import sys; sys.path.pop(0); from kftrain.cli.isolated import main; main()"


@dataclass(frozen=True)
class Compiled:
    path: Path  # the compiled pipeline.yaml
    name: str  # its pipelineInfo.name
    source: str | None  # the file of the pipeline's function


def compile_isolated(given: str, output: Path, *, for_cluster: bool, deadline_s: float = DEADLINE_S) -> Compiled:
    """Compile the ``MODULE:FUNCTION`` pipeline ``given`` to ``output`` in a child process; a child that exited,
    hung or failed is one :class:`KftrainError` naming the module."""
    module = given.rpartition(":")[0]
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="kftrain-import-") as tmp:
        result = Path(tmp) / "result.json"
        argv = [sys.executable, "-c", _CHILD, given, str(output), str(result), "cluster" if for_cluster else "local"]
        child = subprocess.Popen(
            argv, env={**os.environ, TOKEN_ENV: token}, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            code: int | None = child.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            left = stop_tagged(token, group=child.pid)
            child.wait()
        if code is None:
            raise KftrainError(
                f"{given}: importing {module} did not finish within {deadline_s:g}s (a thread, a wait or a loop at "
                "import?); it was stopped with every process it started"
            )
        _warn_left(given, left)
        answer = _read_result(result)
        if answer is None:
            raise KftrainError(
                f"{given}: importing {module} ended the process (exit status {code}) before its pipeline was "
                "compiled; a pipeline module must not exit when imported "
                '(put that code under `if __name__ == "__main__":`)'
            )
        if "error" in answer:
            raise KftrainError(str(answer["error"]))
        if code != 0 or not output.is_file() or output.stat().st_size == 0:
            raise KftrainError(f"{given}: compiling {module} wrote no {output} (exit status {code})")
        return Compiled(path=output, name=str(answer["name"]), source=answer.get("source"))


def _read_result(path: Path) -> dict[str, str] | None:
    try:
        answer = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return answer if isinstance(answer, dict) and ("error" in answer or "name" in answer) else None


def tagged_processes(token: str) -> list[int]:
    """This user's processes whose environment carries ``token`` (as :data:`TOKEN_ENV`), but this one."""
    marker = f"{TOKEN_ENV}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return sorted(found)


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (its children, theirs...), each with its start time (field 22 of
    /proc/PID/stat): a fork that never ran a program carries no tag in its environment, but is found here."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                parents[int(entry.name)] = (int(fields[1]), fields[19])
    found: dict[int, str] = {}
    below = {pid}
    while below:
        below = {child for child, (parent, _) in parents.items() if parent in below and child not in found}
        found.update({child: parents[child][1] for child in below})
    return found


def stop_tagged(token: str, *, group: int | None = None, also: Mapping[int, str] | None = None) -> list[int]:
    """SIGKILL the process group ``group``, every process carrying ``token`` and each of ``also`` (PID: start time,
    as :func:`descendants` gives them) that is still that process; the PIDs that were still running (the group's
    leader, when it has not exited, excluded)."""
    same = [pid for pid, started in (also or {}).items() if start_time(pid) == started]
    left = sorted({pid for pid in [*tagged_processes(token), *same] if pid != group or _alive(pid)})
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in left if p != group):
        time.sleep(0.02)
    return [pid for pid in left if pid != group]


def start_time(pid: int) -> str:
    """The start time of ``pid`` (empty when gone): what tells it from a later process given the same PID."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class ImportTags:
    """``kftrain run`` imports a user's module in this process: what it starts while :meth:`importing` carries a
    token, and :meth:`stop_left` (at the end of the run) stops those still running; :meth:`end` ends this process
    without waiting for a thread the import started."""

    def __init__(self, given: str) -> None:
        self.given = given
        self.token = secrets.token_hex(16)
        self.threads: list[threading.Thread] = []
        self.forked: dict[int, str] = {}  # processes below this one the import started (a fork runs no program)

    @contextlib.contextmanager
    def importing(self) -> Iterator[None]:
        os.environ[TOKEN_ENV] = self.token
        before = set(threading.enumerate())
        had = descendants(os.getpid())
        try:
            yield
        finally:
            os.environ.pop(TOKEN_ENV, None)
            self.threads = [t for t in threading.enumerate() if t not in before and not t.daemon]
            self.forked = {pid: at for pid, at in descendants(os.getpid()).items() if had.get(pid) != at}

    def stop_left(self) -> None:
        _warn_left(self.given, stop_tagged(self.token, also=self.forked))

    def end(self, code: int) -> int:
        """``code``; but with a thread the import started still running, this process ends now with it (Python
        would wait for that thread at exit, for ever)."""
        left = [t.name for t in self.threads if t.is_alive()]
        if left:
            module = self.given.rpartition(":")[0]
            print(
                f"kftrain: warning: {self.given}: importing {module} started thread(s) {', '.join(left)}, still "
                "running; kftrain ends without waiting for them",
                file=sys.stderr,
            )
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code


def _warn_left(given: str, left: list[int]) -> None:
    if left:
        module = given.rpartition(":")[0]
        print(
            f"kftrain: warning: {given}: importing {module} started process(es) {', '.join(map(str, left))}, "
            "still running when kftrain was done with it; stopped them",
            file=sys.stderr,
        )


def main() -> None:
    """The child: import and compile, write the result, then end at once (a thread the module started must not keep
    it alive)."""
    given, output, result, where = sys.argv[1:5]
    from kftrain.cli.reference import compile_to, load_pipeline, parse_reference, pipeline_name

    answer: dict[str, str | None]
    try:
        pipeline = load_pipeline(parse_reference(given), for_cluster=where == "cluster")
        compile_to(pipeline, Path(output))
        import inspect

        answer = {"name": pipeline_name(pipeline), "source": inspect.getsourcefile(pipeline.pipeline_func)}
    except KftrainError as exc:
        answer = {"error": str(exc)}
    except Exception as exc:  # KFP's compiler raises whatever a pipeline makes it
        answer = {"error": f"{given}: compiling failed: {type(exc).__name__}: {exc}"}
    Path(result).write_text(json.dumps(answer))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
