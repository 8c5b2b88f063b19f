"""What a job kind is: its static facts (:class:`KindSpec`) and its behaviour (:class:`Kind`); what the launch inputs
mean for it is :mod:`.options`', how its replicas restart :mod:`.restarts`'.

Every place that treats the kinds differently asks the job's :class:`Kind` (``kftrain.job.kinds.KINDS``) instead of
testing ``job.kind``: its replica types, the container the operator treats as the program, the webhooks' rules, the
env and files each replica gets, who runs and who listens, restarts and success, conversion between versions. One
package per kind (``kftrain.job.kinds.<kind>``) holds all of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.options import KindOptions
from kftrain.job.kinds.restarts import AfterJobFailure, Backoff
from kftrain.job.model import Container, JobSpec, RestartPolicy, TrainingJob
from kftrain.job.topology import ReplicaId, Topology, all_replicas

GROUP = "kubeflow.org"
# MultiKueue's controller name, which a job's managedBy may hand it to (kubeflow/training-operator@v1.9.0:
# pkg/apis/kubeflow.org/v1/common_types.go, MultiKueueController; mpi-operator@v0.8.2: v2beta1/types.go).
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
# What training-operator v1.9.0's webhooks take for runPolicy.managedBy (pkg/common/util/webhooks.go,
# ValidateRunPolicy; its own name: common_types.go, KubeflowJobsController).
TRAINING_OPERATOR_MANAGERS = ("kubeflow.org/training-operator", MULTIKUEUE)


@dataclass(frozen=True)
class OperatorContainer:
    """A container the operator adds to a replica's pod, and what a cluster does where it cannot run as it comes."""

    # The image the operator gives it unless its own settings name another.
    default_image: str
    # Where its securityContext comes from: how a cluster gives it one (Pod Security ``restricted``).
    security_context: str
    # Where its image comes from: how a cluster that cannot pull it (no access to that registry) names another.
    image: str


@dataclass(frozen=True)
class KindSpec:
    """The static facts of one kind at one API version, as the CRD and the operator define them."""

    kind: str
    api_version: str
    plural: str
    replica_key: str
    # Every replica type the operator knows, in its canonical order (the order manifests are rendered in).
    replica_types: tuple[str, ...]
    # Replica types that must be a single pod.
    singletons: frozenset[str]
    # The container the operator injects its contract into; None means "the first one".
    default_container: str | None
    # The name a job built from inputs gives its one container (the operator's conventional name).
    container_name: str
    # The kind's own spec fields (a JobSpec subclass), and which of them this version accepts (None: all).
    spec_type: type[JobSpec] = JobSpec
    spec_fields: frozenset[str] | None = None
    # Replica types the launch inputs always create, one each (the PyTorchJob Master, the MPIJob Launcher).
    fixed_replicas: tuple[str, ...] = ()
    # Whether the Workers run the job's program; MPIJob Workers only host the ranks mpirun starts.
    workers_run_program: bool = True
    # The API group serving the kind, and the label its controller puts on every pod with the job's name.
    group: str = GROUP
    pod_job_label: str = "training.kubeflow.org/job-name"
    # The name its controller gives itself on every pod, under the key both operators share
    # (training.kubeflow.org/operator-name: kubeflow/training-operator@v1.9.0:pkg/apis/kubeflow.org/v1/common_types.go,
    # OperatorNameLabel); None: its pods have no such label (a TrainJob's are JobSet's).
    operator_name: str | None = None
    # Where the manifest says the job is suspended (what Kueue sets and clears).
    suspend_field: str = "spec.runPolicy.suspend"
    # Where the manifest holds the run policy's fields (backoffLimit, activeDeadlineSeconds...): the operators' jobs
    # in spec.runPolicy; a TrainJob has no runPolicy, its spec holds the few it has.
    run_policy_field: str = "spec.runPolicy"
    # The controllers runPolicy.managedBy may name (the operator's own and MultiKueue's); empty: not checked here.
    managers: tuple[str, ...] = ()
    # The restart policies a replica spec may have; None: every one of :class:`RestartPolicy`.
    restart_policies: tuple[RestartPolicy, ...] | None = None
    # The reasons of the Warning events its controllers record when the API server refuses a pod of the job: the
    # training-operator's on the job (kubeflow/training-operator@v1.9.0:pkg/controller.v1/control/pod_control.go,
    # FailedCreatePodReason). What the launch step reads, each a request, while the job has no pod.
    create_failed_reasons: tuple[str, ...] = ("FailedCreatePod",)
    # The replicas of a type whose replica spec leaves them unset, as the operator's defaulting sets them; types
    # not named default to 1 (kubeflow/training-operator@v1.9.0:pkg/apis/kubeflow.org/v1/defaulting_utils.go,
    # setDefaultReplicas, called with 1 by every kind's defaults but MPIJob's Worker).
    unset_replicas: Mapping[str, int] = dataclasses.field(default_factory=dict)
    # Containers the operator adds to the pods it creates, by name: the job's manifest cannot change them, so the step
    # names the cluster's fix when admission refuses one of them or its image cannot be pulled.
    operator_containers: Mapping[str, OperatorContainer] = dataclasses.field(default_factory=dict)

    @property
    def version(self) -> str:
        return self.api_version.split("/", 1)[1]

    def accepts(self, attribute: str) -> bool:
        """Whether this version has the spec field ``attribute`` of :attr:`spec_type`."""
        return self.spec_fields is None or attribute in self.spec_fields

    def check_restart_policy(self, policy: RestartPolicy, field: str) -> None:
        """Refuse ``policy`` (the value of ``field``) where this kind's operator does not take it."""
        if self.restart_policies is not None and policy not in self.restart_policies:
            allowed = ", ".join(p.value for p in self.restart_policies)
            raise JobSpecError(field, f"{policy.value!r} is not one {self.kind} {self.version} takes: {allowed}")


