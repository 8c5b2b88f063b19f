"""Each local job's replicas run in a working folder of their own job that shows the launch folder (its files
readable, the program's own files kept from the next job), the logs of every ended job stay readable with
``kftrain jobs logs`` once its work folder is gone, and the work folders of ended jobs are kept within a bound
(kftrain/backends/local/workdirs.py)."""

from __future__ import annotations

import io
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.backends.local import jobs as local_jobs
from kftrain.backends.local import state as local_state
from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.errors import KftrainError
from kftrain.job import load_manifest

# Resumes from a snapshot in its working folder when one is there, as many trainers do; reads its data from the
# launch folder.
TRAIN = textwrap.dedent(
    """
    import os, sys
    print("data:", open("data/input.txt").read().strip())
    if os.path.exists("snapshot.txt"):
        print("resumed from", open("snapshot.txt").read())
    else:
        print("fresh start")
    open("snapshot.txt", "w").write(os.environ["JOB"])
    sys.exit(int(os.environ.get("EXIT", "0")))
    """
)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(folder))
    return folder


@pytest.fixture
def launch(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "input.txt").write_text("rows\n")
    (folder / "train.py").write_text(TRAIN)
    return folder


def run(name: str, launch: Path, exit_code: int = 0, **config: object) -> tuple[bool, str]:
    manifest = f"""
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    metadata: {{name: {name}}}
    spec:
      pytorchReplicaSpecs:
        Master:
          restartPolicy: Never
          template:
            spec:
              containers:
              - name: pytorch
                image: x
                command: [{sys.executable}, train.py]
                env: [{{name: JOB, value: {name}}}, {{name: EXIT, value: "{exit_code}"}}]
    """
    out = io.StringIO()
    backend = LocalBackend(LocalConfig(out=out, cwd=launch, **config))  # type: ignore[arg-type]
    result = backend.run(load_manifest(textwrap.dedent(manifest)))
    return result.succeeded, out.getvalue()


def test_each_job_runs_in_its_own_folder_showing_the_launch_folder(state: Path, launch: Path) -> None:
    first_ok, first = run("first", launch)
    second_ok, second = run("second", launch)
    assert first_ok and second_ok
    assert "data: rows" in first and "data: rows" in second  # the launch folder's files are seen
    assert "fresh start" in first and "fresh start" in second, second  # the first job's snapshot is not
    assert not (launch / "snapshot.txt").exists()  # nor written into the launch folder


@pytest.mark.parametrize("exit_code", [0, 3])
def test_a_jobs_temporary_folder_is_its_own_and_goes_with_it(
    state: Path, launch: Path, exit_code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a pod's /tmp: TMPDIR of the replicas is the job's, whatever they leave there is gone when it ends."""
    (launch / "train.py").write_text(
        "import os, sys, tempfile\n"
        "print('tmp:', tempfile.mkdtemp(prefix='torchelastic_'))\n"
        "sys.exit(int(os.environ['EXIT']))\n"
    )
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setattr("tempfile.tempdir", str(system_tmp))
    ok, out = run(f"scratch-{exit_code}", launch, exit_code=exit_code)
    assert ok == (exit_code == 0)
    left = Path(out.split("tmp: ", 1)[1].split()[0])
    assert not left.exists() and not left.parent.exists()  # the job's scratch is gone, with what was left in it
    assert sorted(p.name for p in system_tmp.iterdir() if not p.name.startswith("kftrain-scratch-")) == []


def test_jobs_logs_reads_a_succeeded_job_whose_work_folder_is_gone(state: Path, launch: Path) -> None:
    ok, _ = run("done", launch)
    assert ok
    recorded = local_state.read("done")
    assert recorded is not None and not Path(recorded["workdir"]).exists()  # a succeeded job's folder is removed
    lines = list(local_jobs.job_logs("done", None, None, False))
    assert ("master-0", "fresh start") in lines, lines


def test_jobs_logs_says_so_when_no_log_is_left(state: Path, launch: Path) -> None:
    ok, _ = run("gone", launch)
    assert ok
    for kept in (state / "gone.logs").iterdir():
        kept.unlink()
    with pytest.raises(KftrainError, match="no logs of job gone are left"):
        list(local_jobs.job_logs("gone", None, None, False))


def test_work_folders_of_failed_jobs_are_kept_within_the_bound(state: Path, launch: Path) -> None:
    workdirs = []
    for i in range(4):
        ok, out = run(f"failed-{i}", launch, exit_code=3, keep_finished=2)
        assert not ok
        workdirs.append(Path(out.split("(workdir ", 1)[1].split(")", 1)[0]))
        time.sleep(0.01)  # distinct creation times
    # Each submit kept the newest 2 ended jobs' folders (the job it starts comes on top of them).
    assert [w.exists() for w in workdirs] == [False, True, True, True]
    assert [(state / f"failed-{i}.logs").exists() for i in range(4)] == [False, True, True, True]
    run("later", launch, keep_finished=2, keep_finished_s=0.0)  # and none older than keep_finished_s
    assert not any(w.exists() for w in workdirs)
