"""One record per running job: a second job with the name of one still running is refused as the API server refuses
a duplicate create (AlreadyExists), and so is a job given a ``--workdir`` a running job uses; a name whose job has
ended (or whose launcher is gone) runs again with a record of its own (kftrain/backends/local/running.py)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.backends.local import state as local_state
from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.errors import KftrainError
from kftrain.job import load_manifest
from testbed import REPO_ROOT
from testbed.manifests import pytorchjob, replica

pytestmark = pytest.mark.usefixtures("no_leftover_processes")

# Runs until the test says so: $OUT/go.
WAITER = """
import os, time
while not os.path.exists(os.path.join(os.environ["OUT"], "go")):
    time.sleep(0.02)
print("done", flush=True)
"""


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(folder))
    return folder


def manifest(tmp_path: Path, name: str) -> str:
    program = tmp_path / "waiter.py"
    program.write_text(textwrap.dedent(WAITER))
    env = [{"name": "OUT", "value": str(tmp_path)}]
    master = replica(1, "pytorch", [sys.executable, str(program)], restart_policy="Never", env=env)
    return yaml.safe_dump(pytorchjob({"Master": master}, name=name))


def backend(workdir: Path | None = None) -> LocalBackend:
    return LocalBackend(LocalConfig(out=io.StringIO(), workdir=workdir, poll_interval_s=0.02, grace_period_s=2.0))


def in_this_process(tmp_path: Path, name: str, workdir: Path | None) -> str:
    """A second backend of this process submits the job; what refused it (an empty string: nothing did)."""
    second = backend(workdir)
    try:
        handle = second.submit(load_manifest(manifest(tmp_path, name)))
    except KftrainError as exc:
        return str(exc)
    second.cancel(handle)
    return ""


def from_another_shell(tmp_path: Path, name: str, workdir: Path | None) -> str:
    """``kftrain launch --local`` runs the job from another process; what it said when refused."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(manifest(tmp_path, name))
    command = [sys.executable, "-m", "kftrain.cli", "launch", "--local", "-f", str(path), "--timeout", "20"]
    command += ["--workdir", str(workdir)] if workdir is not None else []
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, env=os.environ)
    return proc.stderr if proc.returncode == 2 else ""


# (id, how the second job is submitted, its name, its --workdir (None: one of its own; "same": the first job's;
# "link": a link to it), what refuses it)
SECOND = [
    ("one name, in this process", in_this_process, "first", None, 'pytorchjobs.kubeflow.org "first" already exists'),
    ("one name, from another shell", from_another_shell, "first", None, '"first" already exists'),
    ("one --workdir, in this process", in_this_process, "second", "same", "in use by the running job first"),
    ("one --workdir, from another shell", from_another_shell, "second", "same", "in use by the running job first"),
    ("one --workdir by a link to it", in_this_process, "second", "link", "in use by the running job first"),
]


@pytest.mark.parametrize(("submit", "name", "folder", "refusal"), [c[1:] for c in SECOND], ids=[c[0] for c in SECOND])
def test_a_second_job_of_a_running_ones_name_or_workdir_is_refused(
    state: Path, tmp_path: Path, submit: Callable[..., str], name: str, folder: str | None, refusal: str
) -> None:
    workdir = tmp_path / "wd" if folder else None
    first = backend(workdir)
    handle = first.submit(load_manifest(manifest(tmp_path, "first")))
    try:
        recorded = local_state.read("first")
        assert recorded is not None
        second_workdir = workdir
        if folder == "link":
            second_workdir = tmp_path / "link"
            second_workdir.symlink_to(tmp_path / "wd")
        said = submit(tmp_path, name, second_workdir)
        assert refusal in said, said
        if name == "first":  # the way out is named
            assert "kftrain jobs delete first" in said and "another name" in said
        # The first job's record is still the first job's, its work folder untouched.
        assert local_state.read("first") == recorded
        assert Path(recorded["workdir"], "logs").is_dir()
        assert local_state.read("second") is None
        (tmp_path / "go").touch()
        result = first.wait(handle, timeout=60)
        assert result.succeeded, result.describe()
    finally:
        (tmp_path / "go").touch()
        first.cancel(handle)
    assert (local_state.read("first") or {}).get("phase") == "Succeeded"


