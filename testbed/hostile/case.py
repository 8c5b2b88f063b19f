"""One hostile case: what it sets up, the one call it makes into kftrain, and the class its outcome must end in.

A case's ``run(sandbox)`` runs in a process of its own (:mod:`testbed.hostile.child`); how what it returns or
raises is classed is in the comment below the imports.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# A case's ``run(sandbox)`` runs in a process of its own (:mod:`testbed.hostile.child`), its current folder the
# sandbox's ``work`` folder and ``HOME``, ``TMPDIR`` and the local backend's state folder inside the sandbox. It
# writes its inputs, calls :meth:`Sandbox.ready` once they are all there (what exists then is input: what is written
# after it is output, searched for secrets, and the ``outside`` folder must not change after it), then makes its call
# and says what came of it:
#
# - it returns None: the call succeeded (``fine``; ``accepted wrongly`` where a clear error was expected);
# - it returns an exit code (:meth:`Sandbox.cli` returns ``kftrain``'s): 0 succeeded, else an error whose message is
#   the last line the process wrote to stderr;
# - it raises :class:`Refused` (a server's refusal it observed, a command's error it read) or kftrain's own error
#   (:class:`~kftrain.errors.KftrainError`), or a component ends with ``SystemExit``: an error, with that message;
# - it raises :class:`Observed`: what it saw is that class (a token sent to another host is a leak);
# - anything else it raises is a traceback, as the user would see one.


# What an outcome can be (the classes, and the two a re-run can add).
CLEAR = "clear error"
FINE = "fine"
WRONG = "accepted wrongly"
TRACEBACK = "traceback"
HANG = "hang"
LEAK = "leak"
LOSS = "loss"
ESCAPE = "escape"
UNCLEAR = "unclear error"  # refused, but not in one line under 1 KB naming what the case says it must
LEFT_RUNNING = "left running"  # a process the case started outlived it
SKIPPED = "skipped"  # what the case needs is not installed here

# The sandbox's folders (each case's own), and the files the harness keeps beside them.
FOLDERS = ("work", "home", "tmp", "state", "outside")
CANARY = "canary.txt"
SNAPSHOT = ".snapshot.json"
OUTCOME = ".outcome.json"
S3_ENDPOINT_ENV = "HOSTILE_S3_ENDPOINT"  # the run's local S3 server, for the cases that need one


class Refused(Exception):
    """The system under test refused the input, as the case observed it (an HTTP answer, a command's error line)."""


class Observed(Exception):
    """The case saw its outcome to be ``klass`` (e.g. :data:`LEAK`: a token reached another host)."""

    def __init__(self, klass: str, message: str) -> None:
        super().__init__(message)
        self.klass = klass


@dataclass(frozen=True)
class Case:
    area: str
    name: str
    expect: str  # CLEAR or FINE
    surface: str  # what it targets: a command line, a module's function, a server
    run: Callable[[Sandbox], int | None]
    # Each must appear in a clear error's message (the field, file or column it names).
    names: tuple[str, ...] = ()
    # Values that must appear in no output and no file the case's call wrote.
    secrets: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    # Modules (found without importing) or "s3" (the run's local S3 server) or "crds" (the reference CRDs).
    needs: tuple[str, ...] = ()
    # Why a traceback in the output is not kftrain's (a failing step of the user's prints its own).
    users_traceback: str = ""

    @property
    def id(self) -> str:
        return f"{self.area}/{self.name}"


def digest(path: Path) -> str:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    if path.is_dir():
        return "dir"
    if not path.is_file():
        return "special"
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def tree(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (links not followed) and a digest of what it is: the state a case must keep."""
    out: dict[str, str] = {}
    if not folder.is_dir() or folder.is_symlink():
        return out
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            out[str(path.relative_to(folder))] = digest(path)
    return out


def fingerprint(path: Path) -> dict[str, str]:
    """What :meth:`Sandbox.keep` records of ``path``, and what it must still be."""
    return tree(path) if path.is_dir() and not path.is_symlink() else {"": digest(path)}


def stamps(folder: Path) -> dict[str, list[int]]:
    """(modification time, size) of every regular file under ``folder``: what a case's call wrote is what differs."""
    out: dict[str, list[int]] = {}
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            path = Path(dirpath, name)
            try:
                info = path.lstat()
            except OSError:
                continue
            out[str(path)] = [info.st_mtime_ns, info.st_size]
    return out


class Sandbox:
    """A case's own folders: ``work`` (its current folder), ``home``, ``tmp``, ``state`` and ``outside`` (a folder it
    may point at but that nothing may write into)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.work, self.home, self.tmp, self.state, self.outside = (root / name for name in FOLDERS)
        self._kept: dict[str, dict[str, str]] = {}
        self._ready = False

    def write(self, relative: str, content: str | bytes, folder: Path | None = None) -> Path:
        """A file of the case's input, under ``work`` (or ``folder``)."""
        path = (folder or self.work) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    def keep(self, path: Path) -> Path:
        """``path`` (a file or a folder) must still be there, unchanged, when the case ends: else a loss."""
        self._kept[str(path)] = fingerprint(path)
        return path

    def ready(self) -> None:
        """Every input is written: from here on, what the case's call writes is output (searched for secrets) and
        ``outside`` must not change."""
        if self._ready:
            return
        self._ready = True
        snapshot = {"stamps": stamps(self.root), "outside": tree(self.outside), "kept": self._kept}
        (self.root / SNAPSHOT).write_text(json.dumps(snapshot))

    @property
    def s3_endpoint(self) -> str:
        return os.environ[S3_ENDPOINT_ENV]

    def cli(self, *argv: str | Path) -> int:
        """``kftrain ARGV`` in this process, as the command runs it: its exit code (its output goes to this
        process's stdout and stderr, which the harness reads)."""
        from kftrain.cli.app import main

        self.ready()
        return main([str(a) for a in argv])

    def process(self, *argv: str | Path, env: dict[str, str] | None = None) -> Launched:
        """``kftrain ARGV`` in a process of its own (the command a user runs), started now, its output in a file of the
        sandbox."""
        script = Path(sys.executable).with_name("kftrain")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "kftrain.cli"]
        log = self.root / f"kftrain-{len(list(self.root.glob('kftrain-*.log')))}.log"
        with log.open("wb") as out:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                [*command, *map(str, argv)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.work,
                env={**os.environ, **(env or {})},
            )
        return Launched(proc, log)


@dataclass
class Launched:
    """A ``kftrain`` the case started in a process of its own, and the file its output goes to."""

    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def finish(self, timeout: float) -> int:
        """Its exit code; one that does not end in ``timeout`` seconds is killed, and the case is a hang."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Observed(HANG, f"{self.log.name}: kftrain did not end in {timeout} s") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
