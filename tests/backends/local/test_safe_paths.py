"""Nothing another user places in a shared state folder, or in a download's destination, has a job's files written
through it (kftrain/backends/safe_paths.py): every path a job writes, moves into or locks there is made by the job
itself or checked to be this user's own, else refused in one line naming it. Another user is played by ``os.chown``
to a uid of no one's (the tests of ownership run as root)."""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kftrain.backends.base import JobStatus
from kftrain.backends.kept import download_outputs
from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.backends.local import state as local_state
from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.backends.local.workdirs import keep_files
from kftrain.errors import KftrainError
from kftrain.job import load_manifest
from testbed.manifests import pytorchjob, replica

OTHER = 4242  # a uid of no one's: "another user"
JOB = "vj"


@dataclass
class Case:
    """Something placed before a job's path is written (``plant``), then what the job does (``act``)."""

    id: str
    plant: Callable[[Path, Path], None]  # (state folder, a file of the victim's elsewhere)
    act: Callable[[Path, Path], object]  # (state folder, tmp_path)
    refused: str | None  # the path the one-line refusal names (relative to the state folder); None: no refusal
    as_root: bool = False  # plays another user by chown


def _link(path: Path, to: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(to)


def _theirs(path: Path, mode: int = 0o777) -> None:
    """``path``, a folder made by another user, writable by everyone."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, OTHER, OTHER)
    path.chmod(mode)


def _theirs_first(what: str, name: str, act: Callable[[Path, Path], object]) -> Case:
    """A case: the job's path ``name`` is a folder another user made first, which ``act`` refuses, naming it."""
    return Case(what, lambda s, victim: _theirs(s / name), act, name, as_root=True)


def _dest_link(folder: str) -> Case:
    """A case: DEST/``folder`` of a download is a link to a folder of the victim's, which the download refuses."""
    return Case(
        f"download: DEST/{folder} a link",
        lambda s, victim: _link(s.parent / "dest" / folder, victim.parent),
        _download,
        f"../dest/{folder}",
    )


def _download_theirs(what: str, plant: Callable[[Path], None], where: str) -> Case:
    """A case: ``plant`` makes ``where`` (beside the state folder) another user's before a download, which refuses
    it, naming it."""
    return Case(f"download: {what}", lambda s, victim: plant(s.parent / where), _download, f"../{where}", as_root=True)


def _placed_kept_files(folder: Path) -> None:
    """The kept files of the job, their folder another user's (what it holds is theirs to choose)."""
    (folder / "cwd").mkdir(parents=True)
    os.chown(folder, OTHER, OTHER)


def _ended_job(tmp: Path) -> tuple[Path, Path]:
    """A job's work folder with a live log and a file its replica wrote: (work folder, its replicas' folder)."""
    workdir = tmp / "work"
    (workdir / "logs").mkdir(parents=True)
    (workdir / "logs" / "master-0.log").write_text("the job's log\n")
    cwd = workdir / "cwd-1"
    cwd.mkdir()
    (cwd / "model.pt").write_text("the job's weights")
    return workdir, cwd


def _keep_logs(state: Path, tmp: Path) -> object:
    workdir, _ = _ended_job(tmp)
    return local_state.keep_logs(JOB, workdir / "logs", ["master-0"])


def _keep_files(state: Path, tmp: Path) -> object:
    workdir, cwd = _ended_job(tmp)
    return keep_files(workdir, cwd, tmp / "launch", local_state.files_dir(JOB))


def _claim(state: Path, tmp: Path) -> object:
    return local_state.claim_name(JOB, "pytorchjobs.kubeflow.org")


def _download(state: Path, tmp: Path) -> object:
    (tmp / "model").mkdir(exist_ok=True)
    (tmp / "model" / "weights.bin").write_text("the job's model")
    kept = tmp / "kept"
    (kept / "logs").mkdir(parents=True, exist_ok=True)
    (kept / "logs" / "master-0.log").write_text("the job's log\n")
    (kept / "files" / "cwd").mkdir(parents=True, exist_ok=True)
    (kept / "files" / "cwd" / "model.pt").write_text("the job's weights")
    job = JobStatus(
        JOB,
        "PyTorchJob",
        "Succeeded",
        0.0,
        model_uri=str(tmp / "model"),
        kept_logs=str(kept / "logs"),
        kept_files=str(kept / "files"),
    )
    return download_outputs(job, tmp / "dest")


CASES = [
    Case(
        "kept log: a link placed where the log is kept",
        lambda s, victim: _link(s / f"{JOB}.logs" / "master-0.log", victim),
        _keep_logs,
        None,
    ),
    _theirs_first("kept logs: a folder another user made first", f"{JOB}.logs", _keep_logs),
    Case(
        "kept logs: a link for the folder",
        lambda s, victim: _link(s / f"{JOB}.logs", victim.parent),
        _keep_logs,
        f"{JOB}.logs",
    ),
    Case(
        "kept files: a link placed for cwd/",
        lambda s, victim: _link(s / f"{JOB}.files" / "cwd", victim.parent),
        _keep_files,
        None,
    ),
    _theirs_first("kept files: a folder another user made first", f"{JOB}.files", _keep_files),
    Case("name lock: a folder placed for it", lambda s, victim: (s / f".{JOB}.lock").mkdir(), _claim, f".{JOB}.lock"),
    Case(
        "name lock: a link placed for it", lambda s, victim: _link(s / f".{JOB}.lock", victim), _claim, f".{JOB}.lock"
    ),
    Case(
        "name lock: another user's file",
        lambda s, victim: (s / f".{JOB}.lock").touch() or os.chown(s / f".{JOB}.lock", OTHER, OTHER),
        _claim,
        f".{JOB}.lock",
        as_root=True,
    ),
    _theirs_first("name: kept files another user placed", f"{JOB}.files", _claim),
    *(_dest_link(folder) for folder in ("files/cwd", "files", "logs", "model")),
    Case(
        "download: DEST/logs/master-0.log a link",
        lambda s, victim: _link(s.parent / "dest" / "logs" / "master-0.log", victim),
        _download,
        None,
    ),
    _download_theirs("kept files another user placed", _placed_kept_files, "kept/files"),
    _download_theirs("DEST/files a folder another user made", _theirs, "dest/files"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_nothing_is_written_through_a_path_another_user_placed(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if case.as_root and os.geteuid() != 0:
        pytest.skip("playing another user takes chown, as root")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv(STATE_DIR_ENV, str(state))
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    victim = victim_dir / "notes.txt"
    victim.write_text("the victim's own\n")
    case.plant(state, victim)
    if case.refused is None:
        case.act(state, tmp_path)
    else:
        with pytest.raises(KftrainError) as raised:
            case.act(state, tmp_path)
        message = str(raised.value)
        assert len(message.splitlines()) == 1 and f"{os.path.normpath(state / case.refused)}:" in message, message
        assert "refused as unsafe" in message
    # Nothing went where the placed path points, nor into a folder another user can read.
    assert victim.read_text() == "the victim's own\n"
    assert sorted(p.name for p in victim_dir.iterdir()) == ["notes.txt"]
    for top, _, names in os.walk(tmp_path):
        if os.stat(top).st_uid == OTHER:
            assert names == [], f"a job's file in another user's {top}"


SHARED = [
    # (mode, owner: "me" / "root" / "other", refused: why, or None)
    (0o700, "me", None),
    (0o1777, "root", None),  # /tmp's: no one renames or removes another's entry
    (0o777, "me", "writable by others (mode 0777) and not sticky"),
    (0o775, "me", "writable by others (mode 0775) and not sticky"),
    (0o1777, "other", f"owned by uid {OTHER}"),  # its owner could still replace a record
    (0o755, "other", f"owned by uid {OTHER}"),
]


@pytest.mark.parametrize(("mode", "owner", "why"), SHARED)
def test_a_state_folder_others_could_write_in_is_refused_in_one_line(
    mode: int, owner: str, why: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if owner != "me" and os.geteuid() != 0:
        pytest.skip("playing another user takes chown, as root")
    shared = tmp_path / "shared"
    shared.mkdir()
    if owner == "other":
        os.chown(shared, OTHER, OTHER)
    shared.chmod(mode)
    monkeypatch.setenv(STATE_DIR_ENV, str(shared))
    if why is None:
        fd = local_state.claim_name(JOB, "pytorchjobs.kubeflow.org")
        assert fd is not None
        local_state.release(fd)
        return
    with pytest.raises(KftrainError, match=rf"^state folder {re.escape(str(shared))} is {re.escape(why)}") as raised:
        local_state.claim_name(JOB, "pytorchjobs.kubeflow.org")
    assert len(str(raised.value).splitlines()) == 1
    assert not any(shared.iterdir())  # no lock, no record


def test_a_record_is_written_afresh_never_through_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record goes to a fresh file renamed into place: a link placed for it (or for any name its writer might
    use first) is replaced, never followed."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv(STATE_DIR_ENV, str(state))
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's own\n")
    for name in (f"{JOB}.json", *(f".{JOB}.json.{pid}" for pid in range(os.getpid() - 2, os.getpid() + 3))):
        (state / name).symlink_to(victim)
    local_state.write(JOB, fresh=True, phase="Running")
    assert victim.read_text() == "the victim's own\n"
    assert stat.S_ISREG((state / f"{JOB}.json").lstat().st_mode)
    assert local_state.read(JOB) is not None


PLANT_DURING_THE_JOB = """
import os, sys
state, victim = sys.argv[1], sys.argv[2]
os.symlink(victim, os.path.join(state, "vj.logs"))
os.mkdir(os.path.join(state, "vj.files"))
os.chown(os.path.join(state, "vj.files"), 4242, 4242)
os.chmod(os.path.join(state, "vj.files"), 0o777)
open("model.pt", "w").write("the job's weights")
"""


def test_paths_placed_while_the_job_runs_are_refused_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Placed after the job claimed its name, before it ends: nothing is written through them, one line names each,
    and the job's files stay in its work folder rather than go."""
    if os.geteuid() != 0:
        pytest.skip("playing another user takes chown, as root")
    state, victim, launch = tmp_path / "state", tmp_path / "victim", tmp_path / "launch"
    for folder in (state, victim, launch):
        folder.mkdir(mode=0o700)
    monkeypatch.setenv(STATE_DIR_ENV, str(state))
    program = [sys.executable, "-c", PLANT_DURING_THE_JOB, str(state), str(victim)]
    job = pytorchjob({"Master": replica(1, command=program, restart_policy="Never")}, name=JOB)
    out = io.StringIO()
    result = LocalBackend(LocalConfig(out=out, cwd=launch)).run(load_manifest(yaml.safe_dump(job)), 60)
    workdir = Path(str((local_state.read(JOB) or {}).get("workdir")))
    try:
        assert result.succeeded, out.getvalue()
        said = out.getvalue()
        assert f"{JOB}: logs not kept: {state / 'vj.logs'}: a symbolic link; refused as unsafe" in said, said
        assert f"{JOB}: files not kept: {state / 'vj.files'}: owned by uid {OTHER}" in said, said
        assert f"they stay in {workdir}" in said
        assert list(victim.iterdir()) == [] and list((state / "vj.files").iterdir()) == []
        assert [p.read_text() for p in workdir.glob("cwd-*/model.pt")] == ["the job's weights"]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_this_users_own_kept_folders_writable_by_others_are_made_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older run's ``<name>.logs/`` of this user's, made group-writable by a umask of 002 and holding a link a
    group member placed: the name is not refused, and the logs are kept in a folder made afresh, 0700."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv(STATE_DIR_ENV, str(state))
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's own\n")
    _link(state / f"{JOB}.logs" / "master-0.log", victim)
    (state / f"{JOB}.logs").chmod(0o775)
    lock = local_state.claim_name(JOB, "pytorchjobs.kubeflow.org")
    try:
        _keep_logs(state, tmp_path)
    finally:
        local_state.release(lock)
    assert victim.read_text() == "the victim's own\n"
    assert stat.S_IMODE((state / f"{JOB}.logs").stat().st_mode) == 0o700
    assert local_state.kept_log(JOB, "master-0") == "the job's log\n"
