"""LocalBackend with real processes: the env contract, logs, restart policies, deadlines and cleanup."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from kftrain.backends.base import JobPhase, JobResult
from kftrain.backends.local import ALL_REPLICA_TYPES, LocalBackend, LocalConfig, parse_command_overrides
from kftrain.errors import JobSpecError
from kftrain.job import load_manifest
from kftrain.job.kinds.tfjob.kind import tf_config
from kftrain.job.topology import ReplicaId, Topology
from tests.conftest import mpijob_v2, pytorchjob, replica, tfjob

PY = sys.executable

# Names of the operators' contracts a replica could see; a replica's view of these must be exactly the contract.
CONTRACT_NAMES = {
    "TF_CONFIG",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "PYTHONUNBUFFERED",
    "K_MPI_JOB_ROLE",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_set_default_slots",
    "I_MPI_HYDRA_HOST_FILE",
    "I_MPI_PERHOST",
    "HYDRA_HOST_FILE",
}

# Dumps argv, env and the MPI hostfile to $OUT_DIR/$POD_NAME.json, then waits until $EXPECT replicas have.
DUMP = """
import glob, json, os, sys, time
out = os.environ["OUT_DIR"]
hostfile = os.environ.get("OMPI_MCA_orte_default_hostfile")
data = {"argv": sys.argv[1:], "env": dict(os.environ),
        "hostfile": open(hostfile).read() if hostfile and os.path.exists(hostfile) else None}
tmp = os.path.join(out, os.environ["POD_NAME"] + ".tmp")
with open(tmp, "w") as f:
    json.dump(data, f)
os.rename(tmp, tmp[:-4] + ".json")
deadline = time.time() + 10
while len(glob.glob(os.path.join(out, "*.json"))) < int(os.environ.get("EXPECT", "1")) and time.time() < deadline:
    time.sleep(0.02)
"""

# Runs once more each time: appends to $OUT_DIR/runs, then behaves per argv[1] and the run number.
FLAKY = """
import os, signal, sys, time
runs = os.path.join(os.environ["OUT_DIR"], "runs")
with open(runs, "a") as f:
    f.write("x")
n = len(open(runs).read())
mode = sys.argv[1]
print(f"run {n} mode {mode}", flush=True)
if mode == "exit1" or (mode == "fail-once" and n == 1):
    sys.exit(1)
if mode == "kill-always" or (mode == "kill-once" and n == 1):
    os.kill(os.getpid(), signal.SIGKILL)
"""

# Writes its pid to $OUT_DIR/pid-$POD_NAME; RANK 2 prints a few lines and exits 3 once all 3 have started.
FAILER = """
import glob, os, sys, time
out = os.environ["OUT_DIR"]
open(os.path.join(out, "pid-" + os.environ["POD_NAME"]), "w").write(str(os.getpid()))
if os.environ["RANK"] != "2":
    time.sleep(60)
while len(glob.glob(os.path.join(out, "pid-*"))) < 3:
    time.sleep(0.02)
for line in ("step 1", "step 2", "loss nan", "fatal: boom"):
    print(line, flush=True)
sys.exit(3)
"""

SLEEPER = """
import os, signal, sys, time
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(os.environ["OUT_DIR"], "pid-" + os.environ["POD_NAME"]), "w").write(str(os.getpid()))
while True:
    time.sleep(0.1)
"""

# Sleeps, with a grandchild; writes "pid grandchild_pid" to $OUT_DIR/$POD_NAME.pids.
SPAWNER = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
out = os.environ["OUT_DIR"]
tmp = os.path.join(out, os.environ["POD_NAME"] + ".tmp")
open(tmp, "w").write(f"{os.getpid()} {child.pid}")
os.rename(tmp, tmp[:-4] + ".pids")
time.sleep(60)
"""

DRIVER = """
import json, sys
from pathlib import Path
from kftrain.backends.local import LocalBackend, LocalConfig
from kftrain.job import load_manifest
from kftrain.signals import terminate_raises
job = load_manifest(json.loads(Path(sys.argv[1]).read_text()))
with terminate_raises():
    result = LocalBackend(LocalConfig(workdir=Path(sys.argv[2]), grace_period_s=2.0)).run(job)
sys.exit(0 if result.succeeded else 5)
"""


def _children() -> set[psutil.Process]:
    return set(psutil.Process().children(recursive=True))


