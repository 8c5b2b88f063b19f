"""Each local job's replicas run in a working folder of their own job that shows the launch folder (its files
readable, the program's own files kept from the next job); when the job ends, however it ends, nothing of it stays in
the temporary folder, the files its replicas wrote are kept in the state folder and named, the logs of every ended job
stay readable with ``kftrain jobs logs``, and what ended jobs left is kept within a bound
(kftrain/backends/local/workdirs.py)."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.backends.local import jobs as local_jobs
from kftrain.backends.local import state as local_state
from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.backends.local.workdirs import keep_files, replica_cwd
from kftrain.cli.app import main
from kftrain.errors import KftrainError
from kftrain.job import load_manifest, load_manifest_file
from testbed.manifests import pytorchjob, replica
from testbed.polling import wait_until

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


def test_what_ended_jobs_left_is_kept_within_the_bound(state: Path, launch: Path) -> None:
    workdirs = []
    for i in range(4):
        ok, out = run(f"failed-{i}", launch, exit_code=3, keep_finished=2)
        assert not ok
        workdirs.append(Path(out.split("(workdir ", 1)[1].split(")", 1)[0]))
        time.sleep(0.01)  # distinct creation times
    assert not any(w.exists() for w in workdirs)  # each work folder went with its job
    # Each submit kept what the newest 2 ended jobs left (the job it starts comes on top of them).
    assert [(state / f"failed-{i}.logs").exists() for i in range(4)] == [False, True, True, True]
    assert [(state / f"failed-{i}.files").exists() for i in range(4)] == [False, True, True, True]
    assert (state / "failed-3.files" / "cwd" / "snapshot.txt").read_text() == "failed-3"
    run("later", launch, keep_finished=2, keep_finished_s=0.0)  # and none older than keep_finished_s
    assert not any((state / f"failed-{i}.files").exists() for i in range(4))


@pytest.fixture
def system_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The machine's temporary folder, as this process and the launchers it starts see it: checked to be as it was."""
    folder = tmp_path / "system-tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr("tempfile.tempdir", str(folder))
    return folder


# Writes a file in its working folder, then ends as $END says: exits 0 or 3, or runs until stopped.
ENDING = textwrap.dedent(
    """
    import os, sys, time
    open("outputs.txt", "w").write("made by the job")
    print("written", flush=True)
    end = os.environ["END"]
    if end == "hang":
        while True:
            time.sleep(0.1)
    sys.exit(int(end))
    """
)


def _manifest(name: str, end: str, launch: Path) -> Path:
    (launch / "ending.py").write_text(ENDING)
    m = pytorchjob({"Master": replica(1, "pytorch", [sys.executable, "ending.py"], restart_policy="Never",
                                      env=[{"name": "END", "value": end}])}, name=name)  # fmt: skip
    path = launch / f"{name}.yaml"
    path.write_text(yaml.safe_dump(m))
    return path


def written(name: str) -> bool:
    return ("master-0", "written") in list(local_jobs.job_logs(name, None, None, False))


def _in_process(name: str, end: str, launch: Path, how: str) -> None:
    """The job run by a backend of this process: to its end, to a timeout, or cancelled while it runs."""
    backend = LocalBackend(LocalConfig(out=io.StringIO(), cwd=launch, grace_period_s=1.0))
    handle = backend.submit(load_manifest_file(_manifest(name, end, launch)))
    if how == "cancelled":
        wait_until(lambda: written(name), 30, "the program's first line")
        backend.cancel(handle)
    else:
        backend.wait(handle, timeout=1.0 if how == "timed out" else 60)


def _launcher(name: str, end: str, launch: Path, how: str) -> None:
    """``kftrain launch --local`` in another process, running; then ``kftrain jobs delete`` of its job, the launcher
    alive (it stops the job) or killed outright first (SIGKILL: the job's folders are left for delete to remove)."""
    command = [sys.executable, "-m", "kftrain.cli", "launch", "--local", "-f", str(_manifest(name, end, launch))]
    launcher = subprocess.Popen(command, cwd=launch, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (local_state.read(name) or {}).get("phase") == "Running", 60, "the job's record")
        wait_until(lambda: written(name), 60, "the program's first line")
        if how == "killed, then deleted":
            launcher.kill()
            launcher.wait(30)
            wait_until(lambda: (local_state.read(name) or {}).get("phase") == "Lost", 30, "the launcher's end")
        local_jobs.delete_job(name)
        assert launcher.wait(30) != 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


