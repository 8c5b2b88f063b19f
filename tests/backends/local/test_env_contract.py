"""What a replica of the local backend sees: exactly the operator's env contract for its kind (TF_CONFIG, the
PyTorch and MPI variables, the MPI hostfile), Kubernetes' $(VAR) expansion, secrets from the environment, and with
--clean-env nothing of the launching shell."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kftrain.backends.local import LocalBackend
from kftrain.errors import JobSpecError
from kftrain.job import load_manifest
from kftrain.job.kinds.tfjob.kind import tf_config
from kftrain.job.topology import ReplicaId, Topology
from testbed.local_harness import (
    DUMP,
    assert_ok,
    assert_only_declared,
    contract,
    dumps,
    finish,
    launch_cli,
    marked_job,
    options,
    pod_env,
    program,
    rep,
)
from testbed.manifests import mpijob_v2, pytorchjob, tfjob

pytestmark = pytest.mark.usefixtures("no_leftover_processes", "clean_parent_env")


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
    # HOSTNAME is the launcher pod's hostname, mj-launcher, not its replica's label (kftrain.job.kinds, pod_hostname)
    assert_only_declared(env, "mj-launcher", "POD_NAME", "OUT_DIR", "EXPECT", *local)
    hostfile = tmp_path / "wd" / "etc" / "mpi" / "hostfile"
    var = "OMPI_MCA_orte_default_hostfile" if impl == "OpenMPI" else "I_MPI_HYDRA_HOST_FILE"
    env = seen["mj-launcher-0"]["env"]
    assert contract(env) == {"K_MPI_JOB_ROLE": "launcher", var: str(hostfile), **extra}
    assert hostfile.read_text() == ("localhost slots=6\n" if impl == "OpenMPI" else "localhost:6\n")
    if os.geteuid() == 0:
        assert env["OMPI_ALLOW_RUN_AS_ROOT"] == env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"


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


def test_clean_env_runs_with_only_declared_variables(tmp_path: Path, mark: str, monkeypatch) -> None:
    """--clean-env: a variable of the launching shell does not reach the replica; a declared one does."""
    monkeypatch.setenv("UNDECLARED_SECRET", "from-the-shell")
    source = """
    import os, sys
    print("seen", os.environ.get("UNDECLARED_SECRET"), os.environ.get("OUT") is not None, flush=True)
    """
    job = marked_job(tmp_path, mark, source, workers=0)
    for flags, seen in (([], "from-the-shell"), (["--clean-env"], "None")):
        code = finish(launch_cli(job, tmp_path, *flags), 60)
        log = (tmp_path / "kftrain.log").read_text()
        assert code == 0, log
        assert f"[master-0] seen {seen} True" in log, log
    assert os.environ["UNDECLARED_SECRET"] == "from-the-shell"