@pytest.fixture(autouse=True)
def no_leftover_processes():
    # Only what the test started counts: session servers (the S3 server) outlive single tests.
    before = _children()
    yield
    left = sorted(_children() - before, key=lambda proc: proc.pid)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert left == [], f"processes left behind: {left}"


@pytest.fixture(autouse=True)
def clean_parent_env(monkeypatch):
    """Contract variables in the launching shell must never reach a replica."""
    for name, value in {
        "RANK": "99",
        "WORLD_SIZE": "99",
        "LOCAL_RANK": "5",
        "TF_CONFIG": '{"cluster":{}}',
        "MASTER_ADDR": "evil.example",
        "PET_NNODES": "42",
        "K_MPI_JOB_ROLE": "worker",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)


@pytest.fixture
def out_dir(tmp_path) -> Path:
    path = tmp_path / "out"
    path.mkdir()
    return path


def program(tmp_path: Path, name: str, source: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return [PY, str(path)]


def options(tmp_path: Path, **kw: Any) -> LocalConfig:
    defaults: dict[str, Any] = {
        "workdir": tmp_path / "wd",
        "out": io.StringIO(),
        "grace_period_s": 2.0,
        "poll_interval_s": 0.02,
        "restart_backoff_s": 0.05,
    }
    defaults.update(kw)
    return LocalConfig(**defaults)


def pod_env(out_dir: Path, expect: int = 1, *more: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "OUT_DIR", "value": str(out_dir)},
        {"name": "EXPECT", "value": str(expect)},
        *more,
    ]


