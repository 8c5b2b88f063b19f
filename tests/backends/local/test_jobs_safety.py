"""``kftrain jobs`` on the local backend treats its state folder as untrusted: a job name is never a path out of it,
a recorded pid is signalled only while it is still the launcher that wrote the record (its start time checked, not
only its number), and a FIFO, a link, a huge or a malformed file among the records never hangs nor breaks the
listing of the others."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from kftrain.backends.local import jobs as local_jobs
from kftrain.backends.local import state as local_state
from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.cli import main
from kftrain.errors import KftrainError
from testbed import REPO_ROOT

REPO = REPO_ROOT


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    monkeypatch.setenv(STATE_DIR_ENV, str(folder))
    return folder


def record(folder: Path, name: str, **fields: Any) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"name": name, "created": time.time(), "kind": "PyTorchJob", "phase": "Succeeded",
                                "replicas": ["master-0"], **fields}))  # fmt: skip
    return path


@pytest.mark.parametrize("verb", ["delete", "status", "logs"])
@pytest.mark.parametrize("name", ["../victim/important", "/tmp/victim/important", "a/b", "UPPER", "..", ""])
def test_a_job_name_is_never_a_path_out_of_the_state_folder(
    verb: str, name: str, state: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim" / "important.json"
    victim.parent.mkdir()
    victim.write_text('{"name": "important", "phase": "Succeeded"}')
    assert main(["jobs", verb, name]) == 2
    assert "is not a job name" in capsys.readouterr().err
    assert victim.read_text() == '{"name": "important", "phase": "Succeeded"}'


@pytest.fixture
def bystander() -> Iterator[psutil.Process]:
    """A process kftrain did not start, which a stale record may name by its pid."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield psutil.Process(proc.pid)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("started", "signalled"),
    [
        # Its pid and start time, but it holds no lock on the job's name: a forged record, left alone
        # (the launcher holding the lock is stopped: tests/backends/local/test_launcher_identity.py).
        (lambda p: p.create_time(), False),
        (lambda p: p.create_time() - 3600.0, False),  # the pid was reused by another process: left alone
        (lambda p: None, False),  # a record that cannot tell (no start time): left alone
    ],
    ids=["same-start-time-no-lock", "pid-reused", "no-start-time"],
)
def test_delete_signals_a_recorded_pid_only_while_it_is_the_same_process(
    state: Path, bystander: psutil.Process, started: Any, signalled: bool
) -> None:
    when = started(bystander)
    record(state, "stale", phase="Running", launcher_pid=bystander.pid,
           **({"launcher_started": when} if when is not None else {}))  # fmt: skip
    local_jobs.delete_job("stale")
    if signalled:
        assert bystander.wait(timeout=30) == -signal.SIGTERM
    else:
        time.sleep(0.3)
        assert bystander.is_running() and bystander.status() != psutil.STATUS_ZOMBIE
    assert not (state / "stale.json").exists()  # forgotten either way


def test_a_record_whose_pid_was_reused_is_listed_as_lost(state: Path, bystander: psutil.Process) -> None:
    record(state, "stale", phase="Running", launcher_pid=bystander.pid, launcher_started=bystander.create_time() - 60)
    assert local_jobs.get_job("stale").phase == "Lost"


def _bad_entries(folder: Path) -> None:
    os.mkfifo(folder / "fifo.json")  # reading it would block until a writer comes
    (folder / "list.json").write_text("[1, 2]")
    (folder / "broken.json").write_text('{"name": "broken", "created": ')
    (folder / "typed.json").write_text('{"name": "typed", "created": "yesterday"}')
    (folder / "labels.json").write_text('{"name": "labels", "labels": ["a"]}')
    (folder / "other.json").write_text('{"name": "someone-else"}')
    (folder / "huge.json").write_bytes(b" " * (2 << 20))
    (folder / "folder.json").mkdir()
    (folder / "link.json").symlink_to("/etc/hostname")
    (folder / "Bad Name.json").write_text("{}")


def test_one_bad_record_is_listed_as_unreadable_and_every_other_job_still_listed(state: Path) -> None:
    record(state, "good-job")
    _bad_entries(state)
    listed = {j.name: j for j in local_jobs.list_jobs()}
    assert listed["good-job"].phase == "Succeeded"
    bad = {"fifo", "list", "broken", "typed", "labels", "other", "huge", "folder", "link", "Bad Name"}
    assert {n for n, j in listed.items() if j.phase == "Unreadable"} == bad
    assert all(j.details and j.details[0].startswith(f"{n}.json: ") for n, j in listed.items() if n in bad)


