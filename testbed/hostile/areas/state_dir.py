"""Issue 52, class 1: a shared ``KFTRAIN_STATE_DIR`` (kftrain/backends/safe_paths.py, local/state.py, workdirs.py,
kept.py): what another user plants there before a whole ``kftrain launch --local`` of a job runs and ends (a link
for its kept log or for its kept ``files/cwd``, a folder of theirs for its kept files, a folder for its name lock),
and ``kftrain jobs download`` into a destination whose ``files/cwd`` is a link. A link's target lies in the case's
``outside`` folder, so a write through it is an escape.

Another user is played by ``os.chown`` to a uid of no one's (tests/backends/local/test_safe_paths.py's ``OTHER``);
a case that needs it is skipped where this does not run as root.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from testbed.hostile.case import CANARY, CLEAR, FINE, SKIPPED, Case, Observed, Sandbox

AREA = "state-dir"
JOB = "vj"
OTHER = 4242  # a uid of no one's: "another user"
LAUNCH = "kftrain launch --local (a whole job)"
# The job's replica writes a file in its folder (kept as <job>.files/cwd) and a line (kept as <job>.logs).
WRITER = "open('model.pt', 'w').write('weights')\nprint('the job ran', flush=True)\n"


def _job(sb: Sandbox) -> Path:
    import yaml

    from testbed.manifests import pytorchjob, replica

    program = sb.write("writer.py", WRITER)
    master = replica(1, "pytorch", [sys.executable, str(program)], restart_policy="Never")
    return sb.write(f"{JOB}.yaml", yaml.safe_dump(pytorchjob({"Master": master}, name=JOB)))


def _link(path: Path, to: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(to)


def _theirs(path: Path) -> None:
    """``path``: a folder another user made first, writable by everyone."""
    if os.geteuid() != 0:
        raise Observed(SKIPPED, "playing another user needs root (chown)")
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, OTHER, OTHER)
    path.chmod(0o777)


def _launch_after(plant: Callable[[Sandbox], None]) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        job = _job(sb)
        plant(sb)
        return sb.cli("launch", "--local", "-f", job, "--timeout", "60")

    return run


def _planted_log(sb: Sandbox) -> None:
    _link(sb.state / f"{JOB}.logs" / "master-0.log", sb.outside / CANARY)


def _planted_cwd(sb: Sandbox) -> None:
    _link(sb.state / f"{JOB}.files" / "cwd", sb.outside)


def _planted_logs_folder(sb: Sandbox) -> None:
    _link(sb.state / f"{JOB}.logs", sb.outside)


def _their_files(sb: Sandbox) -> None:
    _theirs(sb.state / f"{JOB}.files")


def _their_logs(sb: Sandbox) -> None:
    _theirs(sb.state / f"{JOB}.logs")


def _lock_folder(sb: Sandbox) -> None:
    (sb.state / f".{JOB}.lock").mkdir(parents=True)


def _lock_link(sb: Sandbox) -> None:
    _link(sb.state / f".{JOB}.lock", sb.outside / CANARY)


def _download_into(dest_link: str) -> Callable[[Sandbox], int]:
    """A job run to its end, then ``kftrain jobs download JOB dest`` where ``dest/<dest_link>`` is a link outside."""

    def run(sb: Sandbox) -> int:
        code = sb.cli("launch", "--local", "-f", _job(sb), "--timeout", "60")
        if code != 0:
            raise AssertionError(f"the job did not run: exit {code}")
        _link(sb.work / "dest" / dest_link, sb.outside / CANARY if dest_link.endswith(".log") else sb.outside)
        return sb.cli("jobs", "download", JOB, sb.work / "dest")

    return run


def _their_state_folder(sb: Sandbox) -> int:
    """The state folder itself another user's and not sticky: anyone may replace what a job writes there."""
    job = _job(sb)
    if os.geteuid() != 0:
        raise Observed(SKIPPED, "playing another user needs root (chown)")
    os.chown(sb.state, OTHER, OTHER)
    sb.state.chmod(0o777)
    return sb.cli("launch", "--local", "-f", job, "--timeout", "60")


# (name, what is planted, expected, what a refusal names)
PLANTED: list[tuple[str, Callable[[Sandbox], None], str, str]] = [
    ("a link planted for the kept log", _planted_log, FINE, ""),
    ("a link planted for the kept files' cwd", _planted_cwd, FINE, ""),
    ("a link planted for the kept logs folder", _planted_logs_folder, CLEAR, f"{JOB}.logs"),
    ("the kept files' folder another user made first", _their_files, CLEAR, f"{JOB}.files"),
    ("the kept logs' folder another user made first", _their_logs, CLEAR, f"{JOB}.logs"),
    ("a folder planted for the name lock", _lock_folder, CLEAR, f".{JOB}.lock"),
    ("a link planted for the name lock", _lock_link, CLEAR, f".{JOB}.lock"),
]

CASES: list[Case] = [
    *(
        Case(AREA, name, expect, LAUNCH, _launch_after(plant), names=(said,) if said else (), timeout_s=90)
        for name, plant, expect, said in PLANTED
    ),
    Case(
        AREA,
        "the state folder another user's, not sticky",
        CLEAR,
        LAUNCH,
        _their_state_folder,
        names=("sticky",),
        timeout_s=90,
    ),
    Case(
        AREA,
        "jobs download: DEST/files/cwd a link",
        CLEAR,
        "kftrain jobs download",
        _download_into("files/cwd"),
        names=("files/cwd",),
        timeout_s=90,
    ),
    Case(
        AREA,
        "jobs download: DEST/logs/master-0.log a link",
        FINE,
        "kftrain jobs download",
        _download_into("logs/master-0.log"),
        timeout_s=90,
    ),
]
