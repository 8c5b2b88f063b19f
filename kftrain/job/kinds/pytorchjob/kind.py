"""PyTorchJob (training-operator v1.9): a Master and Workers, optionally elastic under torchrun.

The env every container gets, in order, is kubeflow/training-operator@v1.9.0:pkg/controller.v1/pytorch/envvar.go
(setPodEnv), master.go and elastic.go, after pkg/apis/kubeflow.org/v1/pytorch_defaults.go (``nprocPerNode``
``auto`` unless the elasticPolicy sets it): the master's address and port, ``WORLD_SIZE`` (replicas x nprocPerNode),
``RANK`` (Master 0, Worker i: i+1), ``PET_*`` (elastic: the rendezvous). The webhook requires a Master unless the job
is elastic. Success: the Master succeeds; without one, every Worker (elastic: any).
"""

from __future__ import annotations

from kftrain.errors import JobSpecError
from kftrain.job.kinds.base import GROUP, TRAINING_OPERATOR_MANAGERS, Kind, KindSpec, OperatorContainer
from kftrain.job.kinds.pytorchjob.spec import PyTorchJobSpec
from kftrain.job.model import RestartPolicy, TrainingJob
from kftrain.job.topology import ReplicaId, Topology, total_replicas

MASTER = ReplicaId("Master", 0)
FIRST_WORKER = ReplicaId("Worker", 0)
_NPROC_WORDS = {"auto", "cpu", "gpu"}
DEFAULT_NPROC_PER_NODE = "auto"
# training-operator v1.9.0's --pytorch-init-container-image unless set (pkg/config/config.go).
INIT_PYTORCH_IMAGE = "alpine:3.10"

SPEC = KindSpec(
    kind="PyTorchJob",
    api_version=f"{GROUP}/v1",
    plural="pytorchjobs",
    replica_key="pytorchReplicaSpecs",
    replica_types=("Master", "Worker"),
    singletons=frozenset({"Master"}),
    default_container="pytorch",
    container_name="pytorch",
    spec_type=PyTorchJobSpec,
    fixed_replicas=("Master",),
    # kubeflow/training-operator@v1.9.0:pkg/controller.v1/pytorch/pytorchjob_controller.go, controllerName
    operator_name="pytorchjob-controller",
    managers=TRAINING_OPERATOR_MANAGERS,
    # pkg/controller.v1/pytorch/initcontainer.go: added to every Worker of a job with a Master, from a template
    # with no securityContext unless the operator reads its own (--pytorch-init-container-template-file), its image
    # --pytorch-init-container-image (cmd/training-operator.v1/main.go; default: pkg/config/config.go).
    operator_containers={
        "init-pytorch": OperatorContainer(
            default_image=INIT_PYTORCH_IMAGE,
            security_context="training-operator adds it to each Worker of a PyTorchJob with a Master; its "
            "securityContext comes from the template the operator is started with "
            "(--pytorch-init-container-template-file): a cluster admin gives it one there",
            image="training-operator adds it to each Worker of a PyTorchJob with a Master, with the image of its "
            f"--pytorch-init-container-image (default {INIT_PYTORCH_IMAGE}, from Docker Hub): a cluster that cannot "
            "pull that one starts the operator with an image it can (any with sh and nslookup)",
        )
    },
)


def spec(job: TrainingJob) -> PyTorchJobSpec:
    assert isinstance(job.spec, PyTorchJobSpec), f"{job.kind} {job.name} is not a PyTorchJob"
    return job.spec


def defaulted_nproc_per_node(job: TrainingJob) -> str | None:
    """``spec.nprocPerNode`` after the operator's defaulting: ``auto`` unless the elasticPolicy sets its own."""
    if spec(job).nproc_per_node is not None:
        return spec(job).nproc_per_node
    elastic = spec(job).elastic_policy
    return None if elastic is not None and elastic.n_proc_per_node is not None else DEFAULT_NPROC_PER_NODE


def nproc_per_node(job: TrainingJob) -> int:
    """Processes per replica as WORLD_SIZE counts them: a number, or 1 for auto/cpu/gpu."""
    value = defaulted_nproc_per_node(job)
    return int(value) if value is not None and value.isdigit() else 1


