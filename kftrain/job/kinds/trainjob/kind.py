"""TrainJob: Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``, v2.3.0), run as a JobSet from a runtime.

A TrainJob is loaded with the runtime it names (:mod:`kftrain.job.kinds.trainjob.runtime`) and becomes a
:class:`TrainingJob` whose replica specs are the resolved replicated jobs (``node``, ``launcher``, ...), one
replica per pod (the pod of job ``node`` with completion index i is ``ReplicaId("node", i)``); the TrainJob's
own spec is kept and rendered back unchanged.

What each ML policy plugin of v2.3.0 adds to the trainer's ``node`` container (:mod:`.policies`, each fact cited there),
after the trainer's ``env``; a variable the trainer's ``env`` also sets keeps the trainer's value (the jobset builder
upserts the trainer's env last: ``plugins/jobset/builder.go:142-153``), and the names a plugin reserves are refused by
its webhook (:mod:`.webhooks`):

* torch (``plugins/torch/torch.go``): ``PET_NNODES``, ``PET_NPROC_PER_NODE`` (``numProcPerNode``; unset: ``auto``,
  which without GPUs becomes max(1, CPUs per node)), ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``.
* MPI (``plugins/mpi/mpi.go``), on the ``launcher`` job: OpenMPI's hostfile, slots and rsh variables; the hostfile
  lists every pod of job ``launcher`` (when it runs as a node) and of job ``node`` with ``slots=N``.
* jax (``plugins/jax/jax.go``): ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``, ``JAX_COORDINATOR_ADDRESS`` (node 0).
* xgboost (``plugins/xgboost/xgboost.go``): ``DMLC_TRACKER_URI``, ``DMLC_TRACKER_PORT`` (node 0), ``DMLC_TASK_ID``,
  ``DMLC_NUM_WORKER``.
* plain (``plugins/plainml/plainml.go``): the trainer's env only. Locally, where the nodes have no DNS names, kftrain
  adds ``KFTRAIN_TF_WORKERS`` (their local addresses) for a TensorFlow program's TF_CONFIG
  (:mod:`kftrain.programs.tf_config`).
* every policy (``plugins/trainjobstatus``, behind the TrainJobStatus feature gate): where a node posts its progress,
  ``KUBEFLOW_TRAINER_SERVER_URL``, with a CA certificate and a token; locally the backend serves that endpoint.

The runtimes a TrainJob may name come in as a :class:`~kftrain.job.kinds.trainjob.catalog.RuntimeCatalog` (the ones
Trainer installs when none is given); reading them from the environment is the caller's
(:meth:`TrainJobKind.runtimes_from_env`).

Every pod of an Indexed Job also gets ``JOB_COMPLETION_INDEX`` from Kubernetes. Success (JobSet
``successPolicy``, operator All): every pod of the target jobs (default: all) succeeds.

Locally every node is a process on this machine; for MPI only the launcher runs (``mpirun`` starts the
ranks: one hostfile line ``localhost slots=<all slots>``), as for MPIJob. Node 0's address (torch master, JAX
coordinator, XGBoost tracker) is ``localhost`` and a free port.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.base import AfterJobFailure, Backoff, ClusterObject, Kind, KindSpec, MountedFile
from kftrain.job.kinds.trainjob import policies
from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog, runtimes_of
from kftrain.job.kinds.trainjob.failure_policy import BACKOFF_LIMIT_EXCEEDED, BACKOFF_LIMIT_MESSAGE
from kftrain.job.kinds.trainjob.policies import policy_of
from kftrain.job.kinds.trainjob.runtime import (
    API_VERSION,
    GROUP,
    INITIALIZERS,
    LAUNCHER,
    NAMESPACED_RUNTIME,
    NODE,
    RUNTIME_KINDS,
    ReplicatedJob,
    Resolved,
    Runtime,
    node_container,
    parse_runtime,
    resolve,
)
from kftrain.job.kinds.trainjob.webhooks import validate_patches, validate_trainjob
from kftrain.job.model import ObjectMeta, PodTemplate, ReplicaSpec, RestartPolicy, RunPolicy, TrainingJob
from kftrain.job.serde import from_dict, to_dict
from kftrain.job.topology import ReplicaId, Topology

HOSTFILE = "/etc/mpi/hostfile"  # pkg/constants/constants.go:159-163 MPIHostfileDir, MPIHostfileName
_QUANTITY = re.compile(r"([0-9.]+)([a-zA-Z]*)")
_SUFFIX = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}

SPEC = KindSpec(
    kind="TrainJob",
    api_version=API_VERSION,
    plural="trainjobs",
    replica_key="trainer",
    replica_types=(),  # the runtime's replicated jobs: see TrainJobKind.replica_types
    singletons=frozenset(),
    default_container=NODE,
    container_name=NODE,
    group=GROUP,
    # JobSet labels every pod with its JobSet's name, which is the TrainJob's (pkg/runtime/.../jobset).
    pod_job_label="jobset.sigs.k8s.io/jobset-name",
    suspend_field="spec.suspend",
    # Its spec holds suspend, managedBy and activeDeadlineSeconds itself
    # (kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/trainjob_types.go, TrainJobSpec).
    run_policy_field="spec",
    # Its pods are its JobSet's Jobs': the Job controller's event on a child Job
    # (kubernetes@v1.36.3:pkg/controller/job/job_controller.go, FailedCreatePodReason).
    create_failed_reasons=("FailedCreate",),
)


@dataclass
class TrainJobSource:
    """The TrainJob's own ``spec`` (rendered back as given) and what it resolves to on its runtime."""

    spec: dict[str, Any]
    resolved: Resolved


