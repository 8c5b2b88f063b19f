"""The local backend's job records and work folders (kftrain/backends/local/state.py, workdirs.py, running.py,
jobs.py): two runs with one job name, a record naming a foreign folder as its work folder (which pruning and
``kftrain jobs delete`` must not remove), two jobs given one --workdir, a work folder swapped for a symbolic link then
``kftrain jobs logs``, and a state folder holding what is not a record.

Setups from tests/backends/local/test_running.py (the waiting job), test_jobs_safety.py (``FORGED``, ``SWAPPED``,
``_bad_entries``) and test_workdirs.py, the forged and swapped records taken by name when the case runs.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testbed.hostile.bystander import bystander, delete_spares
from testbed.hostile.case import CLEAR, FINE, WRONG, Case, Launched, Observed, Sandbox

AREA = "local-jobs"
SECRET = "SECRET-LOG-LINE-5e81"
# Runs until the case says so: $OUT/go.
WAITER = """
import os, time
while not os.path.exists(os.path.join(os.environ["OUT"], "go")):
    time.sleep(0.02)
print("done", flush=True)
"""


def _safety() -> Any:
    from tests.backends.local import test_jobs_safety

    return test_jobs_safety


def _waiting_job(sb: Sandbox, name: str) -> Path:
    import yaml

    from testbed.manifests import pytorchjob, replica

    program = sb.write("waiter.py", WAITER)
    env = [{"name": "OUT", "value": str(sb.work)}]
    master = replica(1, "pytorch", [sys.executable, str(program)], restart_policy="Never", env=env)
    return sb.write(f"{name}.yaml", yaml.safe_dump(pytorchjob({"Master": master}, name=name)))


def _quick_job(sb: Sandbox, name: str) -> Path:
    import yaml

    from testbed.manifests import pytorchjob, replica

    master = replica(1, "pytorch", [sys.executable, "-c", "print('quick')"], restart_policy="Never")
    return sb.write(f"{name}.yaml", yaml.safe_dump(pytorchjob({"Master": master}, name=name)))


@contextmanager
def _running(sb: Sandbox, name: str, *extra: str) -> Iterator[Launched]:
    """``kftrain launch --local`` of a job that waits for $OUT/go, in a process of its own, recorded as running;
    told to end, and ended, on the way out."""
    from kftrain.backends.local import state as local_state

    first = sb.process("launch", "--local", "-f", _waiting_job(sb, name), "--timeout", "120", *extra)
    try:
        deadline = time.monotonic() + 60
        while (local_state.read(name) or {}).get("phase") != "Running":
            if time.monotonic() > deadline or first.proc.poll() is not None:
                raise AssertionError(f"the first job never ran: {first.output()[-1500:]}")
            time.sleep(0.05)
        yield first
        (sb.work / "go").touch()
        if first.finish(timeout=60) != 0:
            raise Observed(WRONG, f"the first job did not succeed once told to: {first.output()[-500:]}")
    finally:
        (sb.work / "go").touch()
        first.stop()


def _second_of_one_name(sb: Sandbox) -> int:
    from kftrain.backends.local import state as local_state

    with _running(sb, "first"):
        recorded = local_state.read("first")
        code = sb.cli("launch", "--local", "-f", _waiting_job(sb, "first"), "--timeout", "30")
        if local_state.read("first") != recorded:
            raise Observed(WRONG, "the running job's record was replaced by the second's")
    return code


def _second_in_one_workdir(link: bool) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        workdir = sb.work / "wd"
        with _running(sb, "first", "--workdir", str(workdir)):
            given = workdir
            if link:
                given = sb.work / "link"
                given.symlink_to(workdir)
            code = sb.cli("launch", "--local", "-f", _waiting_job(sb, "second"), "--workdir", given, "--timeout", "30")
            if not (workdir / "logs").is_dir():
                raise Observed(WRONG, "the running job's logs folder is gone")
        return code

    return run


def _name_again(sb: Sandbox) -> int:
    first = sb.cli("launch", "--local", "-f", _quick_job(sb, "again"))
    if first != 0:
        return first
    return sb.cli("launch", "--local", "-f", _quick_job(sb, "again"))


def _workdir_not_a_folder(kind: str) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        target = sb.work / "wd"
        if kind == "file":
            target.write_text("not a folder")
        else:
            os.mkfifo(target)
        return sb.cli("launch", "--local", "-f", _quick_job(sb, "wd-job"), "--workdir", target)

    return run


def _record(sb: Sandbox, name: str, **fields: Any) -> Path:
    sb.state.mkdir(exist_ok=True)
    return _safety().record(sb.state, name, **fields)


def _victim(sb: Sandbox) -> Path:
    folder = sb.outside / "victim"
    folder.mkdir()
    (folder / "precious.txt").write_text("keep me")
    return folder


def _forged(key: str, how: str) -> Callable[[Sandbox], int | None]:
    """An ended job's record naming a folder kftrain did not make as its own work folder; then pruning (directly,
    or at a new job's submit) or ``kftrain jobs delete`` of it: the folder stays."""

    def run(sb: Sandbox) -> int | None:
        fields = next(f[1] for f in _safety().FORGED if f[0] == key)(_victim(sb))
        _record(sb, "old", phase="Failed", created=time.time() - 8 * 24 * 3600, **fields)
        sb.keep(Path(fields["workdir"]).resolve())
        if how == "prune":
            from kftrain.backends.local.workdirs import prune_finished

            sb.ready()
            prune_finished(keep=0, max_age_s=0.0)
            return None
        if how == "delete":
            return sb.cli("jobs", "delete", "old")
        return sb.cli("launch", "--local", "-f", _quick_job(sb, "new"))

    return run


