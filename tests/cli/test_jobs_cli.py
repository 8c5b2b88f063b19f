"""``kftrain jobs list/status/logs/delete/download`` against the local backend (its state folder) and the fake
Kubernetes API."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from kftrain import storage
from kftrain.backends import LocalBackend, LocalConfig
from kftrain.backends.kubernetes.backend import KubernetesBackend
from kftrain.backends.kubernetes.config import KubernetesConfig
from kftrain.backends.local.state import STATE_DIR_ENV
from kftrain.cli.app import main
from kftrain.errors import KftrainError
from kftrain.job import load_manifest_file
from kftrain.job.naming import RUN_ID_LABEL
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim
from testbed.k8s_harness import api_client, make_backend, pytorch_job, running, stamped
from testbed.launch_cluster import LAUNCHES, RUN_ID, TASK_ID, Launch, s_success, step_inputs
from testbed.manifests import pytorchjob, replica
from testbed.polling import wait_until

PROGRAM = """
import os, sys, time
name = os.environ["POD_NAME"]
print(f"{name} says hello", flush=True)
said = os.path.join(os.environ["OUT_DIR"], "worker-said")
if name.endswith("worker-0"):
    open(said, "w").close()
while not os.path.exists(said):  # the master (whose end ends the job) waits for the worker's line
    time.sleep(0.02)
if os.environ.get("HANG"):
    while True:
        print(f"{name} still training", flush=True)
        time.sleep(0.1)
