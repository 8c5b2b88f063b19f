"""TrainJob (Kubeflow Trainer v2.3.0): loading with its runtime, the webhooks' rules, the env each node gets.

The expected values are the facts of kubeflow/trainer v2.3.0's runtime plugins, cited per case:
``pkg/runtime/framework/plugins/torch/torch.go`` (EnforceMLPolicy, Validate), ``plugins/mpi/mpi.go``
(EnforceMLPolicy, buildHostFileConfigMap, Validate), ``plugins/plainml/plainml.go``, ``plugins/jobset/jobset.go``
(IdentifyPodNetwork: ``<name>-<job>-0-<i>.<subdomain>``; Validate: runtimePatches), ``pkg/constants``
(ContainerTrainerPort 29500, the reserved env names) and ``pkg/runtime/core/trainingruntime.go`` (pod counts).
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain.errors import JobSpecError
from kftrain.job import load_manifest, render_manifest
from kftrain.job.kinds import kind_of
from kftrain.job.kinds.trainjob.builtin import builtin_manifest
from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog
from kftrain.job.kinds.trainjob.nodes import hostfile
from kftrain.job.kinds.trainjob.runtime import parse_runtime
from kftrain.job.topology import ReplicaId
from testbed.launch_harness import GLOO_PROGRAM, launch_locally
from testbed.manifests import trainjob
from testbed.needs import require
from testbed.node_env import node_env
from testbed.reference import REPO, RUNTIMES_DIR


def node_pod_patch(manager: str, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A runtime patch, by ``manager``, of the pod spec of the runtime's ``node`` replicated job."""
    node = {"name": "node", "template": {"spec": {"template": {"spec": pod_spec}}}}
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [node]}}}}


# --- the runtimes ----------------------------------------------------------------------------------


def _reference_runtimes() -> list[Path]:
    if not RUNTIMES_DIR.is_dir():
        pytest.skip(f"reference data not available: {RUNTIMES_DIR}")
    return sorted(RUNTIMES_DIR.glob("*.yaml"))


def test_every_installed_runtime_loads_and_matches_what_we_know_by_name():
    files = _reference_runtimes()
    assert len(files) == 5
    catalog = RuntimeCatalog.from_paths([RUNTIMES_DIR], builtin=False)
    assert len(catalog.names()) == 5
    for path in files:
        manifest = yaml.safe_load(path.read_text())
        runtime = parse_runtime(manifest, str(path))
        # The built-in description of the runtime must resolve to the very manifest Trainer installs.
        assert builtin_manifest(runtime.name) == manifest, path.name


def test_a_runtime_from_a_folder_wins_over_the_builtin(tmp_path):
    manifest = builtin_manifest("torch-distributed")
    manifest["spec"]["mlPolicy"]["numNodes"] = 4
    (tmp_path / "rt.yaml").write_text(yaml.safe_dump(manifest))
    job = load_manifest(trainjob(trainer={"command": ["true"]}), runtimes=RuntimeCatalog.from_paths([tmp_path]))
    assert job.replica_specs["node"].count == 4  # the runtime's mlPolicy.numNodes, no trainer.numNodes


def test_an_unknown_runtime_names_the_known_ones():
    with pytest.raises(
        JobSpecError, match=r"spec.runtimeRef: no ClusterTrainingRuntime named 'nope'.*torch-distributed"
    ):
        load_manifest(trainjob("nope"))


# --- the env contract, per plugin ---------------------------------------------------------------------