def _swapped(key: str, follow: bool) -> Callable[[Sandbox], int]:
    """A running job's record whose work folder (or its logs folder, a log, a replica's name) leads out of it to a
    folder holding a secret: ``kftrain jobs logs`` shows none of it. The launcher is a process that ends in a few
    seconds, so that following ends."""

    def run(sb: Sandbox) -> int:
        outside = sb.outside / "elsewhere"
        (outside / "logs").mkdir(parents=True)
        (outside / "logs" / "master-0.log").write_text(f"{SECRET}\n")
        (outside / "master-0.log").write_text(f"{SECRET}\n")
        fields = next(s[1] for s in _safety().SWAPPED if s[0] == key)(sb.work, outside)
        with bystander(3) as (launcher, started):
            _record(sb, "swapped", phase="Running", launcher_pid=launcher.pid, launcher_started=started, **fields)
            return sb.cli("jobs", "logs", "swapped", *(["--follow"] if follow else []))

    return run


def _swapped_while_running(sb: Sandbox) -> int:
    """A real running job: its work folder is moved away and a link to a folder holding a secret put in its place;
    ``kftrain jobs logs`` shows none of it, and the job's end removes nothing through the link."""
    from kftrain.backends.local import state as local_state

    outside = sb.outside / "elsewhere"
    (outside / "logs").mkdir(parents=True)
    (outside / "logs" / "master-0.log").write_text(f"{SECRET}\n")
    sb.keep(outside)
    with _running(sb, "swap"):
        workdir = Path(str((local_state.read("swap") or {})["workdir"]))
        moved = workdir.with_name(workdir.name + "-moved")
        workdir.rename(moved)
        workdir.symlink_to(outside)
        code = sb.cli("jobs", "logs", "swap")
    shutil.rmtree(moved, ignore_errors=True)
    return code


def _bad_entries(sb: Sandbox) -> int:
    _record(sb, "good-job")
    _safety()._bad_entries(sb.state)
    return sb.cli("jobs", "list")


def _not_a_name(verb: str, name: str) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        victim = sb.write("important.json", '{"name": "important", "phase": "Succeeded"}', folder=sb.outside)
        sb.keep(victim)
        _record(sb, "real")
        return sb.cli("jobs", verb, name.format(outside=sb.outside))

    return run