def source(job: TrainingJob) -> TrainJobSource:
    if not isinstance(job.source, TrainJobSource):
        raise JobSpecError("spec", f"{job.name}: a TrainJob built without its runtime")  # a bug, not input
    return job.source


def quantity(value: Any) -> float:
    """A Kubernetes quantity (``2``, ``500m``, ``1Gi``) as a number."""
    match = _QUANTITY.fullmatch(str(value))
    if not match or match.group(2) not in _SUFFIX:
        raise JobSpecError("spec.trainer.resourcesPerNode", f"{value!r} is not a quantity")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def _per_node(job: TrainingJob) -> Mapping[str, Any]:
    """resourcesPerNode: the trainer's, else the runtime's ``node`` container's (ExtractResourcePerNodeFromRuntime)."""
    src = source(job)
    given = (src.spec.get("trainer") or {}).get("resourcesPerNode")
    if given:
        return given
    for rjob in src.resolved.jobs:
        if rjob.name == NODE or rjob.ancestor == "trainer":
            container = node_container(rjob.pod_template)
            if container is not None and container.get("resources"):
                return container["resources"]
    return {}


def gpus_per_node(job: TrainingJob) -> int:
    """GetNumGPUPerNode: the first resource whose name holds "gpu", from requests, else limits."""
    res = _per_node(job)

    def count(part: str) -> int:
        found = next((v for k, v in (res.get(part) or {}).items() if "gpu" in k.lower()), 0)
        return math.ceil(quantity(found))

    return count("requests") or count("limits")


def torch_nproc_per_node(job: TrainingJob) -> str:
    given = (source(job).spec.get("trainer") or {}).get("numProcPerNode")
    if given is not None:
        return str(given)
    if gpus_per_node(job) > 0:
        return "auto"
    res = _per_node(job)
    requests = (res.get("requests") or {}).get("cpu")
    cpu = requests if requests is not None and quantity(requests) > 0 else (res.get("limits") or {}).get("cpu")
    return str(max(1, math.ceil(quantity(cpu)) if cpu is not None else 0))


def mpi_slots(job: TrainingJob) -> int:
    src = source(job)
    given = (src.spec.get("trainer") or {}).get("numProcPerNode")
    if given is not None:
        return int(given)
    slots = int((src.resolved.ml_policy.get("mpi") or {}).get("numProcPerNode", 1))
    return gpus_per_node(job) if slots == 1 and gpus_per_node(job) > 1 else slots