def rep(n: int, cname: str, command: list[str] | None, env: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return replica(n, cname, command, env=env, **kw)


def dumps(out_dir: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(out_dir.glob("*.json"))}


def contract(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in CONTRACT_NAMES or k.startswith(("PET_", "TORCHELASTIC_"))}


def _interpreter_sets() -> set[str]:
    """Variables this Python sets in its own environment as it starts (the Horovod build's ``.pth`` sets
    ``TF_USE_LEGACY_KERAS``, as the framework images' ``ENV`` does): a replica's program sees them whatever it
    is given."""
    probe = "import json, os; print(json.dumps(sorted(os.environ)))"
    started = subprocess.run([sys.executable, "-c", probe], env={}, capture_output=True, text=True, check=True)
    return set(json.loads(started.stdout)) - {"LC_CTYPE"}


# What an image gives a clean-env replica before its spec's env (LocalConfig.clean_env).
IMAGE_BASE = (
    {"PATH", "HOME", "LANG", "HOSTNAME"}
    | {k for k in ("LC_ALL", "TMPDIR", "TZ") if k in os.environ}
    | _interpreter_sets()
)


def assert_only_declared(env: dict[str, str], pod: str, *declared: str) -> None:
    """A clean-env replica sees the image's base, what its spec declares, the contract, and nothing else."""
    assert set(env) - set(contract(env)) - IMAGE_BASE == set(declared), pod
    assert env["HOSTNAME"] == pod


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def read_pids(out_dir: Path) -> dict[str, int]:
    return {p.name[4:]: int(p.read_text()) for p in out_dir.glob("pid-*")}


def assert_ok(result: JobResult, opts: LocalConfig) -> None:
    assert result.succeeded, f"{result.describe()}\n{opts.out.getvalue()}"  # type: ignore[union-attr]


# --- the env contract, as the replicas see it ------------------------------------------------------


def test_pytorch_replicas_see_exactly_the_contract(tmp_path, out_dir):
    cmd = program(tmp_path, "dump", DUMP)
    env = pod_env(out_dir, 3, {"name": "RANK", "value": "7"})  # the operator's value is appended, so it wins
    m = pytorchjob({"Master": rep(1, "pytorch", cmd, env), "Worker": rep(2, "pytorch", cmd, env)}, name="pt")
    opts = options(tmp_path, extra_env={"EXTRA_SETTING": "on"}, clean_env=True)
    result = LocalBackend(opts).run(load_manifest(m))
    assert_ok(result, opts)
    seen = dumps(out_dir)
    assert sorted(seen) == ["pt-master-0", "pt-worker-0", "pt-worker-1"]
    for pod, dump in seen.items():
        assert_only_declared(dump["env"], pod, "POD_NAME", "OUT_DIR", "EXPECT", "EXTRA_SETTING")
    port = seen["pt-master-0"]["env"]["MASTER_PORT"]
    assert 1024 <= int(port) <= 65535
    for pod, rank in (("pt-master-0", "0"), ("pt-worker-0", "1"), ("pt-worker-1", "2")):
        assert contract(seen[pod]["env"]) == {
            "PYTHONUNBUFFERED": "1",  # training-operator v1.9.0 pkg/controller.v1/pytorch/envvar.go
            "MASTER_PORT": port,
            "PET_MASTER_PORT": port,
            "MASTER_ADDR": "localhost",
            "PET_MASTER_ADDR": "localhost",
            "WORLD_SIZE": "3",
            "RANK": rank,
            "PET_NPROC_PER_NODE": "auto",
            "PET_NODE_RANK": rank,
            "PET_NNODES": "3",
        }, pod
        assert seen[pod]["env"]["EXTRA_SETTING"] == "on"


def test_tf_replicas_see_exactly_the_contract(tmp_path, out_dir):
    cmd = program(tmp_path, "dump", DUMP)
    env = pod_env(out_dir, 3)
    m = tfjob({"Worker": rep(2, "tensorflow", cmd, env), "PS": rep(1, "tensorflow", cmd, env)}, name="tf")
    job = load_manifest(m)
    opts = options(tmp_path, clean_env=True)
    assert_ok(LocalBackend(opts).run(job), opts)
    seen = dumps(out_dir)
    assert sorted(seen) == ["tf-ps-0", "tf-worker-0", "tf-worker-1"]
    for pod, dump in seen.items():
        assert_only_declared(dump["env"], pod, "POD_NAME", "OUT_DIR", "EXPECT")
    cluster = json.loads(seen["tf-worker-0"]["env"]["TF_CONFIG"])["cluster"]
    assert list(cluster) == ["ps", "worker"]
    ports = {
        ReplicaId(rtype, i): int(addr.split(":")[1])
        for rtype in ("PS", "Worker")
        for i, addr in enumerate(cluster[rtype.lower()])
    }
    assert len(set(ports.values())) == 3
    assert all(addr.startswith("localhost:") for addrs in cluster.values() for addr in addrs)
    topology = Topology(ports=ports)
    for pod, rid in (
        ("tf-ps-0", ReplicaId("PS", 0)),
        ("tf-worker-0", ReplicaId("Worker", 0)),
        ("tf-worker-1", ReplicaId("Worker", 1)),
    ):
        assert contract(seen[pod]["env"]) == {"TF_CONFIG": tf_config(job, rid, topology)}, pod


def test_single_replica_tf_sees_no_contract(tmp_path, out_dir):
    cmd = program(tmp_path, "dump", DUMP)
    opts = options(tmp_path, clean_env=True)
    result = LocalBackend(opts).run(load_manifest(tfjob({"Worker": rep(1, "tensorflow", cmd, pod_env(out_dir))})))
    assert_ok(result, opts)
    assert contract(dumps(out_dir)["job-worker-0"]["env"]) == {}
    assert_only_declared(dumps(out_dir)["job-worker-0"]["env"], "job-worker-0", "POD_NAME", "OUT_DIR", "EXPECT")


@pytest.mark.parametrize(
    ("impl", "extra"),
    [
        (
            "OpenMPI",
            {
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                "OMPI_MCA_orte_set_default_slots": "2",
            },
        ),
        ("Intel", {"I_MPI_PERHOST": "2"}),
    ],
)
def test_mpi_launcher_sees_the_contract_and_hostfile(tmp_path, out_dir, impl, extra):
    cmd = program(tmp_path, "dump", DUMP)
    launcher = rep(1, "launcher", cmd, pod_env(out_dir))
    m = mpijob_v2(
        {"Launcher": launcher, "Worker": rep(2, "worker", None, [])},
        name="mj",
        slotsPerWorker=2,
        mpiImplementation=impl,
        runLauncherAsWorker=True,
    )
    opts = options(tmp_path, clean_env=True)
    assert_ok(LocalBackend(opts).run(load_manifest(m)), opts)
    seen = dumps(out_dir)
    assert list(seen) == ["mj-launcher-0"]  # workers only hold slots
    env = seen["mj-launcher-0"]["env"]
    # The operator's Intel MPI bootstrap flags, and what the local adaptation adds (as root, without ssh).
    local = {"I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"} if impl == "Intel" else set()
    local |= {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"} if os.geteuid() == 0 else set()
    local |= {"OMPI_MCA_plm_rsh_agent"} if "OMPI_MCA_plm_rsh_agent" in env else set()
    assert_only_declared(env, "mj-launcher-0", "POD_NAME", "OUT_DIR", "EXPECT", *local)
    hostfile = tmp_path / "wd" / "etc" / "mpi" / "hostfile"
    var = "OMPI_MCA_orte_default_hostfile" if impl == "OpenMPI" else "I_MPI_HYDRA_HOST_FILE"
    env = seen["mj-launcher-0"]["env"]
    assert contract(env) == {"K_MPI_JOB_ROLE": "launcher", var: str(hostfile), **extra}
    assert hostfile.read_text() == ("localhost slots=6\n" if impl == "OpenMPI" else "localhost:6\n")
    if os.geteuid() == 0:
        assert env["OMPI_ALLOW_RUN_AS_ROOT"] == env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"


# --- logs --------------------------------------------------------------------------------------------


def test_output_is_streamed_with_replica_prefixes(tmp_path):
    cmd = program(tmp_path, "talk", "import os\nprint('hello', os.environ['POD_NAME'])\nprint('bye')\n")
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    m = tfjob({"Worker": rep(2, "tensorflow", cmd, env)}, name="talk", successPolicy="AllWorkers")
    opts = options(tmp_path)
    assert_ok(LocalBackend(opts).run(load_manifest(m)), opts)
    lines = opts.out.getvalue().splitlines()  # type: ignore[union-attr]
    assert all(line.startswith(("[kftrain] ", "[worker-0] ", "[worker-1] ")) for line in lines), lines
    for i in (0, 1):
        own = [line for line in lines if line.startswith(f"[worker-{i}] ")]
        assert own == [f"[worker-{i}] hello talk-worker-{i}", f"[worker-{i}] bye"]
        log = tmp_path / "wd" / "logs" / f"worker-{i}.log"
        assert log.read_text() == f"hello talk-worker-{i}\nbye\n"
    assert lines[0].startswith("[kftrain] starting TFJob talk: worker-0, worker-1")


# --- failures and restart policies -------------------------------------------------------------------


def test_failing_replica_fails_the_job_and_stops_the_others(tmp_path, out_dir):
    cmd = program(tmp_path, "failer", FAILER)
    env = pod_env(out_dir)
    m = pytorchjob(
        {
            "Master": rep(1, "pytorch", cmd, env, restart_policy="Never"),
            "Worker": rep(2, "pytorch", cmd, env, restart_policy="Never"),
        },
        name="fj",
    )
    opts = options(tmp_path, log_tail_lines=3)
    started = time.monotonic()
    result = LocalBackend(opts).run(load_manifest(m))
    assert time.monotonic() - started < 10
    assert result.phase is JobPhase.FAILED
    assert result.reason == "ReplicaFailed"
    assert result.exit_code == 3
    assert result.failed_replica == "worker-1"
    assert result.log_tail == ["step 2", "loss nan", "fatal: boom"]
    text = result.describe()
    assert text.startswith("job Failed (ReplicaFailed): worker-1 exited with code 3")
    assert "last 3 log lines of worker-1:\n  step 2\n  loss nan\n  fatal: boom" in text
    pids = read_pids(out_dir)
    assert sorted(pids) == ["fj-master-0", "fj-worker-0", "fj-worker-1"]
    assert [pod for pod, pid in pids.items() if alive(pid)] == []


def test_on_failure_restarts_then_succeeds(tmp_path, out_dir):
    cmd = program(tmp_path, "flaky", FLAKY)
    m = pytorchjob({"Master": rep(1, "pytorch", [*cmd, "fail-once"], pod_env(out_dir), restart_policy="OnFailure")})
    opts = options(tmp_path)
    result = LocalBackend(opts).run(load_manifest(m))
    assert_ok(result, opts)
    assert (out_dir / "runs").read_text() == "xx"
    assert "master-0 exited with code 1; restartPolicy OnFailure: restart 1 in" in opts.out.getvalue()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("policy", "mode", "backoff", "phase", "reason", "exit_code", "runs"),
    [
        ("ExitCode", "exit1", 3, JobPhase.FAILED, "ReplicaFailed", 1, 1),
        ("ExitCode", "kill-once", 3, JobPhase.SUCCEEDED, "Succeeded", 0, 2),
        ("ExitCode", "kill-always", 1, JobPhase.FAILED, "BackoffLimitExceeded", 137, 2),
        ("OnFailure", "exit1", 2, JobPhase.FAILED, "BackoffLimitExceeded", 1, 3),
        ("OnFailure", "exit1", 0, JobPhase.FAILED, "BackoffLimitExceeded", 1, 1),
        ("Never", "kill-once", 3, JobPhase.FAILED, "ReplicaFailed", 137, 1),
        ("Always", "fail-once", 3, JobPhase.SUCCEEDED, "Succeeded", 0, 2),
    ],
)
def test_restart_policies(tmp_path, out_dir, policy, mode, backoff, phase, reason, exit_code, runs):
    cmd = program(tmp_path, "flaky", FLAKY)
    master = rep(1, "pytorch", [*cmd, mode], pod_env(out_dir), restart_policy=policy)
    m = pytorchjob({"Master": master}, runPolicy={"backoffLimit": backoff})
    opts = options(tmp_path)
    result = LocalBackend(opts).run(load_manifest(m))
    assert (result.phase, result.reason, result.exit_code) == (phase, reason, exit_code), result.describe()
    assert len((out_dir / "runs").read_text()) == runs
    if phase is JobPhase.FAILED:
        assert result.failed_replica == "master-0"
        assert result.log_tail[-1] == f"run {runs} mode {mode}"
    if reason == "BackoffLimitExceeded":
        assert f"backoffLimit is {backoff}" in result.message


# --- deadlines -------------------------------------------------------------------------------------


def test_active_deadline_stops_the_job(tmp_path, out_dir):
    cmd = program(tmp_path, "sleeper", SLEEPER)
    m = tfjob({"Worker": rep(2, "tensorflow", cmd, pod_env(out_dir))}, runPolicy={"activeDeadlineSeconds": 1})
    opts = options(tmp_path)
    result = LocalBackend(opts).run(load_manifest(m))
    assert (result.phase, result.reason) == (JobPhase.FAILED, "DeadlineExceeded")
    assert 1.0 <= result.duration_s < 5.0
    pids = read_pids(out_dir)
    assert len(pids) == 2
    assert not any(alive(p) for p in pids.values())


def test_timeout_stops_the_job(tmp_path, out_dir):
    cmd = program(tmp_path, "sleeper", SLEEPER)
    m = tfjob({"Worker": rep(1, "tensorflow", cmd, pod_env(out_dir))}, runPolicy={"activeDeadlineSeconds": 30})
    opts = options(tmp_path)
    result = LocalBackend(opts).run(load_manifest(m), timeout=0.5)
    assert (result.phase, result.reason) == (JobPhase.FAILED, "Timeout")
    assert result.duration_s < 4.0
    assert not any(alive(p) for p in read_pids(out_dir).values())


def test_chief_success_stops_a_never_ending_ps(tmp_path, out_dir):
    sleeper = program(tmp_path, "sleeper", SLEEPER)
    chief = program(
        tmp_path,
        "chief",
        "import glob, os, time\n"
        "while not glob.glob(os.path.join(os.environ['OUT_DIR'], 'pid-*')):\n    time.sleep(0.02)\n",
    )
    env = pod_env(out_dir)
    m = tfjob({"Chief": rep(1, "tensorflow", chief, env), "PS": rep(1, "tensorflow", [*sleeper, "--ignore-term"], env)})
    opts = options(tmp_path, grace_period_s=0.3)  # the PS ignores SIGTERM: it must be killed after the grace period
    result = LocalBackend(opts).run(load_manifest(m))
    assert_ok(result, opts)
    assert result.duration_s < 5.0
    assert not alive(read_pids(out_dir)["job-ps-0"])


# --- what a replica runs -------------------------------------------------------------------------------


def test_k8s_variable_expansion_in_args_and_env(tmp_path, out_dir):
    cmd = program(tmp_path, "dump", DUMP)
    env = pod_env(
        out_dir,
        1,
        {"name": "BASE", "value": "/data"},
        {"name": "SUB", "value": "$(BASE)/sub"},
        {"name": "ESC", "value": "$$(BASE)"},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    )
    args = ["--rank=$(RANK)", "--world=$(WORLD_SIZE)", "--lit=$$(RANK)", "--missing=$(NOPE_UNSET_VAR)", "--s=$(SUB)"]
    m = pytorchjob({"Master": rep(1, "pytorch", cmd, env, args=args)}, name="ex")
    opts = options(tmp_path)
    assert_ok(LocalBackend(opts).run(load_manifest(m)), opts)
    seen = dumps(out_dir)["ex-master-0"]
    assert seen["argv"] == ["--rank=0", "--world=1", "--lit=$(RANK)", "--missing=$(NOPE_UNSET_VAR)", "--s=/data/sub"]
    assert {k: seen["env"][k] for k in ("SUB", "ESC", "POD_NS")} == {
        "SUB": "/data/sub",
        "ESC": "$(BASE)",
        "POD_NS": "default",
    }


def secret_job(out_dir: Path, cmd: list[str]) -> dict[str, Any]:
    ref = {"name": "KFTRAIN_TEST_TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}
    return pytorchjob({"Master": rep(1, "pytorch", cmd, pod_env(out_dir, 1, ref))}, name="sec")


def test_secret_key_ref_resolved_from_environment(tmp_path, out_dir, monkeypatch):
    monkeypatch.setenv("KFTRAIN_TEST_TOKEN", "s3cr3t")
    opts = options(tmp_path)
    assert_ok(LocalBackend(opts).run(load_manifest(secret_job(out_dir, program(tmp_path, "dump", DUMP)))), opts)
    assert dumps(out_dir)["sec-master-0"]["env"]["KFTRAIN_TEST_TOKEN"] == "s3cr3t"
    assert "s3cr3t" not in opts.out.getvalue()  # type: ignore[union-attr]


def test_secret_key_ref_missing_is_a_clear_error(tmp_path, out_dir, monkeypatch):
    monkeypatch.delenv("KFTRAIN_TEST_TOKEN", raising=False)
    with pytest.raises(JobSpecError) as exc:
        LocalBackend(options(tmp_path)).submit(load_manifest(secret_job(out_dir, program(tmp_path, "dump", DUMP))))
    assert exc.value.field == "spec.pytorchReplicaSpecs.Master.template.spec.containers.env[KFTRAIN_TEST_TOKEN]"
    assert "secretKeyRef" in exc.value.message
    assert "export KFTRAIN_TEST_TOKEN" in exc.value.message


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["python t.py"], {ALL_REPLICA_TYPES: ["python", "t.py"]}),
        (["Worker=python w.py --x 1"], {"Worker": ["python", "w.py", "--x", "1"]}),
        (["PS=python ps.py", "python all.py"], {"PS": ["python", "ps.py"], "*": ["python", "all.py"]}),
        (["python -c 'a=1; print(a)'"], {"*": ["python", "-c", "a=1; print(a)"]}),
        (["--opt=1 run"], {"*": ["--opt=1", "run"]}),
        (["Worker='python' \"w x.py\""], {"Worker": ["python", "w x.py"]}),
        (["Chief=a", "Chief=b"], {"Chief": ["b"]}),
        ([], {}),
    ],
)
def test_parse_command_overrides(values, expected):
    assert parse_command_overrides(values) == expected