@dataclass(frozen=True)
class MountedFile:
    """A file the operator mounts into a replica's pod (from a ConfigMap), with its mode."""

    content: str
    mode: int = 0o444


# Istio injects its proxy into every pod of a namespace labelled for injection, as a Kubeflow profile namespace is,
# unless the pod's template says otherwise; a training pod with the proxy never completes (the proxy outlives the
# program), so the job never ends. The operators' own SDK sets this on every pod template it makes
# (kubeflow/training-operator@v1.9.0:sdk/python/kubeflow/training/constants/constants.py, ISTIO_SIDECAR_INJECTION;
# utils/utils.py, get_pod_template_spec), and their guides say every training pod needs it
# (kubeflow/trainer@v2.3.0:docs/legacy-v1/user-guides/pytorch.md).
ISTIO_INJECT_ANNOTATION = "sidecar.istio.io/inject"


def without_mesh_sidecars(job: TrainingJob) -> None:
    """Ask Istio not to inject its proxy into any replica's pod of ``job``, any kind (a TrainJob's replica specs are
    its runtime's jobs: the annotation reaches them as a runtime patch, kinds.trainjob.patch), unless the template
    already says what it wants (``"true"`` is kept)."""
    for rspec in job.replica_specs.values():
        meta = dict(rspec.template.metadata or {})
        annotations = dict(meta.get("annotations") or {})
        if ISTIO_INJECT_ANNOTATION in annotations:
            continue
        meta["annotations"] = {**annotations, ISTIO_INJECT_ANNOTATION: "false"}
        rspec.template.metadata = meta


@dataclass(frozen=True)
class ClusterObject:
    """A custom object a job depends on: where the API serves it, and ``check`` to run on what it serves."""

    group: str
    version: str
    kind: str
    plural: str
    name: str
    namespaced: bool
    # Raises a JobSpecError when the object served does not fit the job as it was built.
    check: Callable[[Mapping[str, Any]], None]
    # The object to create when the cluster has none of that name (a TrainingRuntime the job's file carries); None:
    # the cluster must already have it.
    create: Mapping[str, Any] | None = None
    # Why the cluster must already have it, when ``create`` is None and it has not (what to do instead).
    missing_hint: str = "install it, or name one it has"