def test_jobs_list_with_a_fifo_in_the_state_folder_ends_and_lists_the_rest(state: Path) -> None:
    record(state, "good-job")
    _bad_entries(state)
    proc = subprocess.run(
        [sys.executable, "-m", "kftrain.cli", "jobs", "list"],
        env={**os.environ, STATE_DIR_ENV: str(state)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "good-job" in proc.stdout and "Unreadable" in proc.stdout


def test_a_malformed_record_can_be_deleted(state: Path) -> None:
    (state / "broken.json").write_text("{not json")
    assert local_jobs.get_job("broken").phase == "Unreadable"
    local_jobs.delete_job("broken")
    assert not (state / "broken.json").exists()
    with pytest.raises(KftrainError, match="no local job named broken"):
        local_jobs.get_job("broken")


def _victim(tmp_path: Path, name: str = "victim") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "precious.txt").write_text("keep me")
    return folder


# (id, the ended job's record, given the victim folder: fields naming it as the job's own work folder)
FORGED = [
    ("any folder, said to be its own", lambda v: {"workdir": str(v), "workdir_owned": True}),
    ("a folder of kftrain's name, not made by it", lambda v: {"workdir": str(_renamed(v)), "workdir_owned": True}),
    ("a token the folder does not hold", lambda v: {"workdir": str(v), "workdir_owned": True, "workdir_token": "t"}),
    ("a link to a folder", lambda v: {"workdir": str(_link(v)), "workdir_owned": True}),
]


def _renamed(folder: Path) -> Path:
    return folder.rename(folder.with_name("kftrain-old-x1"))


def _link(target: Path) -> Path:
    link = target.with_name("kftrain-old-link")
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("fields", [c[1] for c in FORGED], ids=[c[0] for c in FORGED])
def test_pruning_removes_no_folder_a_record_merely_names(state: Path, tmp_path: Path, fields: Any) -> None:
    from kftrain.backends.local.workdirs import prune_finished

    victim = _victim(tmp_path)
    named = fields(victim)
    record(state, "old", phase="Failed", created=time.time() - 3600, **named)
    prune_finished(keep=0, max_age_s=0.0)
    assert (Path(named["workdir"]).resolve() / "precious.txt").read_text() == "keep me"


def _secret(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    (outside / "logs").mkdir(parents=True)
    (outside / "logs" / "master-0.log").write_text("SECRET\n")
    (outside / "master-0.log").write_text("SECRET\n")
    return outside


def _workdir_a_link(tmp_path: Path, outside: Path) -> dict[str, Any]:
    (tmp_path / "wd").symlink_to(outside)
    return {"workdir": str(tmp_path / "wd")}


def _logs_a_link(tmp_path: Path, outside: Path) -> dict[str, Any]:
    (tmp_path / "wd").mkdir()
    (tmp_path / "wd" / "logs").symlink_to(outside / "logs")
    return {"workdir": str(tmp_path / "wd")}


def _log_a_link(tmp_path: Path, outside: Path) -> dict[str, Any]:
    (tmp_path / "wd" / "logs").mkdir(parents=True)
    (tmp_path / "wd" / "logs" / "master-0.log").symlink_to(outside / "logs" / "master-0.log")
    return {"workdir": str(tmp_path / "wd")}


def _label_a_path(tmp_path: Path, outside: Path) -> dict[str, Any]:
    (tmp_path / "wd" / "logs").mkdir(parents=True)
    return {"workdir": str(tmp_path / "wd"), "replicas": ["../../outside/master-0"]}


# (id, what was swapped in the running job's work folder, given the folder outside it)
SWAPPED = [
    ("the work folder a link", _workdir_a_link),
    ("its logs folder a link", _logs_a_link),
    ("a replica's log a link", _log_a_link),
    ("a replica's name a path", _label_a_path),
]


@pytest.mark.parametrize("follow", [False, True], ids=["read", "followed"])
@pytest.mark.parametrize("swap", [c[1] for c in SWAPPED], ids=[c[0] for c in SWAPPED])
def test_jobs_logs_never_reads_through_a_link_out_of_the_work_folder(
    state: Path, tmp_path: Path, bystander: psutil.Process, swap: Any, follow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = swap(tmp_path, _secret(tmp_path))
    phase = {"phase": "Running", "launcher_pid": bystander.pid, "launcher_started": bystander.create_time()}
    record(state, "swapped", **{**phase, **fields})
    read = local_state.read
    reads = iter([read("swapped")])  # running when the logs are asked for; ended at once, so following ends
    monkeypatch.setattr(local_state, "read", lambda name: next(reads, None) or {**read(name), "phase": "Succeeded"})
    lines = list(local_jobs.job_logs("swapped", None, None, follow))
    assert not any("SECRET" in text for _, text in lines), lines
