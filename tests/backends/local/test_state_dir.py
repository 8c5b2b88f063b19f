"""Each user's local jobs live in a state folder of their own (kftrain/backends/local/state.py): by default under the
XDG Base Directory Specification's ``$XDG_STATE_HOME`` (``~/.local/state``), made 0700, refused when another user owns
it; in a folder several users share on purpose (``$KFTRAIN_STATE_DIR``), ``kftrain jobs list`` shows the caller's
jobs unless ``--all``, and a job of another user's is not theirs to delete."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from kftrain.backends.local import jobs as local_jobs
from kftrain.backends.local import state as local_state
from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.cli.app import main
from kftrain.errors import KftrainError

# (id, $XDG_STATE_HOME, the state folder under the home folder)
DEFAULTS = [
    ("XDG_STATE_HOME set", "{tmp}/xdg", "{tmp}/xdg/kftrain/jobs"),
    ("XDG_STATE_HOME unset", None, "{tmp}/home/.local/state/kftrain/jobs"),
    ("XDG_STATE_HOME empty", "", "{tmp}/home/.local/state/kftrain/jobs"),
    ("XDG_STATE_HOME relative: ignored, as the specification says", "xdg", "{tmp}/home/.local/state/kftrain/jobs"),
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No $KFTRAIN_STATE_DIR: the default folder, in a home folder of the test's."""
    monkeypatch.delenv(STATE_DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize(("xdg", "expected"), [d[1:] for d in DEFAULTS], ids=[d[0] for d in DEFAULTS])
def test_the_default_state_folder_is_the_users_own(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdg: str | None, expected: str
) -> None:
    if xdg is not None:
        monkeypatch.setenv("XDG_STATE_HOME", xdg.format(tmp=tmp_path))
    folder = local_state.own_state_dir()
    assert folder == Path(expected.format(tmp=tmp_path))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700  # no other user reads its records or its jobs' files


def test_a_default_state_folder_another_user_owns_is_refused_naming_the_way_out(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A home shared by several accounts, or a folder a ``sudo`` run made: neither its records nor its name locks are
    this user's; the launch and ``kftrain jobs`` say so in one line, before anything of a job exists."""
    folder = local_state.own_state_dir()
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    with pytest.raises(KftrainError, match=rf"state folder {folder} is owned by uid {me}, not by this user"):
        local_state.claim_name("train", "pytorchjobs.kubeflow.org")
    assert not any(folder.iterdir())  # no lock, no record
    assert main(["jobs", "list"]) == 2
    err = capsys.readouterr().err
    assert f"set {STATE_DIR_ENV} to a folder of your own" in err and len(err.strip().splitlines()) == 1


def _record(folder: Path, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"name": name, "created": time.time(), "kind": "PyTorchJob", "phase": "Succeeded", "replicas": []}
    (folder / f"{name}.json").write_text(json.dumps(record))


def test_a_shared_state_folder_lists_the_callers_jobs_unless_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    monkeypatch.setenv(STATE_DIR_ENV, str(shared))
    _record(shared, "mine")
    _record(shared, "theirs")
    me = os.geteuid()
    real_lstat = Path.lstat

    def lstat(path: Path) -> os.stat_result:  # "theirs" was written by another user
        info = real_lstat(path)
        if path.name != "theirs.json":
            return info
        return os.stat_result((info.st_mode, info.st_ino, info.st_dev, info.st_nlink, me + 1, *tuple(info)[5:]))

    monkeypatch.setattr(Path, "lstat", lstat)
    assert [j.name for j in local_jobs.list_jobs()] == ["mine"]
    assert main(["jobs", "list"]) == 0
    assert "theirs" not in capsys.readouterr().out
    assert main(["jobs", "list", "--all"]) == 0
    listed = capsys.readouterr().out
    assert "mine" in listed and "theirs" in listed
    # Another user's job is theirs to delete: one line, nothing removed.
    assert main(["jobs", "delete", "theirs"]) == 2
    assert f"job theirs was launched by another user (uid {me + 1})" in capsys.readouterr().err
    assert (shared / "theirs.json").exists()