"""


def manifest(tmp_path: Path, name: str, hang: bool, model: bool = True) -> Path:
    program = tmp_path / "train.py"
    program.write_text(textwrap.dedent(PROGRAM))
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        *([{"name": "KFTRAIN_MODEL_URI", "value": str(tmp_path / "model")}] if model else []),
        {"name": "OUT_DIR", "value": str(tmp_path)},
        *([{"name": "HANG", "value": "1"}] if hang else []),
    ]
    cmd = [sys.executable, str(program)]
    m = pytorchjob({"Master": replica(1, "pytorch", cmd, env=env), "Worker": replica(1, "pytorch", cmd, env=env)})
    m["metadata"]["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(m))
    return path


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(folder))
    return folder


def jobs(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["jobs", *args]) == 0
    return capsys.readouterr().out


def test_local_jobs_list_status_logs_download_delete(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["launch", "-f", str(manifest(tmp_path, "done-job", hang=False)), "--local"]) == 0
    # The model its trainer would have written (launch kept the replicas' logs beside it itself).
    with storage.ArtifactWriter(str(tmp_path / "model")) as writer, writer.open("weights.bin") as out:
        out.write(b"weights")
    capsys.readouterr()

    listed = jobs(capsys, "list")
    assert "done-job" in listed and "PyTorchJob" in listed and "Succeeded" in listed
    status = jobs(capsys, "status", "done-job")
    assert "PyTorchJob Succeeded" in status and "replicas: master-0, worker-0" in status
    # The job succeeded: its workdir is gone, the kept logs are read.
    assert jobs(capsys, "logs", "done-job", "--replica", "worker-0") == "[worker-0] done-job-worker-0 says hello\n"
    out = jobs(capsys, "download", "done-job", str(tmp_path / "dest"))
    assert (tmp_path / "dest" / "model" / "weights.bin").read_bytes() == b"weights"
    assert (tmp_path / "dest" / "logs" / "worker-0.log").read_text() == "done-job-worker-0 says hello\n"
    assert "model:" in out
    assert jobs(capsys, "delete", "done-job") == "deleted done-job\n"
    assert "done-job" not in jobs(capsys, "list")
    assert main(["jobs", "status", "done-job"]) == 2


def test_download_of_a_job_launched_without_a_model_uri_has_what_it_left(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["launch", "-f", str(manifest(tmp_path, "bare-job", hang=False, model=False)), "--local"]) == 0
    capsys.readouterr()
    out = jobs(capsys, "download", "bare-job", str(tmp_path / "dest"))
    assert (tmp_path / "dest" / "logs" / "worker-0.log").read_text() == "bare-job-worker-0 says hello\n"
    assert "model:" not in out and not (tmp_path / "dest" / "model").exists()
    # Once what it left is gone too, it says so, and writes nothing.
    shutil.rmtree(state / "bare-job.logs")
    assert main(["jobs", "download", "bare-job", str(tmp_path / "again")]) == 2
    assert "job bare-job records no model or logs location (it was launched without a model URI) and left no" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "again").exists()  # nothing written


def test_a_running_local_job_is_listed_its_live_log_read_and_delete_stops_it(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, STATE_DIR_ENV: str(state)}
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kftrain.cli",
            "launch",
            "-f",
            str(manifest(tmp_path, "long-job", hang=True)),
            "--local",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    follower: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 60
        out = ""
        while "still training" not in out:  # the job starts, is recorded, its master prints
            assert time.monotonic() < deadline and launcher.poll() is None, out
            time.sleep(0.1)
            code = main(["jobs", "logs", "long-job", "--replica", "master-0", "--tail", "2"])
            out = capsys.readouterr().out if code == 0 else ""
        assert len(out.splitlines()) == 2
        assert "Running" in jobs(capsys, "list")
        follow = ["jobs", "logs", "long-job", "--replica", "master-0", "--tail", "1", "--follow"]
        follower = subprocess.Popen(
            [sys.executable, "-m", "kftrain.cli", *follow],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        followed: list[str] = []
        reader = threading.Thread(target=lambda: followed.extend(follower.stdout or []), daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while len(followed) < 4:  # the last line, then the new ones as the master prints them
            assert time.monotonic() < deadline and follower.poll() is None, followed
            time.sleep(0.05)
        assert set(followed[:4]) == {"[master-0] long-job-master-0 still training\n"}
        assert jobs(capsys, "delete", "long-job") == "deleted long-job\n"
        assert launcher.wait(timeout=30) != 0  # stopped, as a cancelled run is
        assert follower.wait(timeout=30) == 0  # the job ended: so does following it
        assert "long-job" not in jobs(capsys, "list")
    finally:
        for process in (launcher, follower):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def test_a_scaled_up_local_job_lists_and_follows_its_new_replica(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = LocalBackend(LocalConfig(out=io.StringIO(), grace_period_s=2))
    handle = backend.submit(load_manifest_file(manifest(tmp_path, "grown-job", hang=True)))
    env = {**os.environ, STATE_DIR_ENV: str(state)}
    follow = [sys.executable, "-m", "kftrain.cli", "jobs", "logs", "grown-job", "--tail", "1", "--follow"]
    follower = subprocess.Popen(follow, env=env, stdout=subprocess.PIPE, text=True)
    followed: list[str] = []
    reader = threading.Thread(target=lambda: followed.extend(follower.stdout or []), daemon=True)
    reader.start()
    grown = "[worker-1] grown-job-worker-1 still training\n"
    try:
        deadline = time.monotonic() + 60
        while "[worker-0] grown-job-worker-0 still training\n" not in followed:
            assert time.monotonic() < deadline and follower.poll() is None, followed
            time.sleep(0.05)
        backend.scale(handle, "Worker", 2)  # as `kubectl scale`: worker-1 starts
        while grown not in followed:  # the follower found the replica that joined
            assert time.monotonic() < deadline and follower.poll() is None, followed
            time.sleep(0.05)
        assert "replicas: master-0, worker-0, worker-1" in jobs(capsys, "status", "grown-job")
        assert "[worker-1] grown-job-worker-1 says hello\n" in jobs(capsys, "logs", "grown-job")
    finally:
        backend.cancel(handle)
        backend.wait(handle, 60)
        if follower.poll() is None and follower.wait(30) is None:
            follower.kill()
    assert follower.returncode == 0  # the job ended: so does following it


def launched(
    kube: FakeKube, operator: OperatorSim, scenario: Callable[[JobSim], None]
) -> tuple[str, KubernetesBackend]:
    """A PyTorchJob (Master + 1 Worker) the fake operator plays ``scenario`` for; its name, and a backend on its
    namespace (what ``kftrain jobs --backend kubernetes`` asks)."""
    operator.scenario = scenario
    backend, _ = make_backend(kube)
    handle = backend.submit(stamped(pytorch_job(workers=1), "run-1", "task-1"))
    return handle.name, KubernetesBackend(KubernetesConfig(namespace=handle.namespace), api_client(kube))


def running_now(ops: KubernetesBackend, name: str) -> bool:
    """Whether the job's latest condition is Running: its pods have started (the scenario's ``running``)."""
    return ops.get_job(name).phase == "Running"


def test_kubernetes_jobs_list_status_logs_delete(kube: FakeKube, operator: OperatorSim) -> None:
    def train(sim: JobSim) -> None:
        running(sim)
        sim.log("worker-0", "epoch 1", "epoch 2")
        sim.restart_in_place("worker-0", 137)
        sim.log("worker-0", "resumed from epoch 2")
        sim.wait_deleted()

    name, ops = launched(kube, operator, train)
    resumed = ("worker-0", "resumed from epoch 2")
    wait_until(
        lambda: "1 restart(s)" in " ".join(ops.get_job(name).details) and resumed in ops.job_logs(name),
        20,
        "the restart and the resumed line",
    )
    (job,) = ops.list_jobs()
    assert (job.name, job.kind, job.run_id, job.task_id) == (name, "PyTorchJob", "run-1", "task-1")
    status = "\n".join(ops.get_job(name).details)
    assert "(worker-0): Running, 1 restart(s), previous run exited 137" in status and "BackOff" in status, status
    assert list(ops.job_logs(name, "worker-0", 1, False)) == [resumed]
    ops.delete_job(name)
    wait_until(lambda: not ops.list_jobs(), 20, "the job to be gone")
    assert json.dumps(kube.deletions)


TYPED = [launch for launch in LAUNCHES if launch.source == "typed"]


@pytest.mark.usefixtures("kubeconfig")  # the step finds the fake cluster as it would outside a pod
@pytest.mark.parametrize("launch", TYPED, ids=[launch.kind for launch in TYPED])
def test_kubernetes_jobs_find_a_launch_steps_job_and_its_logs_after_its_pods_are_gone(
    launch: Launch, kube: FakeKube, operator: OperatorSim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a pipeline's launch step left on the cluster, through ``kftrain jobs --backend kubernetes``."""
    operator.scenario = lambda sim: s_success(sim, launch)
    launch.component.python_func(**step_inputs(launch, tmp_path))  # the job succeeds
    operator.join()
    capsys.readouterr()
    (sim,) = operator.sims
    k8s = ("--backend", "kubernetes")
    phase = "Complete" if launch.kind == "TrainJob" else "Succeeded"
    (row,) = jobs(capsys, *k8s, "list").splitlines()[1:]
    assert row.split()[:3] == [sim.name, launch.kind, phase] and row.endswith(f"{RUN_ID}/{TASK_ID}"), row
    assert f"{sim.name}: {launch.kind} {phase}" in jobs(capsys, *k8s, "status", sim.name)
    said = "".join(f"[{label}] hello from {label}\n[{label}] {label} done\n" for label in sorted(sim.labels()))
    assert jobs(capsys, *k8s, "logs", sim.name) == said  # from the pods
    for pod in sim.pod_names.values():
        kube.delete_pod(sim.namespace, pod)  # cleaned up (cleanPodPolicy All, or a TTL's garbage collection)
    assert jobs(capsys, *k8s, "logs", sim.name) == said  # from the logs the step kept beside the model
    jobs(capsys, *k8s, "download", sim.name, str(tmp_path / "dest"))
    assert (tmp_path / "dest" / "model" / "model.bin").read_bytes() == b"weights"
    for label in sim.labels():
        assert (tmp_path / "dest" / "logs" / f"{label}.log").read_text() == f"hello from {label}\n{label} done\n"
    assert jobs(capsys, *k8s, "delete", sim.name) == f"deleted {sim.name}\n"