def _lost(folder: Path) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return {"phase": "Running", "launcher_pid": proc.pid, "launcher_started": time.time() - 5}


# (id, the record a job of that name left)
ENDED = [
    ("one that failed", lambda f: {"phase": "Failed", "reason": "Error", "message": "boom", "exit_code": 3}),
    ("one whose launcher is gone (Lost)", _lost),
]


@pytest.mark.parametrize("previous", [c[1] for c in ENDED], ids=[c[0] for c in ENDED])
def test_the_name_of_an_ended_job_runs_again_with_a_record_of_its_own(
    state: Path, tmp_path: Path, previous: Callable[[Path], dict[str, Any]]
) -> None:
    state.mkdir()
    old = {"name": "again", "created": time.time() - 60, "kind": "PyTorchJob", "replicas": ["master-0"]}
    (state / "again.json").write_text(json.dumps({**old, **previous(state)}))
    runner = backend()
    handle = runner.submit(load_manifest(manifest(tmp_path, "again")))
    try:
        running = local_state.read("again") or {}
        assert running["phase"] == "Running" and running["launcher_pid"] == os.getpid()
        assert not {"reason", "message", "exit_code"} & set(running), running  # nothing of the old job's
        (tmp_path / "go").touch()
        assert runner.wait(handle, timeout=60).succeeded
    finally:
        (tmp_path / "go").touch()
        runner.cancel(handle)


# Fails its first run once told to, then prints and succeeds: its restart opens its log again.
FAILS_ONCE = """
import os, sys, time
out = os.environ["OUT"]
if not os.path.exists(os.path.join(out, "ran")):
    open(os.path.join(out, "ran"), "w").close()
    while not os.path.exists(os.path.join(out, "go")):
        time.sleep(0.02)
    sys.exit(1)
print("second run", flush=True)
"""


def test_a_work_folder_swapped_for_a_link_while_the_job_runs_gets_no_log_written_through_it(
    tmp_path: Path, state: Path
) -> None:
    """A replica's log is opened through the logs folder the job made, held open from submit: a restart after the work
    folder was moved away and a link to another folder put in its place writes into the moved folder, never through
    the link (by path, the restarted replica's log landed in the folder the link names)."""
    program = tmp_path / "fails_once.py"
    program.write_text(textwrap.dedent(FAILS_ONCE))
    env = [{"name": "OUT", "value": str(tmp_path)}]
    master = replica(1, "pytorch", [sys.executable, str(program)], restart_policy="OnFailure", env=env)
    job = load_manifest(yaml.safe_dump(pytorchjob({"Master": master}, name="swapped")))
    outside = tmp_path / "outside"
    (outside / "logs").mkdir(parents=True)
    local = backend()
    handle = local.submit(job)
    try:
        workdir = Path(str((local_state.read("swapped") or {})["workdir"]))
        while not (tmp_path / "ran").exists():
            time.sleep(0.02)
        moved = workdir.with_name(workdir.name + "-moved")
        workdir.rename(moved)
        workdir.symlink_to(outside)
        for cwd in moved.glob("cwd-*"):  # the restart runs in the folder the link names: only its log is at stake
            (outside / cwd.name).mkdir()
        (tmp_path / "go").touch()
        result = local.wait(handle, timeout=60)
    finally:
        (tmp_path / "go").touch()
        local.cancel(handle)
    try:
        assert result.succeeded, result.message
        assert list((outside / "logs").iterdir()) == []
        assert "second run" in (moved / "logs" / "master-0.log").read_text()
    finally:
        workdir.unlink()
        shutil.rmtree(moved, ignore_errors=True)
