"""Every ML policy Kubeflow Trainer v2.3.0 installs: the env its plugin gives each node, per variable, and what its
webhooks refuse; each case cites the line of kubeflow/trainer@v2.3.0 it encodes (paths under ``pkg/``).

The nodes' addresses are this machine's here (``localhost`` and the listening port the topology gives node 0: 29500
in these cases, as on a cluster); on a cluster they are ``<trainjob>-node-0-0.<trainjob>``.
"""

from __future__ import annotations

from typing import Any

import pytest

from kftrain.errors import JobSpecError
from kftrain.job import load_manifest, render_manifest
from kftrain.job.kinds import kind_of
from kftrain.job.kinds.trainjob.builtin import builtin_manifest
from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog
from kftrain.job.kinds.trainjob.runtime import parse_runtime
from kftrain.job.kinds.trainjob.webhooks import validate_runtime
from kftrain.job.topology import ReplicaId, StatusEndpoint, Topology
from testbed.manifests import trainjob
from testbed.node_env import node_env

JAX, XGB, TORCH, DEEPSPEED, MLX = (
    "jax-distributed",
    "xgboost-distributed",
    "torch-distributed",
    "deepspeed-distributed",
    "mlx-distributed",
)

# (id, runtime, trainer, replica, variable, value, source)
ENV = [
    ("jax processes = nodes", JAX, {"numNodes": 3}, ("node", 2), "JAX_NUM_PROCESSES", "3", "plugins/jax/jax.go:76-80"),
    ("jax process id = completion index", JAX, {"numNodes": 3}, ("node", 2), "JAX_PROCESS_ID", "2", "jax.go:82-87"),
    (
        "jax coordinator = node 0 : trainer port",
        JAX,
        {"numNodes": 3},
        ("node", 1),
        "JAX_COORDINATOR_ADDRESS",
        "localhost:29500",
        "jax.go:89-96, constants.go:72",
    ),
    (
        "xgboost tracker = node 0",
        XGB,
        {"numNodes": 2},
        ("node", 1),
        "DMLC_TRACKER_URI",
        "localhost",
        "xgboost.go:115-124",
    ),
    ("xgboost tracker port", XGB, {"numNodes": 2}, ("node", 1), "DMLC_TRACKER_PORT", "29500", "xgboost.go:125-128"),
    (
        "xgboost task id = completion index",
        XGB,
        {"numNodes": 2},
        ("node", 1),
        "DMLC_TASK_ID",
        "1",
        "xgboost.go:129-134",
    ),
    (
        "xgboost workers: 1 per CPU node",
        XGB,
        {"numNodes": 2},
        ("node", 0),
        "DMLC_NUM_WORKER",
        "2",
        "xgboost.go:100-113",
    ),
    (
        "xgboost workers: 1 per GPU",
        XGB,
        {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}},
        ("node", 0),
        "DMLC_NUM_WORKER",
        "8",
        "xgboost.go:103-112",
    ),
    ("torch nodes", TORCH, {"numNodes": 2}, ("node", 1), "PET_NNODES", "2", "plugins/torch/torch.go:146-148"),
    ("torch node rank", TORCH, {"numNodes": 2}, ("node", 1), "PET_NODE_RANK", "1", "torch.go:152-156"),
    ("torch master", TORCH, {"numNodes": 2}, ("node", 1), "PET_MASTER_ADDR", "localhost", "torch.go:160-162"),
    ("torch master port", TORCH, {"numNodes": 2}, ("node", 1), "PET_MASTER_PORT", "29500", "torch.go:163-165"),
    ("torch auto, no GPU: CPUs", TORCH, {"numNodes": 2}, ("node", 0), "PET_NPROC_PER_NODE", "1", "torch.go:121-135"),
    (
        "deepspeed: OpenMPI slots on the launcher",
        DEEPSPEED,
        {"numNodes": 2, "numProcPerNode": 2},
        ("launcher", 0),
        "OMPI_MCA_orte_set_default_slots",
        "2",
        "plugins/mpi/mpi.go:128-129, 218-219",
    ),
    (
        "mlx: the same MPI shape (launcher runs as a node)",
        MLX,
        {"numNodes": 3},
        ("launcher", 0),
        "OMPI_MCA_orte_keep_fqdn_hostnames",
        "true",
        "mpi.go:215-217",
    ),
    (
        "jax: a JAX_* variable of the trainer's env wins (no webhook reserves it)",
        JAX,
        {"numNodes": 2, "env": [{"name": "JAX_COORDINATOR_ADDRESS", "value": "mine:1"}]},
        ("node", 1),
        "JAX_COORDINATOR_ADDRESS",
        "mine:1",
        "jax.go:52-54 (Validate refuses nothing), plugins/jobset/builder.go:142-153 (trainer env upserted last)",
    ),
]


