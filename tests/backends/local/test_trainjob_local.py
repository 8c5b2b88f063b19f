"""Kubeflow Trainer v2.3.0's examples and runtimes, run locally by ``kftrain launch --local`` with every node joining.

The manifests in trainer_data/examples (beside this file) are of the shapes of Trainer's ``examples/yaml/01``-``05``
(their README says how they differ); the programs in trainer_data are ours, written to what Trainer's examples and
guides do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain.cli.app import main
from testbed.launch_harness import REPO
from testbed.needs import require
from testbed.s3_server import boto3_client

DATA = Path(__file__).parent / "trainer_data"
EXAMPLES = DATA / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("0*.yaml"))
CRDS = REPO.parent / "shared" / "reference" / "crds"


def _run(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``kftrain launch -f PATH --local`` as a user runs it, from the repository."""
    command = [sys.executable, "-m", "kftrain.cli", "launch", "-f", str(path), "--local", "--timeout", "150", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=220, cwd=REPO)


def _launch(path: Path, tmp_path: Path, *extra: str) -> str:
    proc = _run(path, *extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


@pytest.fixture(autouse=True)
def _no_extra_runtimes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFTRAIN_TRAINER_RUNTIMES", raising=False)


# --- validate ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.name for p in EXAMPLE_FILES])
def test_each_example_validates_with_the_runtimes_beside_it(path, capsys):
    if not CRDS.is_dir():
        pytest.skip(f"reference data not available: {CRDS}")
    assert main(["validate", "-f", str(path), "--crd-dir", str(CRDS)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == f"{path}: valid TrainJob (trainer.kubeflow.org/v1alpha1)"
    runtimes = [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] != "TrainJob"]
    for doc in runtimes:
        assert f"valid {doc['kind']} {doc['metadata']['name']}" in out


def test_the_dry_run_prints_the_runtime_then_the_job(capsys):
    assert main(["launch", "-f", str(EXAMPLES / "04-volcano-integration.yaml"), "--dry-run"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ClusterTrainingRuntime", "TrainJob"]


def test_a_dataset_initializer_without_the_initializer_volume_is_refused_as_the_webhook_does(tmp_path, capsys):
    """Trainer v2.3.0's own 05-multi-step.yaml mounts no volume in its initializer: its webhook refuses the TrainJob
    (pkg/runtime/framework/plugins/jobset/jobset.go:119-138)."""
    docs = list(yaml.safe_load_all((EXAMPLES / "05-multi-step.yaml").read_text()))
    del docs[0]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][
        0
    ]["volumeMounts"]
    path = tmp_path / "05.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    assert main(["validate", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert "spec.runtimeRef: must have volumeMount with name - initializer in container dataset-initializer" in err


# --- run locally --------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["01-multi-node.yaml", "02-runtime-patches.yaml"])
def test_torchrun_examples_join_every_node(name, tmp_path):
    require("torch")
    out = _launch(EXAMPLES / name, tmp_path)
    # 01: 3 nodes x 1 process (no CPUs requested: auto = 1); 02: 2 nodes x 1 (CPU request 1, torch.go:121-135).
    size = 3 if name.startswith("01") else 2
    for rank in range(size):
        assert f"WORLD_SIZE {size} RANK {rank}" in out
    if name.startswith("02"):
        assert out.count("CUSTOM_VAR custom-value") == 2


def test_a_suspended_job_is_refused_in_one_line_and_runs_with_admit(tmp_path):
    path = EXAMPLES / "03-kueue-integration.yaml"
    refused = _run(path)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "kftrain: error: spec.suspend: is true: the operator would not start any replica until a queue (Kueue) "
        "admits the job; kftrain launch --admit runs it here as if admitted"
    )
    out = _launch(path, tmp_path, "--admit")
    assert "spec.suspend is true: running kueue-example as if admitted (--admit)" in out
    for rank in range(3):
        assert f"node {rank} of 3 admitted" in out


def test_a_cluster_runtime_in_the_file_runs_the_job_beside_it(tmp_path):
    out = _launch(EXAMPLES / "04-volcano-integration.yaml", tmp_path)
    for rank in range(4):
        assert f"Node {rank}/4 started together" in out


def test_the_dataset_initializer_runs_first_and_every_node_reads_workspace_dataset(s3_env, tmp_path):
    bucket = s3_env.removeprefix("s3://")
    client = boto3_client(os.environ["AWS_ENDPOINT_URL"])
    for key in ("alpaca/train.jsonl", "alpaca/part/test.jsonl", "alpaca/README.md"):
        client.put_object(Bucket=bucket, Key=key, Body=b"{}\n")
    text = (EXAMPLES / "05-multi-step.yaml").read_text().replace("BUCKET", bucket)
    path = tmp_path / "05.yaml"
    path.write_text(text)
    out = _launch(path, tmp_path, "--workdir", str(tmp_path / "work"))
    assert out.index("dataset initializer: 3 file(s)") < out.index("starting the job's nodes")
    assert out.count("Dataset ready at /workspace/dataset (3 entries: ['README.md', 'part', 'train.jsonl'])") == 2
    assert (tmp_path / "work" / "workspace" / "dataset" / "part" / "test.jsonl").is_file()


def test_a_failure_policy_restart_runs_the_initializer_again(s3_env, tmp_path):
    """JobSet's RestartJobSet recreates every Job, the initializer's too, and the nodes wait for it again
    (kftrain.backends.local.backend.LocalBackend._restart_all)."""
    bucket = s3_env.removeprefix("s3://")
    client = boto3_client(os.environ["AWS_ENDPOINT_URL"])
    client.put_object(Bucket=bucket, Key="alpaca/train.jsonl", Body=b"{}\n")
    runtime, job = yaml.safe_load_all((EXAMPLES / "05-multi-step.yaml").read_text().replace("BUCKET", bucket))
    template = runtime["spec"]["template"]["spec"]
    template["failurePolicy"] = {"maxRestarts": 1}
    node = template["replicatedJobs"][1]["template"]["spec"]
    node["backoffLimit"] = 0
    node["template"]["spec"]["restartPolicy"] = "Never"
    marker = tmp_path / "failed-once"
    job["spec"]["trainer"]["command"] = [
        sys.executable,
        "-c",
        f"import os, sys\nif os.environ['PET_NODE_RANK'] == '0' and not os.path.exists({str(marker)!r}):\n"
        f"    open({str(marker)!r}, 'w').close(); print('node 0 fails'); sys.exit(3)\n"
        "print('ready', sorted(os.listdir('/workspace/dataset')))",
    ]
    path = tmp_path / "05-restarting.yaml"
    path.write_text(yaml.safe_dump_all([runtime, job]))
    out = _launch(path, tmp_path)
    assert out.count("dataset initializer: 1 file(s)") == 2, out
    assert "failurePolicy (RestartJobSet: no rule matched): restarting the whole job (restart 1)" in out
    assert out.index("restarting the whole job") < out.rindex("starting the job's nodes")
    assert "ready ['train.jsonl']" in out


def test_hf_storage_uri_says_there_is_no_network(tmp_path, monkeypatch):
    from kftrain.programs.initializer import InitializerError, initialize

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    env = {
        "STORAGE_URI": "hf://tatsu-lab/alpaca",
        "KFTRAIN_WORKSPACE": str(tmp_path),
        "HF_ENDPOINT": "http://127.0.0.1:9",
    }
    with pytest.raises(InitializerError, match=r"cannot reach the Hugging Face Hub at http://127.0.0.1:9 .*no network"):
        initialize("dataset", env)


def test_without_a_private_workspace_one_line_says_where_it_is(tmp_path):
    from kftrain.backends.local import LocalBackend, LocalConfig
    from kftrain.job import load_manifest

    job = load_manifest(_trainjob("import os; print('ws', os.environ['KFTRAIN_WORKSPACE'])"))
    out = tmp_path / "out.txt"
    with out.open("w") as stream:
        config = LocalConfig(workdir=tmp_path / "w", private_workspace=False, out=stream)
        assert LocalBackend(config).run(job, timeout=60).succeeded
    lines = [line for line in out.read_text().splitlines() if "no private /workspace" in line]
    assert lines == [
        f"[kftrain] no private /workspace for the replicas here (LocalConfig.private_workspace is False): the job's "
        f"/workspace is {tmp_path / 'w' / 'workspace'}; a program that reads /workspace/dataset as Trainer documents "
        "must read $KFTRAIN_WORKSPACE/dataset here"
    ]
    assert f"ws {tmp_path / 'w' / 'workspace'}" in out.read_text()


def _trainjob(program: str, runtime: str = "torch-distributed", nodes: int = 1, **trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t"},
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {"numNodes": nodes, "command": [sys.executable, "-c", program], **trainer},
        },
    }


def test_a_program_posting_to_the_trainer_status_server_shows_its_progress(tmp_path):
    model = tmp_path / "model"
    job = _trainjob("", env=[{"name": "KFTRAIN_MODEL_URI", "value": str(model)}])
    job["spec"]["trainer"]["command"] = ["python3", str(DATA / "report_status.py")]
    path = tmp_path / "status.yaml"
    path.write_text(yaml.safe_dump(job))
    out = _launch(path, tmp_path)
    assert "epoch 1 posted: 200" in out and "epoch 2 posted: 200" in out
    assert "a wrong token: 403" in out  # pkg/statusserver/server.go:142-144
    assert "no lastUpdatedTime: 422" in out  # trainjob_types.go:562, applied by the API server
    assert "[kftrain] progress: 50% epoch 1 loss 0.25 | eta 1m00s (trainer status)" in out
    assert "[kftrain] progress: 100% epoch 2 loss 0.125 | eta 0s (trainer status)" in out
    assert not list(tmp_path.glob("**/server.key"))  # the server's key never stays on disk


@pytest.mark.slow
def test_the_xgboost_example_trains_on_two_nodes_in_one_collective(tmp_path):
    require("xgboost")
    require("sklearn")
    job = _trainjob("", runtime="xgboost-distributed", nodes=2)
    job["spec"]["trainer"]["command"] = ["python3", str(DATA / "xgboost_train.py")]
    path = tmp_path / "xgb.yaml"
    path.write_text(yaml.safe_dump(job))
    out = _launch(path, tmp_path, "--workdir", str(tmp_path / "work"))
    assert "worker 0 of 2 connected" in out and "worker 1 of 2 connected" in out
    saved = json.loads((tmp_path / "work" / "workspace" / "xgboost_model.json").read_text())
    assert saved["learner"]["gradient_booster"]["model"]["trees"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "joined"),
    [
        # As Trainer's JAX guide initializes (v2.3.0:docs/user-guides/jax.md): the plugin's count and id passed.
        ([], True),
        # With no arguments JAX takes the count and id only from a cluster it detects; on Kubernetes it reads its pod
        # and Job through the API (jax 0.10.2: jax/_src/clusters/k8s_cluster.py), which needs the kubernetes
        # package and a service account allowed to read them: Trainer's jax-distributed runtime names none
        # (v2.3.0:manifests/base/runtimes/jax_distributed.yaml). Locally, as there, JAX's own error ends the job.
        (["bare"], False),
    ],
    ids=["as-trainer-guide", "bare-initialize"],
)
def test_a_jax_program_joins_two_processes(tmp_path, args, joined):
    require("jax")
    job = _trainjob("", runtime="jax-distributed", nodes=2)
    job["spec"]["trainer"]["command"] = ["python3", str(DATA / "jax_join.py"), *args]
    path = tmp_path / "jax.yaml"
    path.write_text(yaml.safe_dump(job))
    if joined:
        out = _launch(path, tmp_path)
        assert "process 0 of 2 sum 3" in out and "process 1 of 2 sum 3" in out
    else:
        proc = _run(path)
        assert proc.returncode != 0 and "Number of processes must be defined" in proc.stdout + proc.stderr
