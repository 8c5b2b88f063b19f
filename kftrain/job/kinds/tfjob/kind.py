"""TFJob (training-operator v1.9): Chief or Master, parameter servers, Workers and an Evaluator.

The operator's contract (``pkg/controller.v1/tensorflow/tensorflow.go``): ``TF_CONFIG`` on the
``tensorflow`` container when the job has more than one replica, ``{"cluster": {...}, "task": {"type",
"index"}, "environment": "cloud"}`` serialized compactly as Go's encoder does, the cluster's types sorted
and every type in it, the evaluator included; with ``enableDynamicWorker`` a sparse cluster instead.
Success: the Chief (or Master) succeeds; without one, worker 0, or every Worker under ``AllWorkers``.
"""

from __future__ import annotations

import json

from kftrain.errors import JobSpecError
from kftrain.job.kinds.base import GROUP, TRAINING_OPERATOR_MANAGERS, Kind, KindSpec
from kftrain.job.kinds.tfjob.spec import TFJobSpec
from kftrain.job.model import TrainingJob
from kftrain.job.topology import ReplicaId, Topology, all_replicas, total_replicas

SPEC = KindSpec(
    kind="TFJob",
    api_version=f"{GROUP}/v1",
    plural="tfjobs",
    replica_key="tfReplicaSpecs",
    replica_types=("Chief", "Master", "PS", "Worker", "Evaluator"),
    singletons=frozenset({"Chief", "Master"}),
    default_container="tensorflow",
    container_name="tensorflow",
    spec_type=TFJobSpec,
    # kubeflow/training-operator@v1.9.0:pkg/controller.v1/tensorflow/tfjob_controller.go, controllerName
    operator_name="tfjob-controller",
    managers=TRAINING_OPERATOR_MANAGERS,
)


def spec(job: TrainingJob) -> TFJobSpec:
    assert isinstance(job.spec, TFJobSpec), f"{job.kind} {job.name} is not a TFJob"
    return job.spec


def tf_config(job: TrainingJob, replica: ReplicaId, topology: Topology) -> str:
    """The ``TF_CONFIG`` value the operator gives ``replica``."""
    cluster: dict[str, list[str]] = {}
    for rtype in sorted(job.replica_specs, key=str.lower):  # Go sorts map keys when encoding
        count = job.replica_specs[rtype].count
        cluster[rtype.lower()] = [topology.address(ReplicaId(rtype, i)) for i in range(count)]
    task = {"type": replica.type.lower(), "index": replica.index}
    if not spec(job).enable_dynamic_worker:
        return json.dumps({"cluster": cluster, "task": task, "environment": "cloud"}, separators=(",", ":"))
    sparse: dict[str, object] = {"worker": {}, "ps": []}
    if replica.type == "PS":
        sparse = {"worker": {}, "ps": [topology.address(replica)]}
    elif replica.type == "Worker":
        sparse = {"worker": {str(replica.index): topology.address(replica)}, "ps": cluster.get("ps", [])}
    return json.dumps({"sparseCluster": sparse, "task": task}, separators=(",", ":"))


class TFJobKind(Kind):
    def validate(self, job: TrainingJob) -> None:
        if "Chief" in job.replica_specs and "Master" in job.replica_specs:
            raise JobSpecError(self.replicas_path(), "a TFJob has either a Chief or a Master, not both")
        policy = spec(job).success_policy
        if policy not in (None, "", "AllWorkers"):
            raise JobSpecError("spec.successPolicy", f"{policy!r} must be empty or AllWorkers")

    def operator_env(self, job: TrainingJob, replica: ReplicaId, topology: Topology) -> list[tuple[str, str]]:
        if total_replicas(job) == 1:  # not distributed: the operator leaves TF_CONFIG unset
            return []
        return [("TF_CONFIG", tf_config(job, replica, topology))]

    def succeeded(self, job: TrainingJob, done: set[ReplicaId]) -> bool:
        for chief in ("Chief", "Master"):
            if chief in job.replica_specs:
                return ReplicaId(chief, 0) in done
        workers = [ReplicaId("Worker", i) for i in range(job.replicas_of("Worker"))]
        if spec(job).success_policy == "AllWorkers":
            return bool(workers) and all(w in done for w in workers)
        return ReplicaId("Worker", 0) in done

    def listening_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        return all_replicas(job)  # TF_CONFIG lists every replica's address