@pytest.mark.parametrize(
    ("runtime", "trainer", "replica", "name", "value"), [c[1:6] for c in ENV], ids=[f"{c[0]} ({c[6]})" for c in ENV]
)
def test_each_variable_of_each_plugin(runtime, trainer, replica, name, value):
    job = load_manifest(trainjob(runtime, trainer=trainer))
    assert node_env(job, ReplicaId(*replica))[name] == value


@pytest.mark.parametrize(
    ("runtime", "absent"),
    [
        (JAX, "JAX_NUM_PROCESSES"),  # jax.go:70: only when the TrainJob has a trainer section
        (XGB, "DMLC_TASK_ID"),  # xgboost.go:94
        (TORCH, "PET_NNODES"),  # torch.go:139
    ],
)
def test_no_plugin_variable_without_a_trainer_section(runtime, absent):
    job = load_manifest(trainjob(runtime))
    assert absent not in node_env(job, ReplicaId("node", 0))


def test_the_status_endpoint_reaches_the_trainers_nodes_only():
    """plugins/trainjobstatus/trainjobstatus.go:88-96 and :116-135: URL, CA cert path and token path."""
    job = load_manifest(trainjob(DEEPSPEED, trainer={"numNodes": 2}))
    kind = kind_of(job)
    status = StatusEndpoint("https://127.0.0.1:1/x", "/ca.crt", "/token")
    topology = Topology(ports={}, status=status)
    launcher = dict(kind.operator_env(job, ReplicaId("launcher", 0), topology))
    assert (launcher["KUBEFLOW_TRAINER_SERVER_URL"], launcher["KUBEFLOW_TRAINER_SERVER_CA_CERT"]) == (
        "https://127.0.0.1:1/x",
        "/ca.crt",
    )
    assert launcher["KUBEFLOW_TRAINER_SERVER_TOKEN"] == "/token"
    assert "KUBEFLOW_TRAINER_SERVER_URL" not in dict(kind.operator_env(job, ReplicaId("node", 0), topology))


# --- what the webhooks refuse --------------------------------------------------------------------------------------


def _env(*names: str) -> dict[str, Any]:
    return {"trainer": {"env": [{"name": n, "value": "1"} for n in names]}}


# (id, runtime, spec, field, message part, source)
REFUSED = [
    *(
        (f"xgboost reserves {n}", XGB, _env("A", n), "spec.trainer.env[1]", "reserved for the XGBoost runtime")
        for n in ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER")
    ),
    *(
        (f"torch reserves {n}", TORCH, _env(n), "spec.trainer.env", "must not have reserved envs")
        for n in ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
    ),
    *(
        (f"mpi reserves {n}", MLX, _env(n), "spec.trainer.env", "must not have reserved envs")
        for n in (
            "OMPI_MCA_orte_default_hostfile",
            "OMPI_MCA_plm_rsh_args",
            "OMPI_MCA_orte_keep_fqdn_hostnames",
            "OMPI_MCA_orte_set_default_slots",
        )
    ),
    (
        "a dataset initializer needs the runtime's dataset-initializer job",
        TORCH,
        {"initializer": {"dataset": {"storageUri": "s3://b/d"}}},
        "spec.runtimeRef",
        "must have dataset-initializer job when trainJob is configured with input datasetConfig",
    ),
    (
        "a model initializer needs the runtime's model-initializer job",
        TORCH,
        {"initializer": {"model": {"storageUri": "s3://b/m"}}},
        "spec.runtimeRef",
        "must have model-initializer job",
    ),
]
SOURCES = [
    *["plugins/xgboost/xgboost.go:59-68, constants.go:303"] * 4,
    *["plugins/torch/torch.go:65-77, constants.go:300"] * 5,
    *["plugins/mpi/mpi.go:95-107, constants.go:306"] * 4,
    "plugins/jobset/jobset.go:112-116",
    "plugins/jobset/jobset.go:142-146",
]