def test_command_overrides_per_type_and_default(tmp_path, out_dir):
    dump = program(tmp_path, "dump", DUMP)
    env = pod_env(out_dir, 2)
    m = tfjob({"Chief": rep(1, "tensorflow", None, env), "Worker": rep(1, "tensorflow", None, env)}, name="ov")
    commands = parse_command_overrides([shlex.join([*dump, "--default"]), "Worker=" + shlex.join([*dump, "--worker"])])
    opts = options(tmp_path, commands=commands)
    assert_ok(LocalBackend(opts).run(load_manifest(m)), opts)
    seen = dumps(out_dir)
    assert {pod: d["argv"] for pod, d in seen.items()} == {"ov-chief-0": ["--default"], "ov-worker-0": ["--worker"]}


@pytest.mark.parametrize(
    ("worker_command", "fragment"),
    [
        (None, "missing: locally the image's entrypoint is not available"),
        (["kftrain-no-such-program-xyz"], "not found on PATH"),
    ],
)
def test_bad_command_fails_before_any_process_starts(tmp_path, out_dir, worker_command, fragment):
    before = _children()
    marker = out_dir / "chief-started"
    chief = [PY, "-c", f"open({str(marker)!r}, 'w').close()"]
    m = tfjob({"Chief": rep(1, "tensorflow", chief, []), "Worker": rep(1, "tensorflow", worker_command, [])})
    with pytest.raises(JobSpecError) as exc:
        LocalBackend(options(tmp_path)).submit(load_manifest(m))
    assert exc.value.field == "spec.tfReplicaSpecs.Worker.template.spec.containers[tensorflow].command"
    assert fragment in exc.value.message
    assert _children() - before == set()
    time.sleep(0.2)
    assert not marker.exists()