def test_kubernetes_logs_follow_streams_every_replica_until_it_ends(kube: FakeKube, operator: OperatorSim) -> None:
    more = threading.Event()

    def train(sim: JobSim) -> None:
        running(sim)
        for label in sim.labels():
            sim.log(label, f"{label} epoch 1", f"{label} epoch 2")
        while not more.is_set():
            sim.sleep(0.02)
        for label in sim.labels():
            sim.log(label, f"{label} epoch 3")
        sim.exit_all(0)
        sim.condition("Succeeded")

    name, ops = launched(kube, operator, train)
    # Read once the job runs: the log of a container still being created is an error (400), as the API server's.
    wait_until(
        lambda: running_now(ops, name) and len(list(ops.job_logs(name, None, None, False))) == 4, 20, "four log lines"
    )
    followed = ops.job_logs(name, None, 1, True)
    first = sorted(next(followed) for _ in range(2))  # each replica's last line, then what it prints next
    assert first == [("master-0", "master-0 epoch 2"), ("worker-0", "worker-0 epoch 2")]
    more.set()
    rest = sorted(followed)  # ends when the job has ended
    assert rest == [("master-0", "master-0 epoch 3"), ("worker-0", "worker-0 epoch 3")]
    # Following a job that has ended: each replica's last lines, and the end at once.
    assert sorted(ops.job_logs(name, None, 2, True)) == [
        *(("master-0", f"master-0 epoch {n}") for n in (2, 3)),
        *(("worker-0", f"worker-0 epoch {n}") for n in (2, 3)),
    ]