TORCH = "torch-distributed"
DEEPSPEED = "deepspeed-distributed"
CASES = [
    # id, runtime, trainer, replica, expected env (ordered items that must appear, in this order)
    (
        "torch: numNodes, auto without GPUs or CPUs is 1, rank = completion index, master node-0-0:29500",
        TORCH,
        {"numNodes": 3, "command": ["torchrun", "t.py"]},
        ReplicaId("node", 2),
        [
            ("JOB_COMPLETION_INDEX", "2"),
            ("PET_NNODES", "3"),
            ("PET_NPROC_PER_NODE", "1"),
            ("PET_NODE_RANK", "2"),
            ("PET_MASTER_ADDR", "localhost"),
            ("PET_MASTER_PORT", "29500"),
        ],
    ),
    (
        "torch: auto without GPUs takes the CPU request, rounded up",
        TORCH,
        {"resourcesPerNode": {"requests": {"cpu": "2500m"}, "limits": {"cpu": "8"}}},
        ReplicaId("node", 0),
        [("PET_NNODES", "1"), ("PET_NPROC_PER_NODE", "3")],
    ),
    (
        "torch: auto without GPUs and no CPU request takes the CPU limit",
        TORCH,
        {"resourcesPerNode": {"limits": {"cpu": "4"}}},
        ReplicaId("node", 0),
        [("PET_NPROC_PER_NODE", "4")],
    ),
    (
        "torch: auto stays auto with GPUs",
        TORCH,
        {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4, "cpu": "16"}}},
        ReplicaId("node", 1),
        [("PET_NNODES", "2"), ("PET_NPROC_PER_NODE", "auto"), ("PET_NODE_RANK", "1")],
    ),
    (
        "torch: numProcPerNode given wins; the trainer's env comes first",
        TORCH,
        {"numProcPerNode": 2, "env": [{"name": "LR", "value": "0.1"}]},
        ReplicaId("node", 0),
        [("LR", "0.1"), ("PET_NNODES", "1"), ("PET_NPROC_PER_NODE", "2")],
    ),
    (
        "mpi: launcher as node, numNodes 3 -> 2 node pods; slots = numProcPerNode; OpenMPI variables",
        DEEPSPEED,
        {"numNodes": 3, "numProcPerNode": 2},
        ReplicaId("launcher", 0),
        [
            ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
            ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            ("OMPI_MCA_orte_set_default_slots", "2"),
            ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ],
    ),
    (
        "mpi: the runtime's 1 slot becomes the GPUs per node when there are more",
        DEEPSPEED,
        {"resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}},  # a GPU request without its limit is refused
        ReplicaId("launcher", 0),
        [("OMPI_MCA_orte_set_default_slots", "4")],
    ),
    (
        "xgboost: the trainer's env first, then the completion index and the plugin's variables",
        "xgboost-distributed",
        {"numNodes": 2, "env": [{"name": "A", "value": "1"}]},
        ReplicaId("node", 1),
        [("A", "1"), ("JOB_COMPLETION_INDEX", "1")],
    ),
]


