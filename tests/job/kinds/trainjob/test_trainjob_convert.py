"""``kftrain convert``: a PyTorchJob or MPIJob as the Trainer v2 TrainJob it becomes, and what it leaves behind."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml

from kftrain.cli.app import main
from kftrain.errors import JobSpecError
from kftrain.job import kind_of, load_manifest, render_manifest
from kftrain.job.kinds.trainjob.convert import PATCH_MANAGER
from testbed.launch_harness import GLOO_PROGRAM
from testbed.manifests import container, mpijob_v2, pytorchjob, replica
from testbed.needs import require
from testbed.reference import REPO


def to_trainjob(job, runtime=None):
    return kind_of(job).to_trainjob(job, runtime)


def _pytorchjob(**pod: Any) -> dict[str, Any]:
    main = container(
        "pytorch",
        ["python", "train.py"],
        env=[{"name": "LR", "value": "0.1"}, {"name": "PET_NNODES", "value": "9"}],
        resources={"limits": {"cpu": "2"}},
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
    )
    template = {"spec": {"containers": [main], **pod}}
    return pytorchjob(
        {"Master": {"replicas": 1, "template": template}, "Worker": {"replicas": 2, "template": template}},
        name="ddp",
        nprocPerNode="auto",
    )


def test_pytorchjob_becomes_a_torch_trainjob_with_its_pod_settings_as_a_runtime_patch(crd_schemas):
    manifest = _pytorchjob(
        nodeSelector={"pool": "gpu"},
        tolerations=[{"key": "gpu", "operator": "Exists"}],
        serviceAccountName="trainer",
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
        priorityClassName="high",
    )
    conversion = to_trainjob(load_manifest(manifest))
    spec = conversion.manifest["spec"]
    assert spec["runtimeRef"] == {"name": "torch-distributed"}
    trainer = spec["trainer"]
    assert trainer["numNodes"] == 3  # Master + 2 Workers
    assert trainer["command"] == ["torchrun", "--no-python", "python", "train.py"]
    assert trainer["env"] == [{"name": "LR", "value": "0.1"}]  # PET_NNODES is the runtime's
    assert trainer["resourcesPerNode"] == {"limits": {"cpu": "2"}}
    (patch,) = spec["runtimePatches"]
    assert patch["manager"] == PATCH_MANAGER
    pod = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu"} and pod["serviceAccountName"] == "trainer"
    assert pod["containers"] == [{"name": "node", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]
    notes = "\n".join(conversion.notes)
    for fragment in ("torchrun --no-python", "PET_NNODES: dropped", "nprocPerNode 'auto'", "priorityClassName"):
        assert fragment in notes
    job = load_manifest(conversion.manifest)  # loads on its runtime: the patch names the runtime's job
    assert job.replica_specs["node"].template.spec.node_selector == {"pool": "gpu"}
    crd_schemas.validate(render_manifest(job))


def test_mpijob_becomes_an_mpi_trainjob_with_its_hosts_and_slots(crd_schemas):
    manifest = mpijob_v2(
        {"Launcher": replica(1, "mpi", command=["mpirun", "-n", "6", "python", "h.py"]), "Worker": replica(3, "mpi")},
        name="hvd",
        slotsPerWorker=2,
    )
    conversion = to_trainjob(load_manifest(manifest))
    trainer = conversion.manifest["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 2)
    assert trainer["command"] == ["mpirun", "-n", "6", "python", "h.py"]  # mpirun sets up its ranks itself
    assert conversion.manifest["spec"]["runtimeRef"] == {"name": "deepspeed-distributed"}
    assert any("Worker pods" in n for n in conversion.notes)
    job = load_manifest(conversion.manifest)
    # numNodes 3 with the launcher as a node: the launcher + 2 node pods, 2 slots each = the MPIJob's 6 slots.
    assert job.replica_specs["node"].count == 2
    crd_schemas.validate(render_manifest(job))


def test_what_cannot_become_a_trainjob_is_refused():
    intel = mpijob_v2({"Launcher": replica(1, "mpi", command=["mpirun"]), "Worker": replica(1, "mpi")})
    intel["spec"]["mpiImplementation"] = "Intel"
    with pytest.raises(JobSpecError, match="OpenMPI only"):
        to_trainjob(load_manifest(intel))


def _pytorchjob_file() -> dict[str, Any]:
    return pytorchjob({"Master": replica(1, command=["python", "t.py"]), "Worker": replica(1)}, name="p")


def _mpijob_file() -> dict[str, Any]:
    return mpijob_v2({"Launcher": replica(1, "mpi", command=["mpirun", "python", "h.py"]), "Worker": replica(2, "mpi")})


# Each job, and the ML policy of the runtime it is converted for.
JOBS = {"PyTorchJob": (_pytorchjob_file, "torch"), "MPIJob": (_mpijob_file, "mpi")}
# By the job's kind: each --runtime given (None: the kind's default), and the runtime's own ML policy where the
# conversion is refused for it (in one error line), else "" (converted).
RUNTIMES = {
    "PyTorchJob": {None: "", "torch-distributed": "", "deepspeed-distributed": "mpi", "mlx-distributed": "mpi",
                   "jax-distributed": "jax"},
    "MPIJob": {None: "", "mlx-distributed": "", "torch-distributed": "torch", "xgboost-distributed": "xgboost"},
}  # fmt: skip
RUNTIME_CASES = [(kind, runtime, policy) for kind, runtimes in RUNTIMES.items() for runtime, policy in runtimes.items()]


@pytest.mark.parametrize(("kind", "runtime", "policy"), RUNTIME_CASES)
def test_a_job_converted_onto_a_runtime_of_another_ml_policy_is_refused(
    kind, runtime, policy, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("KFTRAIN_TRAINER_RUNTIMES", raising=False)
    make, wanted = JOBS[kind]
    source = tmp_path / "job.yaml"
    source.write_text(yaml.safe_dump(make()))
    code = main(["convert", "-f", str(source), *(["--runtime", runtime] if runtime else [])])
    out, err = capsys.readouterr()
    if policy:
        assert (code, out) == (2, "")
        assert err == (
            f"kftrain: error: --runtime: ClusterTrainingRuntime {runtime!r} (built-in {runtime} (Trainer v2.3.0)) has "
            f"a {policy} ML policy; the job was converted for a {wanted} runtime: name one with mlPolicy.{wanted}\n"
        )
    else:
        assert code == 0, err
        assert yaml.safe_load(out)["spec"]["runtimeRef"]["name"] == runtime or runtime is None


def test_a_converted_pytorchjob_runs_locally_with_real_gloo(tmp_path):
    require("torch")
    program = GLOO_PROGRAM.replace("os.environ['GROUP_RANK']", "os.environ['RANK']")
    manifest = pytorchjob(
        {
            "Master": replica(1, command=["python", "-c", program]),
            "Worker": replica(2, command=["python", "-c", program]),
        },
        name="converted",
    )
    source = tmp_path / "pytorchjob.yaml"
    source.write_text(yaml.safe_dump(manifest))
    cli = [sys.executable, "-m", "kftrain.cli"]
    converted = subprocess.run([*cli, "convert", "-f", str(source)], capture_output=True, text=True, cwd=REPO)
    assert converted.returncode == 0, converted.stderr
    assert "[kftrain convert] command: started through `torchrun --no-python`" in converted.stderr
    target = tmp_path / "trainjob.yaml"
    target.write_text(converted.stdout)
    run = subprocess.run(
        [*cli, "launch", "-f", str(target), "--local", "--timeout", "150"],
        capture_output=True,
        text=True,
        timeout=200,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for rank in range(3):
        assert f"rank {rank} of 3 node {rank} sum 6" in run.stdout