def _mpi_hosts(job: TrainingJob) -> list[tuple[str, int]]:
    """(job name, pod count) of the pods the hostfile lists, in the runtime's order."""
    resolved = source(job).resolved
    as_node = bool((resolved.ml_policy.get("mpi") or {}).get("runLauncherAsNode"))
    return [(j.name, j.count) for j in resolved.jobs if j.name == NODE or (as_node and j.name == LAUNCHER)]


def hostfile(job: TrainingJob) -> str:
    """The hostfile the MPI plugin writes into ``<name>-mpi-hostfile`` on a cluster."""
    network = (source(job).resolved.runtime.spec.get("template", {}).get("spec", {}).get("network")) or {}
    subdomain = network.get("subdomain") or job.name
    slots = mpi_slots(job)
    return "".join(
        f"{job.name}-{rjob}-0-{i}.{subdomain} slots={slots}\n" for rjob, count in _mpi_hosts(job) for i in range(count)
    )


def load_trainjob(data: Mapping[str, Any], runtimes: RuntimeCatalog | None = None) -> TrainingJob:
    """A TrainJob manifest resolved on the runtime it names, from ``runtimes`` (None: those Trainer installs)."""
    from kftrain.job.kinds.trainjob.api import check_trainjob

    spec = check_trainjob(data)
    ref = spec["runtimeRef"]
    catalog = runtimes if runtimes is not None else RuntimeCatalog()
    runtime = catalog.find(ref.get("kind", "ClusterTrainingRuntime"), ref["name"])
    validate_patches(spec, runtime)  # before merging them: a patch may name a job the runtime lacks
    resolved = resolve(spec, runtime)
    job = TrainingJob(
        kind="TrainJob",
        api_version=API_VERSION,
        metadata=from_dict(ObjectMeta, data.get("metadata") or {}, "metadata"),
        replica_specs={
            j.name: ReplicaSpec(
                replicas=j.count,
                template=from_dict(PodTemplate, j.pod_template, f"runtime {runtime.name}: replicatedJobs.{j.name}"),
            )
            for j in resolved.jobs
        },
        source=TrainJobSource(spec, resolved),
    )
    job.spec.run_policy = RunPolicy(
        suspend=spec.get("suspend"),
        managed_by=spec.get("managedBy"),
        active_deadline_seconds=spec.get("activeDeadlineSeconds"),
    )
    return job


