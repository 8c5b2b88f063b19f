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
        (lambda p: p.create_time(), True),  # the launcher that wrote the record: stopped
        (lambda p: p.create_time() - 3600.0, False),  # the pid was reused by another process: left alone
        (lambda p: None, False),  # a record that cannot tell (no start time): left alone
    ],
    ids=["same-process", "pid-reused", "no-start-time"],
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