def test_rejected_submit_leaves_no_temp_workdir(tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    m = tfjob({"Worker": rep(1, "tensorflow", None, [])})
    with pytest.raises(JobSpecError):
        LocalBackend(options(tmp_path, workdir=None)).submit(load_manifest(m))
    assert list(temp.iterdir()) == []


def test_suspended_job_is_not_started(tmp_path):
    m = tfjob({"Worker": rep(1, "tensorflow", [PY, "-c", "pass"], [])}, runPolicy={"suspend": True})
    with pytest.raises(JobSpecError) as exc:
        LocalBackend(options(tmp_path)).submit(load_manifest(m))
    assert exc.value.field == "spec.runPolicy.suspend"


def test_owned_workdir_removed_on_success(tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    m = tfjob({"Worker": rep(1, "tensorflow", [PY, "-c", "print('ok')"], [])})
    opts = options(tmp_path, workdir=None)
    assert_ok(LocalBackend(opts).run(load_manifest(m)), opts)
    assert list(temp.iterdir()) == []


# --- SIGTERM: a cancelled step stops everything it started ---------------------------------------------


def test_sigterm_stops_every_replica_and_grandchild(tmp_path, out_dir):
    cmd = program(tmp_path, "spawner", SPAWNER)
    m = tfjob({"Worker": rep(2, "tensorflow", cmd, pod_env(out_dir))}, name="term")
    manifest_path = tmp_path / "job.json"
    manifest_path.write_text(json.dumps(m))
    driver = program(tmp_path, "driver", DRIVER)
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([*driver, str(manifest_path), str(tmp_path / "wd")], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while len(list(out_dir.glob("*.pids"))) < 2:
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "replicas did not start: " + log_path.read_text()
            time.sleep(0.05)
        pids = [int(p) for f in out_dir.glob("*.pids") for p in f.read_text().split()]
        assert len(pids) == 4 and all(alive(p) for p in pids)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0, log_path.read_text()
    deadline = time.monotonic() + 2
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if alive(p)] == [], log_path.read_text()
    assert "Terminated" in log_path.read_text()


def test_a_crash_loop_stopped_by_the_deadline_reports_the_replicas_exit_code(tmp_path, out_dir):
    # No backoffLimit: the worker restarts until the deadline ends the job; the verdict must still name it.
    cmd = program(tmp_path, "crasher", 'import sys\nprint("cuda error: out of memory", flush=True)\nsys.exit(7)\n')
    m = tfjob(
        {"Worker": rep(1, "tensorflow", cmd, pod_env(out_dir), restart_policy="OnFailure")},
        runPolicy={"activeDeadlineSeconds": 2},
    )
    result = LocalBackend(options(tmp_path, max_restart_backoff_s=0.1)).run(load_manifest(m))
    assert (result.phase, result.reason) == (JobPhase.FAILED, "DeadlineExceeded")
    assert (result.exit_code, result.failed_replica) == (7, "worker-0")
    assert "worker-0 was crash-looping: it last exited with code 7 after" in result.message
    assert "cuda error: out of memory" in result.describe()


def test_a_job_stopped_by_its_timeout_without_failures_blames_no_replica(tmp_path, out_dir):
    cmd = program(tmp_path, "sleeper", SLEEPER)
    result = LocalBackend(options(tmp_path)).run(
        load_manifest(tfjob({"Worker": rep(1, "tensorflow", cmd, pod_env(out_dir))})), timeout=0.5
    )
    assert (result.reason, result.failed_replica, result.exit_code) == ("Timeout", None, 0)