def _pid_reused(sb: Sandbox) -> int:
    """A record whose launcher's pid now belongs to another process (its start time differs): ``kftrain jobs delete``
    forgets the record and signals nothing."""
    with bystander(60) as (process, started):
        _record(sb, "stale", phase="Running", launcher_pid=process.pid, launcher_started=started - 3600)
        return delete_spares(sb, "stale", process, WRONG, "a process that is not the job's launcher was signalled")


def _replica_a_path(sb: Sandbox) -> int:
    _record(sb, "ended")
    return sb.cli("jobs", "logs", "ended", "--replica", "../../outside/x")


SWAPPED = ["the work folder a link", "its logs folder a link", "a replica's log a link", "a replica's name a path"]
FORGED = [
    "any folder, said to be its own",
    "a folder of kftrain's name, not made by it",
    "a token the folder does not hold",
    "a link to a folder",
]
LAUNCH = "kftrain launch --local"
CASES: list[Case] = [
    Case(
        AREA,
        "two runs with one job name",
        CLEAR,
        LAUNCH + " (twice, one name)",
        _second_of_one_name,
        names=('"first" already exists', "kftrain jobs delete first"),
        timeout_s=120,
    ),
    *(
        Case(
            AREA,
            f"two jobs given one --workdir{how}",
            CLEAR,
            LAUNCH + " --workdir (twice)",
            _second_in_one_workdir(by_link),
            names=("in use by the running job first",),
            timeout_s=120,
        )
        for by_link, how in ((False, ""), (True, ", by a link"))
    ),
    Case(AREA, "a name whose job ended runs again", FINE, LAUNCH + " (twice, in turn)", _name_again, timeout_s=90),
    Case(
        AREA,
        "a --workdir that is a file",
        CLEAR,
        LAUNCH + " --workdir FILE",
        _workdir_not_a_folder("file"),
        names=("wd",),
    ),
    Case(
        AREA,
        "a --workdir that is a FIFO",
        CLEAR,
        LAUNCH + " --workdir FIFO",
        _workdir_not_a_folder("fifo"),
        names=("wd",),
        timeout_s=45,
    ),
    *(
        Case(AREA, f"a record naming a foreign folder: {key} ({how})", FINE, surface, _forged(key, how), timeout_s=90)
        for key in FORGED
        for how, surface in (
            ("prune", "workdirs.prune_finished"),
            ("delete", "kftrain jobs delete"),
            ("new job", LAUNCH + " (prunes at submit)"),
        )
        if how == "prune" or key in FORGED[::3]
    ),
    *(
        Case(
            AREA,
            f"jobs logs{' --follow' if follow else ''}: {key}",
            FINE,
            "kftrain jobs logs",
            _swapped(key, follow),
            secrets=(SECRET,),
            timeout_s=60,
        )
        for key in SWAPPED
        for follow in (False, True)
        if not follow or key in SWAPPED[:2]
    ),
    Case(
        AREA,
        "a running job's work folder swapped for a link, then jobs logs",
        FINE,
        LAUNCH + " + kftrain jobs logs",
        _swapped_while_running,
        secrets=(SECRET,),
        timeout_s=120,
    ),
    Case(
        AREA,
        "jobs list with a FIFO, a link and garbage among the records",
        FINE,
        "kftrain jobs list",
        _bad_entries,
        timeout_s=45,
    ),
    *(
        Case(
            AREA,
            f"jobs {verb} {name!r}",
            CLEAR,
            f"kftrain jobs {verb}",
            _not_a_name(verb, name),
            names=("is not a job name",),
        )
        for verb, name in (("delete", "../outside/important"), ("delete", "{outside}/important"))
    ),
    Case(AREA, "jobs delete of a record whose pid was reused", FINE, "kftrain jobs delete", _pid_reused),
    Case(
        AREA,
        "jobs logs --replica of a path",
        CLEAR,
        "kftrain jobs logs --replica",
        _replica_a_path,
        names=("../../outside/x",),
    ),
]