# (how the job ends, its program's end, who runs it)
ENDS = [
    ("succeeded", "0", _in_process),
    ("failed", "3", _in_process),
    ("timed out", "hang", _in_process),
    ("cancelled", "hang", _in_process),
    ("deleted", "hang", _launcher),
    ("killed, then deleted", "hang", _launcher),
]


@pytest.mark.usefixtures("no_leftover_processes")
@pytest.mark.parametrize(("how", "end", "runs"), [e for e in ENDS], ids=[e[0] for e in ENDS])
def test_nothing_of_a_job_stays_in_the_temporary_folder(
    state: Path, launch: Path, system_tmp: Path, how: str, end: str, runs: Callable[..., None]
) -> None:
    name = f"ends-{'-'.join(how.replace(',', '').split())}"
    runs(name, end, launch, how)
    assert sorted(p.name for p in system_tmp.iterdir()) == []  # no work folder, no scratch folder
    if runs is _launcher:  # deleted: everything of it is gone, its record and what it left too
        assert local_state.read(name) is None
        assert not (state / f"{name}.logs").exists() and not (state / f"{name}.files").exists()
    else:  # what the user may want is kept in the state folder
        assert (state / f"{name}.files" / "cwd" / "outputs.txt").read_text() == "made by the job"
        assert ("master-0", "written") in list(local_jobs.job_logs(name, None, None, False))


def test_files_written_beside_the_model_are_kept_named_and_downloaded(
    state: Path, launch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kubeflow Trainer's XGBoost example saves /workspace/xgboost_model.json (kubeflow/trainer@v2.3.0:
    examples/xgboost/distributed-training/xgboost-distributed.ipynb), locally the job's own folder; a script saves
    beside itself. Both are kept with the job's logs, named when it ends, and `kftrain jobs download` has them."""
    program = (
        "import os; ws = os.environ.get('KFTRAIN_WORKSPACE', '/workspace'); "
        "open(os.path.join(ws, 'xgboost_model.json'), 'w').write('{}'); "
        "os.makedirs('plots', exist_ok=True); open('plots/loss.svg', 'w').write('<svg/>')"
    )
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "xgb"},
        "spec": {"runtimeRef": {"name": "xgboost-distributed"},
                 "trainer": {"numNodes": 1, "command": [sys.executable, "-c", program]}},
    }  # fmt: skip
    out = io.StringIO()
    assert LocalBackend(LocalConfig(out=out, cwd=launch)).run(load_manifest(yaml.safe_dump(job)), 60).succeeded
    said = [line for line in out.getvalue().splitlines() if "outside $KFTRAIN_MODEL_URI" in line]
    assert said == [
        f"[kftrain] xgb: its replicas wrote cwd/plots/, workspace/xgboost_model.json (8 bytes) in their job's "
        f"folders, outside $KFTRAIN_MODEL_URI (on a cluster they would be gone with the pods): kept in "
        f"{state / 'xgb.files'} (kftrain jobs download xgb DEST)"
    ]
    assert main(["jobs", "download", "xgb", str(tmp_path / "dest")]) == 0
    assert (tmp_path / "dest" / "files" / "workspace" / "xgboost_model.json").read_text() == "{}"
    assert (tmp_path / "dest" / "files" / "cwd" / "plots" / "loss.svg").read_text() == "<svg/>"
    assert (tmp_path / "dest" / "logs" / "node-0.log").exists()
    assert "files: " in capsys.readouterr().out


def test_the_launch_folders_links_are_not_kept_and_the_initializers_downloads_are_named(tmp_path: Path) -> None:
    launch, workdir = tmp_path / "project", tmp_path / "work"
    (launch / "data").mkdir(parents=True)
    (launch / "train.py").write_text("")
    workdir.mkdir()
    cwd = replica_cwd(workdir, launch)
    (cwd / "model.pt").write_text("weights")
    (workdir / "workspace" / "model").mkdir(parents=True)  # what the model initializer downloaded
    (workdir / "workspace" / "output").mkdir()
    kept = keep_files(workdir, cwd, launch, tmp_path / "kept", downloads=("dataset", "model"))
    assert [path for path, _ in kept.kept] == ["cwd/model.pt", "workspace/output/"]
    assert kept.left == [("workspace/model", "an initializer's download")]
    assert kept.describe("j")[1] == "j: not kept: workspace/model (an initializer's download)"
    assert sorted(p.name for p in (tmp_path / "kept" / "cwd").iterdir()) == ["model.pt"]  # no link to data/, train.py