def test_kubernetes_logs_follow_picks_up_a_replica_that_starts_later(kube: FakeKube, operator: OperatorSim) -> None:
    """A scale-up (or a replacement pod) while following: its lines come too, from its first one."""
    grow, finish = threading.Event(), threading.Event()

    def train(sim: JobSim) -> None:
        running(sim)
        sim.log("worker-0", "worker-0 epoch 1")
        while not grow.is_set():
            sim.sleep(0.02)
        sim.scale_up("Worker")
        sim.start("worker-1")
        sim.log("worker-1", "worker-1 joined", "worker-1 epoch 2")
        while not finish.is_set():
            sim.sleep(0.02)
        sim.log("worker-1", "worker-1 done")
        sim.exit_all(0)
        sim.condition("Succeeded")

    name, ops = launched(kube, operator, train)
    wait_until(
        lambda: running_now(ops, name) and ("worker-0", "worker-0 epoch 1") in ops.job_logs(name, None, None, False),
        20,
        "worker-0's line",
    )
    followed: list[tuple[str, str]] = []  # every replica
    only_new: list[tuple[str, str]] = []  # --replica worker-1: no such pod yet, it is waited for
    readers = [
        threading.Thread(target=lambda: followed.extend(ops.job_logs(name, None, None, True)), daemon=True),
        threading.Thread(target=lambda: only_new.extend(ops.job_logs(name, "worker-1", None, True)), daemon=True),
    ]
    for reader in readers:
        reader.start()
    wait_until(lambda: ("worker-0", "worker-0 epoch 1") in followed, 20, "worker-0 followed")
    grow.set()
    wait_until(lambda: ("worker-1", "worker-1 epoch 2") in followed, 20, "worker-1 followed")
    finish.set()
    for reader in readers:
        reader.join(30)
        assert not reader.is_alive()  # the job ended: so did following it
    assert followed == [("worker-0", "worker-0 epoch 1")] + [
        ("worker-1", line) for line in ("worker-1 joined", "worker-1 epoch 2", "worker-1 done")
    ]
    assert only_new == [("worker-1", line) for line in ("worker-1 joined", "worker-1 epoch 2", "worker-1 done")]