class Kind:
    """The behaviour of one kind; the defaults are what the operators share."""

    def __init__(
        self,
        spec: KindSpec,
        options: type[KindOptions] = KindOptions,
        converter: Callable[[Kind, TrainingJob, str | None], Any] | None = None,
    ) -> None:
        self.spec = spec
        self.options = options
        self.converter = converter

    def __repr__(self) -> str:
        return f"<Kind {self.spec.kind} {self.spec.api_version}>"

    # -- the manifest ------------------------------------------------------------------------------

    def main_container_name(self, job: TrainingJob, replica_type: str) -> str | None:
        """The container of ``replica_type`` that runs the replica's program; None: the first one."""
        return self.spec.default_container

    def main_container(self, job: TrainingJob, replica_type: str) -> Container | None:
        """The container of ``replica_type`` the operator treats as its program (by name, else the first)."""
        containers = job.replica_specs[replica_type].template.spec.containers
        name = self.main_container_name(job, replica_type)
        return next((c for c in containers if c.name == name), containers[0] if containers else None)

    def validate(self, job: TrainingJob) -> None:
        """The kind's own rules, beyond what every kind checks (kftrain.job.validate)."""

    def check_local(self, job: TrainingJob) -> None:
        """Refuse ``job`` (a :class:`~kftrain.errors.JobSpecError`, one line) when it cannot run on this machine."""

    def replica_types(self, job: TrainingJob) -> tuple[str, ...]:
        """The replica types ``job`` may have: the kind's fixed set (a TrainJob's come from its runtime)."""
        return self.spec.replica_types

    def load(self, data: Mapping[str, Any], *, runtimes: Any = None) -> TrainingJob | None:
        """``data`` as a job when the kind has its own manifest shape; None: the operators' replica-spec shape.

        ``runtimes`` is what the job may name outside itself (a TrainJob's runtime catalog)."""
        return None

    def render(self, job: TrainingJob) -> dict[str, Any] | None:
        """The manifest of ``job`` when the kind has its own shape; None: the operators' replica-spec shape."""
        return None

    def with_companions(self, docs: Sequence[tuple[int, Mapping[str, Any]]], source: str, runtimes: Any) -> Any:
        """``runtimes`` with what a manifest file holds beside the job (``docs``: each YAML document with its index in
        ``source``), which it must take: a TrainJob takes its runtimes; no other kind takes anything."""
        if docs:
            i, doc = docs[0]
            raise JobSpecError(
                f"{source}#{i}",
                f"{doc.get('kind')}: a {self.spec.kind} file holds the job alone (apply other objects with kubectl)",
            )
        return runtimes

    def companions(self, job: TrainingJob) -> list[Mapping[str, Any]]:
        """The objects ``job``'s file carried beside it (:meth:`with_companions`), as they are applied with it."""
        return []

    def runtimes_from_env(self) -> Any:
        """What a job of this kind may name outside itself, as this environment provides it (a TrainJob's runtime
        catalog), for a caller to pass to :meth:`load` as ``runtimes``; None: nothing."""
        return None

    def replicas_path(self) -> str:
        return f"spec.{self.spec.replica_key}"

    def replica_count_field(self, job: TrainingJob, replica_type: str) -> str:
        """The field of the manifest that sets ``replica_type``'s pod count (what an error about the count names)."""
        return f"{self.replicas_path()}.{replica_type}.replicas"

    def least_replicas(self, job: TrainingJob, replica_type: str) -> int:
        """The fewest pods ``replica_type`` may have, as the field :meth:`replica_count_field` names allows."""
        return 0

    def summary(self, job: TrainingJob) -> dict[str, object]:
        """Facts of ``job`` worth showing beside its name (MPIJob: its slots)."""
        return {}

    def cluster_dependency(self, job: TrainingJob) -> ClusterObject | None:
        """An object the cluster must already hold for the job to run (a TrainJob's runtime); None: nothing."""
        return None

    def convert(self, job: TrainingJob, api_version: str) -> TrainingJob:
        """``job`` rendered for ``api_version`` of the same kind."""
        if api_version != job.api_version:
            raise JobSpecError("apiVersion", f"{job.kind} cannot be converted to {api_version}")
        return job

    def to_trainjob(self, job: TrainingJob, runtime: str | None) -> Any:
        """``job`` as a Kubeflow Trainer v2 TrainJob on ``runtime`` (a ``kinds.trainjob.convert.Conversion``), by the
        converter the kind was registered with."""
        if self.converter is None:
            raise JobSpecError("kind", f"{job.kind} cannot be converted to a TrainJob (PyTorchJob and MPIJob can)")
        return self.converter(self, job, runtime)

    # -- the operator's contract for each replica ---------------------------------------------------

    def operator_env(self, job: TrainingJob, replica: ReplicaId, topology: Topology) -> list[tuple[str, str]]:
        """The variables the operator appends to the replica's main container, in the operator's order."""
        raise NotImplementedError

    def operator_files(self, job: TrainingJob, topology: Topology) -> dict[str, MountedFile]:
        """Files the operator mounts into the pods, by absolute path (the MPI hostfile)."""
        return {}

    def membership_files(
        self, job: TrainingJob, topology: Topology, running: Sequence[ReplicaId]
    ) -> dict[str, MountedFile]:
        """Mounted files the operator rewrites as Worker pods start and stop, for the ``running`` Workers (a v1
        MPIJob's ``discover_hosts.sh``); :meth:`operator_files` includes them as they are at the start."""
        return {}

    def default_restart_policy(self, job: TrainingJob, replica_type: str) -> RestartPolicy:
        """The operator's restart policy for a replica spec that leaves it unset."""
        return RestartPolicy.NEVER

    def restart_policy(self, job: TrainingJob, replica_type: str) -> RestartPolicy:
        """The restart policy replicas of ``replica_type`` run under: their spec's, else the operator's default."""
        return job.replica_specs[replica_type].restart_policy or self.default_restart_policy(job, replica_type)

    def backoff(self, job: TrainingJob, replica_type: str) -> Backoff:
        """How failures of ``replica_type``'s replicas are counted: by the operator, across the job, against
        ``runPolicy.backoffLimit``."""
        return Backoff(job.run_policy.backoff_limit)

    def after_job_failure(self, job: TrainingJob, replica_type: str, counted_restarts: int) -> AfterJobFailure | None:
        """What follows when the batch Job that runs ``replica_type``'s replicas (:meth:`backoff`'s ``job``) fails,
        the whole job having been restarted ``counted_restarts`` times that count towards a limit; None: the job
        fails with it (mpi-operator's launcher Job; a TrainJob whose runtime has no failurePolicy)."""
        return None

    def succeeded(self, job: TrainingJob, done: set[ReplicaId]) -> bool:
        """Whether the replicas that exited successfully complete the job, per the kind's success rule."""
        raise NotImplementedError

    def survives_loss(self, job: TrainingJob, replica: ReplicaId, workers_left: int) -> bool:
        """Whether the job goes on when ``replica`` has failed for good and ``workers_left`` Workers still run."""
        return False

    def worker_bounds(self, job: TrainingJob) -> tuple[int, int | None] | None:
        """The fewest and most (None: no most) Workers an elastic job may be scaled to; None: not elastic."""
        return None

    def hosts_training(self, job: TrainingJob, replica_type: str) -> bool:
        """Whether replicas of this type run training processes, and so get GPUs and a large /dev/shm (an MPI
        launcher that only runs mpirun does not)."""
        return True

    # -- who runs what, and who listens ----------------------------------------------------------------

    def process_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        """The replicas that run a program of their own."""
        return all_replicas(job)

    def listening_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        """The replicas others connect to (the operator's Services point at them)."""
        return []

    def rendezvous_host(self, job: TrainingJob) -> ReplicaId | None:
        """The replica whose host name matches an elastic job's rendezvous endpoint, so it hosts the store."""
        return None

    def pod_hostname(self, job: TrainingJob, replica: ReplicaId) -> str:
        """The host name of ``replica``'s pod, what the kubelet sets ``HOSTNAME`` to: its spec.hostname, else its name
        (training-operator names its pods ``<job>-<type>-<index>`` and sets no hostname)."""
        return f"{job.name}-{replica.label}"

    def initializer_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        """Replicas that run to completion, in this order, before :meth:`process_replicas` start (a TrainJob's dataset
        and model initializers)."""
        return []

    def entrypoint(self, job: TrainingJob, replica: ReplicaId) -> list[str] | None:
        """What runs locally in place of the image's entrypoint of ``replica``'s main container when it has no command
        (a TrainJob initializer's: kftrain's own); None: nothing, the command must be given."""
        return None

    def workspace(self, job: TrainingJob) -> str | None:
        """The absolute path the job's pods share data at (a TrainJob's ``/workspace``), given to the replicas locally
        as the job's own folder; None: none."""
        return None

    def reports_status(self, job: TrainingJob) -> bool:
        """Whether the controller serves the job's nodes an endpoint to post their progress to (a TrainJob's status
        server): the local backend then serves it too (:attr:`Topology.status`)."""
        return False

    def expected_pods(self, obj: Mapping[str, Any]) -> int | None:
        """How many pods the operator keeps for the job ``obj`` (as the API server holds it) while it runs: one
        per replica of every replica spec; None where the job alone does not say."""
        specs = (obj.get("spec") or {}).get(self.spec.replica_key)
        if not isinstance(specs, Mapping):
            return None
        total = 0
        for rtype, rspec in specs.items():
            replicas = (rspec or {}).get("replicas") if isinstance(rspec, Mapping) else None
            total += int(replicas) if isinstance(replicas, int) else self.spec.unset_replicas.get(rtype, 1)
        return total

    def reported_progress(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The progress the job's nodes reported, as the API server holds it in the job object ``obj`` (a
        TrainJob's ``status.trainerStatus``); None: none."""
        return None

    def runs_mpirun(self, job: TrainingJob, replica: ReplicaId) -> bool:
        """Whether ``replica``'s program is mpirun, starting ranks on the hosts of the operator's hostfile."""
        return False