@pytest.mark.parametrize(
    ("runtime", "spec", "field", "message"),
    [c[1:] for c in REFUSED],
    ids=[f"{c[0]} ({s})" for c, s in zip(REFUSED, SOURCES, strict=True)],
)
def test_what_the_trainjob_webhook_refuses(runtime, spec, field, message):
    with pytest.raises(JobSpecError) as caught:
        load_manifest(trainjob(runtime, **spec))
    assert caught.value.field == field
    assert message in str(caught.value)


def test_jax_reserves_nothing():
    """plugins/jax/jax.go:52-54: Validate returns no error."""
    load_manifest(trainjob(JAX, **_env("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS")))


def _runtime(**changes: Any) -> dict[str, Any]:
    manifest = builtin_manifest(TORCH)
    manifest["metadata"]["name"] = "mine"
    job = manifest["spec"]["template"]["spec"]["replicatedJobs"][0]
    for key, value in changes.items():
        if key == "mlPolicy":
            manifest["spec"]["mlPolicy"] = value
        elif key == "replicas":
            job["replicas"] = value
        elif key == "container":
            job["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = value
    return manifest


RUNTIME_REFUSED = [
    (
        "one ML policy only (trainingruntime_types.go:172)",
        {"mlPolicy": {"torch": {}, "jax": {}}},
        "Only one of the policy can be configured",
    ),
    ("the trainer's job has 1 replica (trainingruntime_webhook.go:78-80)", {"replicas": 2}, "always must be 1"),
    (
        "the trainer's job has a node container (trainingruntime_webhook.go:82-100)",
        {"container": "main"},
        "must contain the required container for the ancestor: trainer",
    ),
]


@pytest.mark.parametrize(("changes", "message"), [c[1:] for c in RUNTIME_REFUSED], ids=[c[0] for c in RUNTIME_REFUSED])
def test_what_the_runtime_webhook_refuses(changes, message):
    with pytest.raises(JobSpecError, match=message):
        validate_runtime(parse_runtime(_runtime(**changes), "rt.yaml"))


def test_a_runtime_labelled_webhook_validation_disabled_is_not_checked():
    """charts/kubeflow-trainer/templates/webhook/validating_webhook_configuration.yaml:36-41 (objectSelector)."""
    manifest = _runtime(replicas=2)
    manifest["metadata"]["labels"]["trainer.kubeflow.org/webhook-validation"] = "disabled"
    validate_runtime(parse_runtime(manifest, "rt.yaml"))


def test_env_injection_targets_must_exist():
    """plugins/torch/torch.go:89-107."""
    manifest = _runtime(
        mlPolicy={"torch": {"envInjection": {"targets": [{"jobName": "node", "containerNames": ["x"]}]}}}
    )
    catalog = RuntimeCatalog([parse_runtime(manifest, "rt.yaml")])
    with pytest.raises(JobSpecError, match="envInjection target podSet 'node' container 'x' not found"):
        load_manifest(trainjob("mine", trainer={"numNodes": 1}), runtimes=catalog)


def test_flux_is_refused_locally_naming_why():
    """(A ``tune run`` trainer is tests/job/kinds/trainjob/test_torchtune.py's.)"""
    flux = _runtime(mlPolicy={"numNodes": 1, "flux": {}})
    job = load_manifest(
        trainjob("mine", trainer={"command": ["x"]}), runtimes=RuntimeCatalog([parse_runtime(flux, "f")])
    )
    with pytest.raises(JobSpecError, match="Flux"):
        node_env(job, ReplicaId("node", 0))


def test_jax_and_xgboost_trainjobs_render_back_unchanged(crd_schemas):
    for runtime in (JAX, XGB):
        manifest = trainjob(runtime, trainer={"numNodes": 2, "command": ["python", "t.py"]})
        job = load_manifest(manifest)
        assert render_manifest(job) == manifest
        crd_schemas.validate(render_manifest(job))