def test_logs_of_a_replica_the_job_does_not_have_name_those_it_has(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Trainer job's replicas are node-0, node-1: asking for worker-0 names them, not "no logs are left"."""
    from kftrain.backends.local import state as local_state

    local_state.write("trained", kind="TrainJob", phase="Failed", replicas=["node-0", "node-1"], launcher_pid=1)
    assert main(["jobs", "logs", "trained", "--replica", "worker-0"]) == 2
    err = capsys.readouterr().err
    assert "job trained has no replica 'worker-0'; its replicas: node-0, node-1" in err, err


@pytest.mark.parametrize(
    ("phase", "following", "refused"),
    [
        pytest.param("Failed", False, True, id="ended"),
        pytest.param("Succeeded", True, True, id="ended-followed"),
        pytest.param("Running", False, True, id="running"),
        pytest.param("Running", True, False, id="running-followed-may-still-start-it"),
    ],
)
def test_an_unknown_replica_is_refused_unless_a_running_job_is_followed(
    phase: str, following: bool, refused: bool
) -> None:
    from kftrain.backends.base import JobStatus
    from kftrain.cli.jobs import _check_replica
    from kftrain.errors import KftrainError

    job = JobStatus(name="j", kind="TrainJob", phase=phase, created=0.0, details=("replicas: node-0, node-1",))
    if refused:
        with pytest.raises(KftrainError, match="its replicas: node-0, node-1"):
            _check_replica(job, "worker-0", following=following)
    else:
        _check_replica(job, "worker-0", following=following)
    _check_replica(job, "node-1", following=following)  # a replica it has is never refused


@pytest.mark.parametrize(
    ("details", "replicas"),
    [
        pytest.param(("reason: x", "replicas: node-0, node-1", "launched by pid 3"), ["node-0", "node-1"], id="local"),
        pytest.param(
            (
                "condition Running=True: ok",
                "pod j-master-0 (master-0): Running, 0 restart(s)",
                "  event Pulled: image",
                "pod j-worker-0 (worker-0): Pending, 0 restart(s)",
            ),
            ["master-0", "worker-0"],
            id="kubernetes",
        ),
        pytest.param(("reason: unreadable",), [], id="none-listed"),
    ],
)
def test_the_replicas_a_status_lists(details: tuple[str, ...], replicas: list[str]) -> None:
    from kftrain.backends.base import JobStatus
    from kftrain.cli.jobs import replicas_of

    assert (
        replicas_of(JobStatus(name="j", kind="PyTorchJob", phase="Running", created=0.0, details=details)) == replicas
    )


# (the verbs that print it, a record's field, a value with control characters in it, how it is printed)
HOSTILE_FIELDS = [
    pytest.param("list status", "kind", "PyTorchJob\x1b[2J", "PyTorchJob\\x1b[2J", id="kind-clears-the-screen"),
    pytest.param("list status", "phase", "Failed\rSucceeded", "Failed\\x0dSucceeded", id="phase-carriage-return"),
    pytest.param("status", "reason", "x\x1b]0;title\x07", "x\\x1b]0;title\\x07", id="reason-sets-the-title"),
    pytest.param("status", "message", "a\x9b31mred", "a\\x9b31mred", id="message-c1-csi"),
    pytest.param("status", "model_uri", "/m/\u202eevil", "/m/\\u202eevil", id="model-bidi-override"),
    pytest.param("status", "logs_uri", "/l/\u2028next", "/l/\\u2028next", id="logs-line-separator"),
    pytest.param("status", "replicas", ["master-0\x1b[1A"], "master-0\\x1b[1A", id="replica-cursor-up"),
    pytest.param("list", "labels", {RUN_ID_LABEL: "r\x1b[8m"}, "r\\x1b[8m", id="run-id-hidden-text"),
]


@pytest.mark.parametrize(("verbs", "field", "value", "shown"), HOSTILE_FIELDS)
def test_every_field_of_a_record_is_printed_with_its_control_characters_escaped(
    state: Path, capsys: pytest.CaptureFixture[str], verbs: str, field: str, value: object, shown: str
) -> None:
    from kftrain.backends.local import state as local_state

    fields: dict[str, object] = {"kind": "PyTorchJob", "phase": "Failed", "replicas": ["master-0"], field: value}
    local_state.write("hostile", **fields)
    for verb in verbs.split():
        out = jobs(capsys, *([verb] if verb == "list" else [verb, "hostile"]))
        assert shown in out, out
        controls = [c for c in out if c != "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u202e\u2028")]
        assert controls == [], out


# A proxy answering its sign-in page where the API's answer was expected, while ``logs --follow`` runs (issue 52,
# class 5): one line naming the server and what came back; no page dumped as log lines, no traceback.
HTML_WHERE = {
    "every log stream": {"path": r"/log$"},
    "every watch": {"query": "watch="},
    "every request after the first list": {"nth": 2},
}


@pytest.mark.parametrize("where", list(HTML_WHERE))
def test_kubernetes_logs_follow_against_html_is_one_line(where: str, kube: FakeKube, operator: OperatorSim) -> None:
    def train(sim: JobSim) -> None:
        running(sim)
        while True:  # until deleted
            sim.log("master-0", "still training")
            sim.sleep(0.05)

    name, ops = launched(kube, operator, train)
    wait_until(lambda: running_now(ops, name), 20, "the job to run")
    kube.fault("html", times=10_000, **HTML_WHERE[where])
    followed: list[tuple[str, str]] = []
    with pytest.raises(KftrainError) as caught:
        for line in ops.job_logs(name, None, 1, True):
            followed.append(line)
    said = str(caught.value)
    assert "\n" not in said and kube.url in said and "text/html" in said and "Sign in" in said, said
    assert not any("<" in text for _, text in followed), followed
    kube.delete_job("pytorchjobs", "default", name)
