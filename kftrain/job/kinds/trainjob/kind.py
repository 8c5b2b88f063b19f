"""TrainJob: Kubeflow Trainer v2 (``trainer.kubeflow.org/v1alpha1``, v2.3.0), run as a JobSet from a runtime.

A TrainJob is loaded with the runtime it names (:mod:`.runtime`, from a :class:`~.catalog.RuntimeCatalog`) and becomes
a :class:`TrainingJob` whose replica specs are the resolved replicated jobs (``node``, ``launcher``, ...), one replica
per pod (job ``node``'s pod of completion index i is ``ReplicaId("node", i)``); its own spec is rendered back as given.
What each ML policy plugin adds to the ``node`` container is :mod:`.policies`'; what a node holds, :mod:`.nodes`'.
Locally every node is a process here; for MPI only the launcher runs (``mpirun`` starts the ranks), as for MPIJob.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.base import ClusterObject, Kind, KindSpec, MountedFile
from kftrain.job.kinds.restarts import AfterJobFailure, Backoff
from kftrain.job.kinds.trainjob import policies, torchtune
from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog, bundled_catalog, runtime_difference
from kftrain.job.kinds.trainjob.failure_policy import BACKOFF_LIMIT_EXCEEDED, BACKOFF_LIMIT_MESSAGE
from kftrain.job.kinds.trainjob.nodes import (
    HOSTFILE,
    TrainJobSource,
    gpus_per_node,
    mpi_hosts,
    mpi_slots,
    source,
    torch_nproc_per_node,
)
from kftrain.job.kinds.trainjob.policies import policy_of
from kftrain.job.kinds.trainjob.runtime import (
    API_VERSION,
    GROUP,
    INITIALIZERS,
    LAUNCHER,
    NAMESPACED_RUNTIME,
    NODE,
    ReplicatedJob,
    parse_runtime,
    resolve,
)
from kftrain.job.kinds.trainjob.webhooks import validate_patches, validate_trainjob
from kftrain.job.model import ObjectMeta, PodTemplate, ReplicaSpec, RestartPolicy, RunPolicy, TrainingJob
from kftrain.job.serde import from_dict, to_dict
from kftrain.job.topology import ReplicaId, Topology

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
    torchtune.complete(job)  # a `tune run` trainer's command, as the torch plugin completes it
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
        submitted = carry_changes(job, src.spec, src.resolved)
        validate_trainjob(submitted, src.resolved)
        torchtune.check(job, submitted)

    def check_local(self, job: TrainingJob) -> None:
        """A ``tune run`` trainer runs here only where torchtune imports with this environment's torch."""
        trainer = source(job).spec.get("trainer") or {}
        if list(trainer.get("command") or []) == torchtune.ENTRYPOINT and self.framework(job) == "torch":
            problem = torchtune.local_problem()
            if problem:
                raise JobSpecError("spec.trainer.command", f"{torchtune.ENTRYPOINT} runs locally only where "
                                   f"torchtune does: {problem}")  # fmt: skip

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
                plugin = policies.torch_env(
                    trainer.count, torch_nproc_per_node(job), replica.index, topology.host, topology.ports[node0]
                )
                if list(given.get("command") or []) == torchtune.ENTRYPOINT:  # torch.go:175-177: no master
                    plugin = [(k, v) for k, v in plugin if k not in ("PET_MASTER_ADDR", "PET_MASTER_PORT")]
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
        total = sum(count for _, count in mpi_hosts(job)) * mpi_slots(job)
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