class PyTorchJobKind(Kind):
    def least_replicas(self, job: TrainingJob, replica_type: str) -> int:
        # The webhook forbids a replica spec of fewer than 1 pod, whatever its type
        # (training-operator@v1.9.0:pkg/webhooks/pytorch/pytorchjob_webhook.go, validatePyTorchReplicaSpecs).
        return 1

    def validate(self, job: TrainingJob) -> None:
        path = self.replicas_path()
        elastic = spec(job).elastic_policy
        if "Master" not in job.replica_specs and elastic is None:
            raise JobSpecError(
                f"{path}.Master",
                "missing: without an elasticPolicy the operator sets MASTER_ADDR, RANK and WORLD_SIZE "
                "only when the job has a Master replica",
            )
        if "Master" in job.replica_specs and job.replicas_of("Master") != 1:
            raise JobSpecError(f"{path}.Master.replicas", "a PyTorchJob has exactly 1 Master")
        nproc = spec(job).nproc_per_node
        if nproc is not None and nproc not in _NPROC_WORDS and not (nproc.isdigit() and int(nproc) > 0):
            raise JobSpecError("spec.nprocPerNode", f"{nproc!r} must be auto, cpu, gpu or a positive integer")
        if elastic is None:
            return
        if job.replicas_of("Worker") < 1:
            raise JobSpecError(f"{path}.Worker", "an elasticPolicy needs a Worker replica spec with replicas >= 1")
        if elastic.n_proc_per_node is not None and nproc is not None:
            raise JobSpecError("spec.elasticPolicy.nProcPerNode", "must not be set together with spec.nprocPerNode")
        lo, hi = elastic.min_replicas, elastic.max_replicas
        if lo is not None and lo < 1:
            raise JobSpecError("spec.elasticPolicy.minReplicas", f"must be >= 1, got {lo}")
        if lo is not None and hi is not None and lo > hi:
            raise JobSpecError("spec.elasticPolicy.maxReplicas", f"must be >= minReplicas ({lo}), got {hi}")
        if elastic.max_restarts is not None and elastic.max_restarts < 0:
            raise JobSpecError("spec.elasticPolicy.maxRestarts", f"must be >= 0, got {elastic.max_restarts}")

    def operator_env(self, job: TrainingJob, replica: ReplicaId, topology: Topology) -> list[tuple[str, str]]:
        env = [("PYTHONUNBUFFERED", "1")]
        total = total_replicas(job)
        if "Master" in job.replica_specs:
            port = str(topology.ports[MASTER])
            rank = replica.index + 1 if replica.type == "Worker" else replica.index
            env += [
                ("MASTER_PORT", port),
                ("PET_MASTER_PORT", port),
                ("MASTER_ADDR", topology.host),
                ("PET_MASTER_ADDR", topology.host),
                ("WORLD_SIZE", str(total * nproc_per_node(job))),
                ("RANK", str(rank)),
                ("PET_NODE_RANK", str(rank)),
            ]
        nproc = defaulted_nproc_per_node(job)
        if nproc is not None:
            env.append(("PET_NPROC_PER_NODE", nproc))
        elastic = spec(job).elastic_policy
        if elastic is None:
            env.append(("PET_NNODES", str(total)))
            return env
        workers = job.replicas_of("Worker")
        lo = elastic.min_replicas if elastic.min_replicas is not None else elastic.max_replicas
        hi = elastic.max_replicas if elastic.max_replicas is not None else elastic.min_replicas
        lo = workers if lo is None else lo
        hi = workers if hi is None else hi
        rdzv_port = elastic.rdzv_port or topology.ports.get(FIRST_WORKER)
        env += [
            ("PET_RDZV_ENDPOINT", f"{elastic.rdzv_host or topology.host}:{rdzv_port}"),
            ("PET_RDZV_BACKEND", elastic.rdzv_backend or "c10d"),
            ("PET_NNODES", f"{lo}:{hi}"),
        ]
        if elastic.max_restarts is not None:
            env.append(("PET_MAX_RESTARTS", str(elastic.max_restarts)))
        if elastic.n_proc_per_node is not None:
            env.append(("PET_NPROC_PER_NODE", str(elastic.n_proc_per_node)))
        if elastic.rdzv_id is not None:
            env.append(("PET_RDZV_ID", elastic.rdzv_id))
        if elastic.rdzv_conf is not None:
            env.append(("PET_RDZV_CONF", ",".join(f"{c.key}={c.value}" for c in elastic.rdzv_conf)))
        if elastic.standalone:
            env.append(("PET_STANDALONE", ""))
        return env

    def default_restart_policy(self, job: TrainingJob, replica_type: str) -> RestartPolicy:
        return RestartPolicy.ON_FAILURE

    def succeeded(self, job: TrainingJob, done: set[ReplicaId]) -> bool:
        if "Master" in job.replica_specs:
            return MASTER in done
        workers = [ReplicaId("Worker", i) for i in range(job.replicas_of("Worker"))]
        if spec(job).elastic_policy is not None:
            return any(w in done for w in workers)
        return all(w in done for w in workers)

    def survives_loss(self, job: TrainingJob, replica: ReplicaId, workers_left: int) -> bool:
        """An elastic job loses a Worker for good and goes on while minReplicas remain: torch's elastic
        agents re-form the group without it at the next rendezvous."""
        elastic = spec(job).elastic_policy
        if elastic is None or replica.type != "Worker":
            return False
        return workers_left >= (elastic.min_replicas or elastic.max_replicas or 1)

    def worker_bounds(self, job: TrainingJob) -> tuple[int, int | None] | None:
        elastic = spec(job).elastic_policy
        return None if elastic is None else (elastic.min_replicas or 1, elastic.max_replicas)

    def listening_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        wanted = [MASTER] if "Master" in job.replica_specs else []
        if spec(job).elastic_policy is not None and "Worker" in job.replica_specs:
            wanted.append(FIRST_WORKER)  # hosts the c10d rendezvous store
        return wanted

    def rendezvous_host(self, job: TrainingJob) -> ReplicaId | None:
        # The endpoint is worker-0's name (or rdzvHost): only the agent whose host name matches it hosts the store.
        elastic = spec(job).elastic_policy
        return FIRST_WORKER if elastic is not None and not elastic.rdzv_host else None