class TrainJobKind(Kind):
    def replica_types(self, job: TrainingJob) -> tuple[str, ...]:
        return tuple(j.name for j in source(job).resolved.jobs)

    def replicas_path(self) -> str:
        return "runtime.spec.template.spec.replicatedJobs"

    def replica_count_field(self, job: TrainingJob, replica_type: str) -> str:
        """``spec.trainer.numNodes`` for the job whose count it sets (when the TrainJob sets it); else the runtime's."""
        if self._counted_by_num_nodes(job, replica_type):
            return "spec.trainer.numNodes"
        return super().replica_count_field(job, replica_type)

    def least_replicas(self, job: TrainingJob, replica_type: str) -> int:
        # numNodes is at least 1 (validate_trainjob, the webhook's rule), which is the job's count then.
        return 1 if self._counted_by_num_nodes(job, replica_type) else 0

    @staticmethod
    def _counted_by_num_nodes(job: TrainingJob, replica_type: str) -> bool:
        src = source(job)
        counted = src.resolved.num_nodes_job
        sets_it = (src.spec.get("trainer") or {}).get("numNodes") is not None
        return sets_it and counted is not None and counted.name == replica_type

    def framework(self, job: TrainingJob) -> str:
        """The runtime's ML policy: torch, mpi, jax, xgboost, flux or plain."""
        return policy_of(source(job).resolved.runtime.ml_policy)

    def main_container_name(self, job: TrainingJob, replica_type: str) -> str | None:
        return NODE if replica_type in (NODE, LAUNCHER) else None

    def summary(self, job: TrainingJob) -> dict[str, object]:
        src = source(job)
        trainer = src.resolved.trainer_job
        return {"runtime": src.resolved.runtime.name, "nodes": trainer.count if trainer else 0}

    def cluster_dependency(self, job: TrainingJob) -> ClusterObject | None:
        """The runtime the TrainJob names: the cluster must serve it, with the ML policy the job was built for (the
        environment each node gets, and the hostfile, follow from that policy).

        A runtime the job's own file carries (as ``kubectl apply -f`` would apply it with the job) is held to more:
        a namespaced TrainingRuntime is created in the job's namespace when it has none of that name, and otherwise
        must match the file's (every field the file sets, with the same value): it is never replaced, since other
        TrainJobs of the namespace may name it. A ClusterTrainingRuntime is cluster-wide, an administrator's to
        apply: it must already be there and match; the launch step is granted only ``get`` on it (deploy/rbac/)."""
        built_for = source(job).resolved.runtime

        def check(served: Mapping[str, Any]) -> None:
            on_cluster = parse_runtime(served, f"the cluster's {built_for.kind} {built_for.name}")
            if built_for.bundled:
                where = runtime_difference(built_for.manifest.get("spec") or {}, on_cluster.spec, "spec")
                if where is not None:
                    raise JobSpecError(
                        "spec.runtimeRef",
                        f"{built_for.kind} {built_for.name!r} on the cluster differs from the one in "
                        f"{built_for.source} at {where}: kftrain never replaces a runtime other TrainJobs may name; "
                        "give yours another name, or have the cluster's updated",
                    )
            if on_cluster.framework != built_for.framework:
                raise JobSpecError(
                    "spec.runtimeRef",
                    f"{built_for.kind} {built_for.name!r} on the cluster has a {on_cluster.framework} ML policy, "
                    f"but the job was built for {built_for.framework} ({built_for.source}): give the cluster's "
                    "runtime with --runtimes (or KFTRAIN_TRAINER_RUNTIMES), or name another runtime",
                )

        plural = built_for.kind.lower() + "s"
        namespaced = built_for.kind == NAMESPACED_RUNTIME
        create = None
        hint = "install it, or name one it has"
        if built_for.bundled and namespaced:
            create = {k: v for k, v in built_for.manifest.items() if k != "status"}
        elif built_for.bundled:
            hint = f"a cluster administrator applies it first (kubectl apply -f {built_for.source.rsplit('#', 1)[0]})"
        return ClusterObject(GROUP, "v1alpha1", built_for.kind, plural, built_for.name, namespaced, check, create, hint)

    def companions(self, job: TrainingJob) -> list[Mapping[str, Any]]:
        runtime = source(job).resolved.runtime
        return [runtime.manifest] if runtime.bundled else []

    def with_companions(self, docs: Sequence[tuple[int, Mapping[str, Any]]], source: str, runtimes: Any) -> Any:
        return bundled_catalog(docs, source, runtimes)

    # -- loading and rendering -----------------------------------------------------------------------

    def load(self, data: Mapping[str, Any], *, runtimes: RuntimeCatalog | None = None) -> TrainingJob:
        return load_trainjob(data, runtimes)

    def render(self, job: TrainingJob) -> dict[str, Any]:
        from kftrain.job.kinds.trainjob.patch import carry_changes

        src = source(job)
        spec = carry_changes(job, src.spec, src.resolved)
        suspend = job.run_policy.suspend
        if suspend is not None or "suspend" in spec:
            spec["suspend"] = bool(suspend)
        return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": to_dict(job.metadata), "spec": spec}

    # -- the webhooks' rules ---------------------------------------------------------------------------

    def validate(self, job: TrainingJob) -> None:
        from kftrain.job.kinds.trainjob.patch import carry_changes

        src = source(job)
        # The TrainJob as it is submitted: what was put on its pods since it was loaded (the launch inputs, the launch
        # task's own settings, the step's variables) is in its spec there (trainer.env...), where the webhook sees it.
        validate_trainjob(carry_changes(job, src.spec, src.resolved), src.resolved)

    # -- the contract of each node ---------------------------------------------------------------------

    def operator_env(self, job: TrainingJob, replica: ReplicaId, topology: Topology) -> list[tuple[str, str]]:
        env = [("JOB_COMPLETION_INDEX", str(replica.index))]  # Kubernetes' Indexed Jobs, on every pod
        src = source(job)
        trainer = src.resolved.trainer_job
        given = src.spec.get("trainer")
        policy = self.framework(job)
        plugin: list[tuple[str, str]] = []
        # The plugins touch the trainer's container only when the TrainJob has a trainer section
        # (torch.go:139, jax.go:70, xgboost.go:94, plainml.go:64).
        on_trainer = given is not None and trainer is not None and replica.type == trainer.name
        if on_trainer and given is not None and trainer is not None:
            node0 = ReplicaId(trainer.name, 0)
            if policy == "torch":
                _refuse_torchtune(given)
                plugin = policies.torch_env(
                    trainer.count, torch_nproc_per_node(job), replica.index, topology.host, topology.ports[node0]
                )
            elif policy == "jax":
                plugin = policies.jax_env(trainer.count, replica.index, topology.address(node0))
            elif policy == "xgboost":
                workers = trainer.count * policies.xgboost_workers_per_node(gpus_per_node(job))
                plugin = policies.xgboost_env(topology.host, topology.ports[node0], replica.index, workers)
            elif policy == "flux":
                raise JobSpecError(
                    "runtime.spec.mlPolicy.flux",
                    f"runtime {src.resolved.runtime.name}: the Flux ML policy (plugins/flux) starts Flux's own "
                    "brokers in every pod; kftrain runs it on a cluster only, not locally",
                )
        if policy == "mpi" and replica.type == LAUNCHER:
            plugin = policies.mpi_env(str(topology.file(HOSTFILE)), mpi_slots(job))
        if topology.status is not None and trainer is not None and replica.type == trainer.name:
            plugin += policies.status_env(topology.status.url, topology.status.ca_cert, topology.status.token)
        if policy == "plain" and trainer is not None and replica.type == trainer.name:
            # Not the Trainer's: on one machine the nodes have no DNS names, so their local addresses stand in
            # for them, for a TensorFlow program's TF_CONFIG (kftrain.programs.tf_config).
            nodes = [ReplicaId(trainer.name, i) for i in range(trainer.count)]
            plugin.append(("KFTRAIN_TF_WORKERS", ",".join(topology.address(n) for n in nodes)))
        # The trainer's env is upserted after the plugins' (plugins/jobset/builder.go:142-153): its value wins.
        own = {e.get("name") for e in (given or {}).get("env") or []}
        return env + [(k, v) for k, v in plugin if k not in own]

    def reports_status(self, job: TrainingJob) -> bool:
        # plugins/trainjobstatus/trainjobstatus.go:88-96: the trainer's job of every runtime gets the endpoint.
        return source(job).resolved.trainer_job is not None

    def expected_pods(self, obj: Mapping[str, Any]) -> int | None:
        # Its pods are its JobSet's: each replicated job's replicas x its Job's parallelism, from the runtime
        # (pkg/runtime/framework/plugins/jobset/builder.go), which the TrainJob object does not hold.
        return None

    def reported_progress(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        # pkg/statusserver/server.go:166-168 applies what a node posts to status.trainerStatus.
        status = (obj.get("status") or {}).get("trainerStatus")
        return status if isinstance(status, Mapping) else None

    def operator_files(self, job: TrainingJob, topology: Topology) -> dict[str, MountedFile]:
        if self.framework(job) != "mpi":
            return {}
        total = sum(count for _, count in _mpi_hosts(job)) * mpi_slots(job)
        return {HOSTFILE: MountedFile(f"{topology.host} slots={total}\n")}

    def process_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        resolved = source(job).resolved
        if self.framework(job) == "mpi" and resolved.job(LAUNCHER) is not None:
            return [ReplicaId(LAUNCHER, 0)]  # the node pods only host the ranks mpirun starts
        trainer = resolved.trainer_job
        # Initializer jobs download models and datasets inside their own images: not run locally.
        return [ReplicaId(trainer.name, i) for i in range(trainer.count)] if trainer else []

    def initializer_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        """The jobs the trainer's waits on with ``status: Complete`` (JobSet's dependsOn; the runtimes with initializers
        order them so: ``manifests/base/runtimes/torchtune/llama3_2/llama3_2_1B.yaml``), and the initializers the
        TrainJob configures, each in dependency order (a job's dependencies first), one pod each (the jobset builder
        sets their replicas to 1: ``plugins/jobset/builder.go:48-52, 75-78``)."""
        resolved = source(job).resolved
        trainer = resolved.trainer_job
        configured = source(job).spec.get("initializer") or {}
        wanted = {j.name for j in resolved.jobs if INITIALIZERS.get(str(j.ancestor)) in configured}
        if trainer is not None:
            wanted |= {str(d.get("name")) for d in trainer.depends_on if d.get("status") == "Complete"}
        ordered: list[str] = []

        def visit(name: str, seen: tuple[str, ...]) -> None:
            rjob = resolved.job(name)
            if rjob is None or name in ordered or name in seen:
                return
            for dep in rjob.depends_on:
                visit(str(dep.get("name")), (*seen, name))
            ordered.append(name)

        for name in [j.name for j in resolved.jobs if j.name in wanted]:
            visit(name, ())
        return [ReplicaId(name, 0) for name in ordered]

    def entrypoint(self, job: TrainingJob, replica: ReplicaId) -> list[str] | None:
        what = INITIALIZERS.get(str(getattr(source(job).resolved.job(replica.type), "ancestor", "")))
        return [sys.executable, "-m", "kftrain.programs.initializer", what] if what else None

    def workspace(self, job: TrainingJob) -> str | None:
        return "/workspace"  # pkg/constants/constants.go:55-62: /workspace/dataset, /workspace/model

    def listening_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        trainer = source(job).resolved.trainer_job
        if trainer is None:
            return []
        if self.framework(job) == "plain":  # each node may serve TensorFlow's workers (KFTRAIN_TF_WORKERS)
            return [ReplicaId(trainer.name, i) for i in range(trainer.count)]
        # Node 0 is the torch master, the JAX coordinator, the XGBoost tracker (the plugins' port 29500).
        return [ReplicaId(trainer.name, 0)] if self.framework(job) in ("torch", "jax", "xgboost") else []

    def restart_policy(self, job: TrainingJob, replica_type: str) -> RestartPolicy:
        """The runtime's, for the pods of that replicated Job (a TrainJob sets none)."""
        return _replicated_job(job, replica_type).restart_policy

    def backoff(self, job: TrainingJob, replica_type: str) -> Backoff:
        """JobSet makes each replicated job one batch Job, ``<jobset>-<replicated job>-0`` (Trainer's runtimes have
        one of each), whose controller restarts its pods and counts their failures together against the Job's
        backoffLimit; what follows when it fails is the JobSet's (:meth:`after_job_failure`)."""
        rjob = _replicated_job(job, replica_type)
        return Backoff(rjob.backoff_limit, job=f"{job.name}-{rjob.name}-0")

    def after_job_failure(self, job: TrainingJob, replica_type: str, counted_restarts: int) -> AfterJobFailure | None:
        """The runtime's JobSet failurePolicy decides (:mod:`.failure_policy`): fail the TrainJob, or recreate every
        Job of it; without one, as in Trainer's own runtimes, the JobSet fails with the Job, and the TrainJob with it
        (kubernetes-sigs/jobset@v0.12.0:pkg/controllers/failure_policy.go, executeFailurePolicy). Locally a Job fails
        only by reaching its backoffLimit."""
        policy = source(job).resolved.failure_policy
        if policy is None:
            return None
        rjob = _replicated_job(job, replica_type)
        return policy.after(rjob.name, BACKOFF_LIMIT_EXCEEDED, BACKOFF_LIMIT_MESSAGE, counted_restarts)

    def succeeded(self, job: TrainingJob, done: set[ReplicaId]) -> bool:
        targets = set(source(job).resolved.success_targets)
        wanted = [r for r in self.process_replicas(job) if r.type in targets]
        return all(r in done for r in wanted)

    def hosts_training(self, job: TrainingJob, replica_type: str) -> bool:
        return True

    def runs_mpirun(self, job: TrainingJob, replica: ReplicaId) -> bool:
        return self.framework(job) == "mpi" and replica.type == LAUNCHER

    def pod_hostname(self, job: TrainingJob, replica: ReplicaId) -> str:
        # JobSet makes one Indexed Job <jobset>-<replicated job>-<job index> of each replicated job (Trainer's runtimes
        # have one of each), and the Job controller gives the pod of completion index i the hostname <job name>-<i>
        # (kubernetes@v1.36.3:pkg/controller/job/job_controller.go, template.Spec.Hostname).
        return f"{job.name}-{replica.type}-0-{replica.index}"

    @staticmethod
    def runtimes_from_env() -> RuntimeCatalog:
        """The runtimes Trainer installs and those in ``KFTRAIN_TRAINER_RUNTIMES``: what a caller that reads its
        environment (the launch step, the CLI) passes as ``runtimes``."""
        return RuntimeCatalog.from_env()


def _replicated_job(job: TrainingJob, replica_type: str) -> ReplicatedJob:
    rjob = source(job).resolved.job(replica_type)
    if rjob is None:
        raise KeyError(f"{job.name}: the runtime has no replicated job {replica_type!r}")
    return rjob


def bundled_catalog(docs: Sequence[tuple[int, Mapping[str, Any]]], source: str, runtimes: Any) -> RuntimeCatalog:
    """The runtimes a file carries beside the TrainJob (``docs``: each YAML document with its index in ``source``),
    over ``runtimes`` (None: those Trainer installs); anything else in the file is refused."""
    found: list[Runtime] = []
    for i, doc in docs:
        if doc.get("kind") not in RUNTIME_KINDS:
            raise JobSpecError(
                f"{source}#{i}",
                f"{doc.get('kind')}: a TrainJob file holds the job and its TrainingRuntimes or "
                "ClusterTrainingRuntimes only (apply other objects with kubectl)",
            )
        found += [dataclasses.replace(r, bundled=True) for r in runtimes_of([doc], source, first_index=i)]
    base = runtimes if runtimes is not None else RuntimeCatalog()
    return RuntimeCatalog([*base.runtimes(), *found], builtin=False)


def runtime_difference(given: Any, served: Any, path: str) -> str | None:
    """The first field ``given`` sets that ``served`` lacks or holds another value of (None: none); what the API server
    defaulted on its copy (fields the file leaves unset) is not a difference."""
    if isinstance(given, Mapping):
        if not isinstance(served, Mapping):
            return path
        for key, value in given.items():
            if value is None:
                continue
            found = runtime_difference(value, served.get(key), f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(given, list):
        if not isinstance(served, list) or len(served) != len(given):
            return path
        for i, (a, b) in enumerate(zip(given, served, strict=True)):
            found = runtime_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if given == served or str(given) == str(served) else path


def _refuse_torchtune(trainer: Mapping[str, Any]) -> None:
    """A ``tune run`` command is rewritten by the torch plugin on a cluster (plugins/torch/torch.go:175-201: recipe,
    config and the runtime's overrides appended); kftrain does not rewrite it."""
    if list(trainer.get("command") or []) == ["tune", "run"]:
        raise JobSpecError(
            "spec.trainer.command",
            "['tune', 'run']: the torch plugin completes a torchtune command with its recipe and config on a "
            "cluster (plugins/torch/torch.go:175-201); kftrain runs it on a cluster only, not locally",
        )
