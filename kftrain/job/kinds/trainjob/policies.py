"""What each ML policy plugin of Kubeflow Trainer v2.3.0 gives a TrainJob's trainer nodes, and the env names its
webhook refuses in ``spec.trainer.env``.

Every fact is kubeflow/trainer@v2.3.0's, cited where it is encoded (paths under ``pkg/``). The values that name
other pods (the torch master, the JAX coordinator, the XGBoost tracker) are ``<trainjob>-node-0-0.<trainjob>`` and
port 29500 on a cluster; the callers pass what stands for them where the nodes run (:mod:`.kind`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kftrain.errors import JobSpecError

# The ML policy sources a runtime may set, in the order of MLPolicySource's fields
# (pkg/apis/trainer/v1alpha1/trainingruntime_types.go:172); none of them is the plain policy (plugins/plainml).
POLICY_SOURCES = ("torch", "mpi", "jax", "xgboost", "flux")
PLAIN = "plain"

# pkg/constants/constants.go:72 ContainerTrainerPort: the port of the torch master, the JAX coordinator and the
# XGBoost tracker on node 0.
TRAINER_PORT = 29500

# pkg/constants/constants.go:300 TorchRunReservedEnvNames (refused by plugins/torch/torch.go:65-77).
TORCH_RESERVED = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"})
# pkg/constants/constants.go:306 MPIReservedEnvNames (refused by plugins/mpi/mpi.go:95-107).
MPI_RESERVED = frozenset(
    {
        "OMPI_MCA_orte_default_hostfile",
        "OMPI_MCA_plm_rsh_args",
        "OMPI_MCA_orte_keep_fqdn_hostnames",
        "OMPI_MCA_orte_set_default_slots",
    }
)
# pkg/constants/constants.go:303 XGBoostReservedEnvNames (refused by plugins/xgboost/xgboost.go:53-71).
XGBOOST_RESERVED = frozenset({"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"})
# plugins/jax/jax.go:52-54: the JAX plugin's Validate refuses nothing, so a JAX_* variable in trainer.env is kept,
# and wins over the plugin's (plugins/jobset/builder.go:142-153 upserts the trainer's env last).
RESERVED: Mapping[str, frozenset[str]] = {
    "torch": TORCH_RESERVED,
    "mpi": MPI_RESERVED,
    "xgboost": XGBOOST_RESERVED,
}

# plugins/trainjobstatus/trainjobstatus.go:43-51: where a node posts its progress, and the files it authenticates
# with (mounted from a projected volume at /var/run/secrets/kubeflow/trainer).
STATUS_URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
STATUS_CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
STATUS_TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
STATUS_MOUNT_PATH = "/var/run/secrets/kubeflow/trainer"


def policy_of(ml_policy: Mapping[str, Any]) -> str:
    """The policy a runtime's ``mlPolicy`` sets (``plain`` when it sets no source)."""
    return next((name for name in POLICY_SOURCES if ml_policy.get(name) is not None), PLAIN)


def check_one_policy(ml_policy: Mapping[str, Any], where: str) -> None:
    """The CRD's rule on mlPolicy (pkg/apis/trainer/v1alpha1/trainingruntime_types.go:172, in
    manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml:186-188)."""
    given = [name for name in POLICY_SOURCES if ml_policy.get(name) is not None]
    if len(given) > 1:
        raise JobSpecError(f"{where}.spec.mlPolicy", f"Only one of the policy can be configured, got {given}")


def check_reserved_env(policy: str, env_names: Sequence[str | None]) -> None:
    """Refuse the env names ``policy``'s webhook reserves, with its message."""
    reserved = RESERVED.get(policy, frozenset())
    if policy == "xgboost":
        # field.Forbidden per variable: "%s is reserved for the XGBoost runtime" (plugins/xgboost/xgboost.go:62-66).
        for i, name in enumerate(env_names):
            if name in reserved:
                raise JobSpecError(f"spec.trainer.env[{i}]", f"Forbidden: {name} is reserved for the XGBoost runtime")
        return
    refused = sorted({n for n in env_names if n in reserved})
    if refused:
        # field.Invalid(spec.trainer.env, ..., "must not have reserved envs, invalid envs configured: %v")
        # (plugins/torch/torch.go:74-77, plugins/mpi/mpi.go:103-106).
        raise JobSpecError(
            "spec.trainer.env",
            f"must not have reserved envs, invalid envs configured: {refused} (the {policy} runtime sets them)",
        )


def torch_env(nodes: int, nproc_per_node: str, rank: int, master_host: str, master_port: int) -> list[tuple[str, str]]:
    """plugins/torch/torch.go:145-166 (the PET_* variables torchrun reads), upserted at :168-176."""
    return [
        ("PET_NNODES", str(nodes)),
        ("PET_NPROC_PER_NODE", nproc_per_node),
        ("PET_NODE_RANK", str(rank)),  # valueFrom the pod's completion index
        ("PET_MASTER_ADDR", master_host),
        ("PET_MASTER_PORT", str(master_port)),
    ]


def jax_env(nodes: int, index: int, coordinator: str) -> list[tuple[str, str]]:
    """plugins/jax/jax.go:76-97: one JAX process per node."""
    return [
        ("JAX_NUM_PROCESSES", str(nodes)),
        ("JAX_PROCESS_ID", str(index)),  # valueFrom the pod's completion index (jax.go:82-87)
        ("JAX_COORDINATOR_ADDRESS", coordinator),  # <trainjob>-node-0-0.<trainjob>:29500 (jax.go:89-96)
    ]


def xgboost_env(tracker_host: str, tracker_port: int, index: int, workers: int) -> list[tuple[str, str]]:
    """plugins/xgboost/xgboost.go:119-139: the Rabit/Collective tracker runs on node 0."""
    return [
        ("DMLC_TRACKER_URI", tracker_host),  # <trainjob>-node-0-0.<trainjob> (xgboost.go:115-117)
        ("DMLC_TRACKER_PORT", str(tracker_port)),
        ("DMLC_TASK_ID", str(index)),  # valueFrom the pod's completion index (xgboost.go:129-134)
        ("DMLC_NUM_WORKER", str(workers)),  # nodes x workers per node (xgboost.go:100-113)
    ]


def xgboost_workers_per_node(gpus_per_node: int) -> int:
    """plugins/xgboost/xgboost.go:100-112: one worker per GPU, else one per node."""
    return gpus_per_node if gpus_per_node > 0 else 1


def mpi_env(hostfile: str, slots: int) -> list[tuple[str, str]]:
    """plugins/mpi/mpi.go:208-223 (OpenMPI only; values from pkg/constants/constants.go:159-187): on the ``node``
    container of the ``launcher`` job."""
    return [
        ("OMPI_MCA_orte_default_hostfile", hostfile),
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_orte_set_default_slots", str(slots)),
        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),  # OpenMPIEnvDefaultValueRSHArgs
    ]


def status_env(url: str, ca_cert: str, token: str) -> list[tuple[str, str]]:
    """plugins/trainjobstatus/trainjobstatus.go:116-135, on every container of the trainer's job."""
    return [(STATUS_URL_ENV, url), (STATUS_CA_CERT_ENV, ca_cert), (STATUS_TOKEN_ENV, token)]


def status_path(namespace: str, name: str) -> str:
    """pkg/statusserver/utils.go:16-18 StatusUrl: the path a node posts its progress to."""
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def status_audience(namespace: str, name: str) -> str:
    """pkg/statusserver/utils.go:10-13 TokenAudience: the audience of the node's projected token."""
    return f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