@pytest.mark.parametrize(
    ("runtime", "trainer", "replica", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_node_gets_the_plugins_env(runtime, trainer, replica, expected, crd_schemas):
    job = load_manifest(trainjob(runtime, trainer=trainer))
    env = node_env(job, replica)
    items = list(env.items())
    positions = [items.index(pair) for pair in expected]  # ValueError names a missing or different pair
    assert positions == sorted(positions), items
    crd_schemas.validate(render_manifest(job))  # what we render is what the API server accepts


def test_torch_env_is_only_for_the_trainers_job_and_not_without_a_trainer():
    job = load_manifest(trainjob())
    assert list(node_env(job, ReplicaId("node", 0))) == ["JOB_COMPLETION_INDEX"]


def test_mpi_node_pods_get_no_launcher_variables_and_only_the_launcher_runs_locally():
    job = load_manifest(trainjob(DEEPSPEED, trainer={"numNodes": 3, "command": ["mpirun", "true"]}))
    assert job.replica_specs["node"].count == 2 and job.replica_specs["launcher"].count == 1
    assert not [k for k in node_env(job, ReplicaId("node", 1)) if k.startswith("OMPI_")]
    assert kind_of(job).process_replicas(job) == [ReplicaId("launcher", 0)]
    # The trainer's command goes to the launcher (the trainer's ancestor); the nodes keep their ssh daemon.
    assert job.replica_specs["launcher"].template.spec.containers[0].command == ["mpirun", "true"]
    assert job.replica_specs["node"].template.spec.containers[0].command == ["/usr/sbin/sshd"]


@pytest.mark.parametrize(
    ("num_nodes", "expected"),
    [
        # runLauncherAsNode: the launcher is listed, then max(numNodes - 1, 1) node pods (so 1 node even at 1).
        (None, "tj-node-0-0.tj slots=2\ntj-launcher-0-0.tj slots=2\n"),
        (1, "tj-node-0-0.tj slots=2\ntj-launcher-0-0.tj slots=2\n"),
        (3, "tj-node-0-0.tj slots=2\ntj-node-0-1.tj slots=2\ntj-launcher-0-0.tj slots=2\n"),
    ],
)
def test_mpi_hostfile_lists_the_node_pods_with_their_slots(num_nodes, expected):
    trainer: dict[str, Any] = {"numProcPerNode": 2}
    if num_nodes is not None:
        trainer["numNodes"] = num_nodes
    assert hostfile(load_manifest(trainjob(DEEPSPEED, trainer=trainer))) == expected


# --- the webhooks' rules and the API's shape ------------------------------------------------------------------

REFUSED = [
    # The checks every kind shares name the TrainJob's own fields: it has no runPolicy, and numNodes sets the count
    # of the replicated job it resolves to.
    ("activeDeadlineSeconds zero", TORCH, {"activeDeadlineSeconds": 0}, "spec.activeDeadlineSeconds"),
    ("activeDeadlineSeconds negative", TORCH, {"activeDeadlineSeconds": -1}, "spec.activeDeadlineSeconds"),
    ("numNodes negative", TORCH, {"trainer": {"numNodes": -1}}, "spec.trainer.numNodes"),
    ("numNodes zero", TORCH, {"trainer": {"numNodes": 0}}, "spec.trainer.numNodes"),
    ("numNodes negative on an mpi runtime", DEEPSPEED, {"trainer": {"numNodes": -1}}, "spec.trainer.numNodes"),
    ("torch reserved env", TORCH, {"trainer": {"env": [{"name": "PET_NNODES", "value": "2"}]}}, "spec.trainer.env"),
    (
        "mpi reserved env",
        DEEPSPEED,
        {"trainer": {"env": [{"name": "OMPI_MCA_orte_set_default_slots", "value": "2"}]}},
        "spec.trainer.env",
    ),
    ("misspelt trainer field", TORCH, {"trainer": {"numNode": 2}}, "spec.trainer.numNode"),
    (
        "numProcPerNode is an integer in v2.3.0",
        TORCH,
        {"trainer": {"numProcPerNode": "auto"}},
        "spec.trainer.numProcPerNode",
    ),
    ("managedBy", TORCH, {"managedBy": "me.example.com/x"}, "spec.managedBy"),
    (
        "patch of a job the runtime lacks",
        TORCH,
        {
            "runtimePatches": [
                {
                    "manager": "a.io/b",
                    "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "worker"}]}}},
                }
            ]
        },
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name",
    ),
    (
        "patch setting the node container's env",
        TORCH,
        {
            "runtimePatches": [
                node_pod_patch("a.io/b", {"containers": [{"name": "node", "env": [{"name": "X", "value": "1"}]}]})
            ]
        },
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].env",
    ),
]


@pytest.mark.parametrize(("runtime", "spec", "field"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_the_webhooks_refuse_is_refused_naming_the_field(runtime, spec, field):
    with pytest.raises(JobSpecError) as caught:
        load_manifest(trainjob(runtime, **spec))
    assert caught.value.field == field


def test_runtime_patches_are_merged_and_the_trainjob_renders_back_unchanged(crd_schemas):
    patch = node_pod_patch(
        "kftrain.io/launch",
        {
            "nodeSelector": {"pool": "gpu"},
            "containers": [{"name": "node", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        },
    )
    manifest = trainjob(
        trainer={"numNodes": 2, "image": "me/train:1", "command": ["python", "t.py"]},
        runtimePatches=[patch],
        suspend=True,
        managedBy="kueue.x-k8s.io/multikueue",
        activeDeadlineSeconds=600,
    )
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    job = load_manifest(copy.deepcopy(manifest))
    pod = job.replica_specs["node"].template.spec
    assert pod.node_selector == {"pool": "gpu"}
    container = pod.containers[0]
    assert (container.name, container.image, container.command) == ("node", "me/train:1", ["python", "t.py"])
    assert container.extra["volumeMounts"] == [{"name": "d", "mountPath": "/d"}]
    assert job.run_policy.suspend is True
    assert render_manifest(job) == manifest
    crd_schemas.validate(render_manifest(job))


# --- running locally: one process per node, real communication ------------------------------------------


def _launch(manifest: dict[str, Any], tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return launch_locally(manifest, tmp_path, *extra, job_timeout=150, timeout=200)


def test_three_node_torch_trainjob_all_reduces_over_gloo(tmp_path):
    require("torch")
    # As Trainer's own examples do: torchrun reads the PET_* variables; the image is ignored locally.
    command = ["torchrun", "--no-python", "python3", "-c", GLOO_PROGRAM]
    proc = _launch(
        trainjob(name="gloo", trainer={"numNodes": 3, "image": "pytorch/pytorch", "command": command}), tmp_path
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in range(3):
        assert f"rank {rank} of 3 node {rank} sum 6" in proc.stdout
    assert "gloo succeeded" in proc.stdout


def test_a_suspended_trainjob_is_not_started_locally(tmp_path):
    from kftrain.backends.local import LocalBackend, LocalConfig

    job = load_manifest(trainjob(suspend=True, trainer={"command": ["true"]}))
    with pytest.raises(JobSpecError) as caught:
        LocalBackend(LocalConfig(workdir=tmp_path)).submit(job)
    assert caught.value.field == "spec.suspend"


needs_mpi = pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun here (scripts/install_mpi.sh)")


@needs_mpi
def test_mpi_runtime_trainjob_runs_mpirun_over_the_hostfiles_slots(tmp_path):
    # deepspeed-distributed: the launcher runs as a node; numNodes 2 -> launcher + 1 node pod, 2 slots each.
    hello = REPO / "examples" / "mpi" / "hello.py"
    trainer = {"numNodes": 2, "numProcPerNode": 2, "command": ["mpirun", "-n", "4", "python3", str(hello)]}
    proc = _launch(trainjob(DEEPSPEED, name="mpi", trainer=trainer), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in range(4):
        assert f"[launcher-0] hello from python rank {rank} of 4" in proc.stdout
    # On a cluster as here, more ranks than the hostfile's slots is an error, not oversubscription.
    trainer["command"] = ["mpirun", "-n", "5", "python3", str(hello)]
    proc = _launch(trainjob(DEEPSPEED, name="mpi", trainer=trainer), tmp_path)
    assert proc.returncode != 0


# --- TensorFlow on a plain runtime: TF_CONFIG built from what every node has ----------------------------------


def test_tf_config_from_a_jobset_pods_hostname_and_index():
    from kftrain.programs.tf_config import tf_config

    env = {"JOB_COMPLETION_INDEX": "1", "KFTRAIN_NUM_NODES": "3"}
    assert tf_config(env, "mnist-node-0-1") == {
        "cluster": {"worker": [f"mnist-node-0-{i}.mnist:2222" for i in range(3)]},
        "task": {"type": "worker", "index": 1},
    }
    assert tf_config({}, "laptop") is None  # not a TrainJob node: nothing to build
    with pytest.raises(ValueError, match="KFTRAIN_NUM_NODES"):
        tf_config({"JOB_COMPLETION_INDEX": "0"}, "mnist-node-0-0")


# A multi-worker all-reduce: each worker adds index + 1; 1 + 2 = 3 on 2 nodes.
TF_PROGRAM = """
import json, os
from kftrain.programs.tf_config import ensure_tf_config
ensure_tf_config()
import tensorflow as tf
config = json.loads(os.environ["TF_CONFIG"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
value = strategy.run(lambda: tf.constant(float(config["task"]["index"] + 1)))
total = strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
print(f"worker {config['task']['index']} of {len(config['cluster']['worker'])} sum {int(total)}", flush=True)
"""


def test_tensorflow_multi_worker_trainjob_on_a_plain_runtime_runs_locally(tmp_path):
    require("tensorflow")
    runtime = builtin_manifest("torch-distributed")  # its shape, without an ML policy source: a plain runtime
    runtime["metadata"] = {"name": "tensorflow-plain"}
    runtime["spec"]["mlPolicy"] = {"numNodes": 1}
    runtimes = tmp_path / "runtimes"
    runtimes.mkdir()
    (runtimes / "tf.yaml").write_text(yaml.safe_dump(runtime))
    trainer = {
        "numNodes": 2,
        "command": ["python", "-c", TF_PROGRAM],
        "env": [{"name": "KFTRAIN_NUM_NODES", "value": "2"}],
    }
    proc = _launch(trainjob("tensorflow-plain", name="tf", trainer=trainer), tmp_path, "--runtimes", str(runtimes))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for index in range(2):
        assert f"worker {index} of 2 sum 3" in proc.stdout
