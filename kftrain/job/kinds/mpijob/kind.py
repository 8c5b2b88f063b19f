"""MPIJob: mpi-operator's ``kubeflow.org/v2beta1`` and the training-operator's ``kubeflow.org/v1``.

Only the Launcher runs a program (``mpirun``); Workers host the ranks (ssh in v2beta1, ``kubectl exec`` in v1). The
operator mounts a hostfile of each worker and its slots and points the launcher's MPI at it; a v1 launcher also gets
elastic Horovod's ``/etc/mpi/discover_hosts.sh`` (:func:`discover_hosts`). Success: the Launcher succeeds. Locally
every host is this machine: the hostfile is one ``localhost`` line of all the slots, and the discovery script names
each worker as the topology's ``host_of`` says (:mod:`kftrain.backends.local.mpi`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Sequence

from kftrain.errors import JobSpecError
from kftrain.job import pod_checks as check
from kftrain.job.kinds.base import MULTIKUEUE, Kind, KindSpec, MountedFile, OperatorContainer
from kftrain.job.kinds.mpijob.options import V1, V2BETA1
from kftrain.job.kinds.mpijob.spec import LauncherCreationPolicy, MPIImplementation, MPIJobSpec
from kftrain.job.kinds.restarts import JOB_DEFAULT_BACKOFF_LIMIT, Backoff
from kftrain.job.model import RestartPolicy, RunPolicy, TrainingJob
from kftrain.job.topology import ReplicaId, Topology

HOSTFILE = "/etc/mpi/hostfile"
# training-operator v1: elastic Horovod's host-discovery script (mode 0555, like kubexec.sh).
DISCOVER_HOSTS = "/etc/mpi/discover_hosts.sh"
# training-operator v1: mpirun's remote shell, `kubectl exec` into the worker pod (locally: a shell here).
KUBEXEC = "/etc/mpi/kubexec.sh"
I_MPI_DEFAULT_BOOTSTRAP = "rsh"
_LOCAL_KUBEXEC = """#!/bin/sh
# On a cluster: kubectl exec ${POD_NAME} [--container MAIN] -- /bin/sh -c "$*". Here every pod is this machine.
POD_NAME=$1
shift
exec /bin/sh -c "$*"
"""
LAUNCHER = ReplicaId("Launcher", 0)

_COMMON_FIELDS = frozenset({"run_policy", "slots_per_worker"})
_V2BETA1_FIELDS = {"ssh_auth_mount_path", "launcher_creation_policy", "run_launcher_as_worker", "mpi_implementation"}
SPEC_V2BETA1 = KindSpec(
    kind="MPIJob",
    api_version=V2BETA1,
    plural="mpijobs",
    replica_key="mpiReplicaSpecs",
    replica_types=("Launcher", "Worker"),
    singletons=frozenset({"Launcher"}),
    default_container=None,
    container_name="mpi",
    spec_type=MPIJobSpec,
    spec_fields=_COMMON_FIELDS | _V2BETA1_FIELDS,
    fixed_replicas=("Launcher",),
    workers_run_program=False,
    # kubeflow/mpi-operator@v0.8.2:pkg/apis/kubeflow/v2beta1/constants.go, OperatorName
    operator_name="mpi-operator",
    # What the controller's validation takes (mpi-operator@v0.8.2:pkg/apis/kubeflow/validation/validation.go,
    # validManagedBy and validRestartPolicies); it refuses anything else with a ValidationError event, and never
    # runs the job.
    managers=("kubeflow.org/mpi-operator", MULTIKUEUE),
    restart_policies=(RestartPolicy.NEVER, RestartPolicy.ON_FAILURE),
    # mpi-operator's own on the MPIJob for a worker pod it could not create (pkg/controller/mpi_job_controller.go,
    # "worker pod created failed"; mpi_job_controller_status.go, mpiJobFailedReason), and the Job controller's on
    # the launcher's Job (kubernetes@v1.36.3:pkg/controller/job/job_controller.go, FailedCreatePodReason).
    create_failed_reasons=("MPIJobFailed", "FailedCreate"),
    # pkg/apis/kubeflow/v2beta1/default.go, setDefaultsTypeWorker (the Launcher's default is 1).
    unset_replicas={"Worker": 0},
)
# training-operator v1.9.0's --mpi-kubectl-delivery-image unless set (pkg/config/config.go,
# MPIKubectlDeliveryImageDefault).
KUBECTL_DELIVERY_IMAGE = "kubeflow/kubectl-delivery:latest"

SPEC_V1 = dataclasses.replace(
    SPEC_V2BETA1,
    api_version=V1,
    # The controller injects into the launcher's first container; mainContainer names the worker container
    # that `kubectl exec` runs the ranks in (pkg/controller.v1/mpi/mpijob_controller.go, newLauncher, newConfigMap).
    spec_fields=_COMMON_FIELDS | {"main_container", "clean_pod_policy"},
    # kubeflow/training-operator@v1.9.0:pkg/controller.v1/mpi/mpijob_controller.go, controllerName
    operator_name="mpijob-controller",
    # training-operator v1.9.0 has no MPIJob webhook (pkg/webhooks/), and mpi-operator's rules are not its own.
    managers=(),
    restart_policies=None,
    create_failed_reasons=("FailedCreatePod",),  # training-operator's, as for its other kinds
    # kubeflow/training-operator@v1.9.0:pkg/apis/kubeflow.org/v1/mpi_defaults.go, SetDefaults_MPIJob.
    unset_replicas={"Worker": 0},
    # pkg/controller.v1/mpi/mpijob_controller.go, newLauncher: every launcher pod gets it, with no securityContext
    # and no setting of the operator's to give it one; its image is --mpi-kubectl-delivery-image
    # (cmd/training-operator.v1/main.go; default: pkg/config/config.go).
    operator_containers={
        "kubectl-delivery": OperatorContainer(
            default_image=KUBECTL_DELIVERY_IMAGE,
            security_context="training-operator v1.9 gives it no securityContext and has no setting for one: run "
            "the job as an MPIJob v2beta1 (mpi-operator), which adds no container",
            image="training-operator adds it to the launcher of an MPIJob v1, with the image of its "
            f"--mpi-kubectl-delivery-image (default {KUBECTL_DELIVERY_IMAGE}, from Docker Hub): a cluster that "
            "cannot pull that one starts the operator with an image it can, or runs the job as an MPIJob v2beta1 "
            "(mpi-operator), which adds no container",
        )
    },
)


def _validate_for_mpi_operator(job: TrainingJob, path: str) -> None:
    """What mpi-operator v0.8.2's controller refuses beyond the rules of every MPIJob version
    (pkg/apis/kubeflow/validation/validation.go, ValidateMPIJob): it records a ValidationError event and never runs
    the job, so the step would wait out its pending timeout."""
    if "Worker" in job.replica_specs and job.replicas_of("Worker") < 1:  # validateWorkerReplicaSpec
        raise JobSpecError(
            f"{path}.Worker.replicas", "must be >= 1 (leave Worker out for a job whose Launcher is its only worker)"
        )
    # validateMPIJobName: the last Worker's host name (its pod's and its Service's name) must be a DNS-1035 label.
    name = job.metadata.name or (job.metadata.generate_name or "") + "x" * check.GENERATED_NAME_SUFFIX
    host = f"{name}-worker-{max(job.replicas_of('Worker'), 1) - 1}"
    if len(host) > check.LABEL_MAX:
        field = "metadata.name" if job.metadata.name else "metadata.generateName"
        raise JobSpecError(
            field,
            f"too long for the job's Workers: the last one's host name, {host!r}, would have {len(host)} "
            f"characters, over {check.LABEL_MAX}",
        )


def spec(job: TrainingJob) -> MPIJobSpec:
    assert isinstance(job.spec, MPIJobSpec), f"{job.kind} {job.name} is not an MPIJob"
    return job.spec


def slots_per_worker(job: TrainingJob) -> int:
    return spec(job).slots_per_worker or 1


def total_slots(job: TrainingJob) -> int:
    hosts = job.replicas_of("Worker") + (1 if spec(job).run_launcher_as_worker else 0)
    return hosts * slots_per_worker(job)


def hostfile(job: TrainingJob, host: str | None = None, *, merge_hosts: bool = False) -> str:
    """The hostfile the operator writes; ``host`` replaces the per-pod DNS names.

    With ``merge_hosts`` every slot lands on one ``host`` line, which is what mpirun needs when all
    "workers" are the same machine.
    """
    slots = slots_per_worker(job)
    impl = spec(job).mpi_implementation or MPIImplementation.OPENMPI
    v1 = job.api_version == V1

    def pod_host(pod: str) -> str:
        # v1 reaches pods by `kubectl exec <pod>`; v2beta1 by DNS through the job's headless service.
        return pod if v1 else f"{pod}.{job.name}.{job.metadata.namespace or 'default'}.svc"

    hosts: list[str] = []
    if spec(job).run_launcher_as_worker or (v1 and _launcher_asks_for_gpu(job)):
        hosts.append(host or pod_host(f"{job.name}-launcher"))
    for i in range(job.replicas_of("Worker")):
        hosts.append(host or pod_host(f"{job.name}-worker-{i}"))
    entries = [(hosts[0], slots * len(hosts))] if merge_hosts and hosts else [(h, slots) for h in hosts]
    if impl == MPIImplementation.OPENMPI:
        return "".join(f"{h} slots={n}\n" for h, n in entries)
    return "".join(f"{h}:{n}\n" for h, n in entries)


def discover_hosts(
    job: TrainingJob, running: Iterable[ReplicaId], host_of: Callable[[ReplicaId], str] | None = None
) -> str:
    """The v1 controller's ``discover_hosts.sh`` for the ``running`` worker pods (training-operator v1.9.0,
    ``updateDiscoverHostsInConfigMap``): ``#!/bin/sh``, the launcher first when it asks for a GPU, then one
    ``echo <pod>:<slots>`` per running worker sorted by pod name; no final newline.

    ``host_of`` names the hosts (None: by their pod names, as on a cluster).
    """
    slots = slots_per_worker(job)

    def host(replica: ReplicaId) -> str:
        if host_of is not None:
            return host_of(replica)
        return f"{job.name}-launcher" if replica == LAUNCHER else f"{job.name}-{replica.label}"

    pods = sorted((f"{job.name}-{r.label}", r) for r in running if r.type == "Worker")
    script = "#!/bin/sh"
    if _launcher_asks_for_gpu(job):
        script += f"\necho {host(LAUNCHER)}:{slots}\n"
    for _, replica in pods:
        script += f"\necho {host(replica)}:{slots}"
    return script


def _launcher_asks_for_gpu(job: TrainingJob) -> bool:
    """training-operator v1 lists a launcher that asks for a GPU in the hostfile, first."""
    for container in job.replica_specs["Launcher"].template.spec.containers:
        limits = (container.resources or {}).get("limits") or {}
        if any("gpu" in key for key in limits):
            return True
    return False


class MPIJobV2Beta1Kind(Kind):
    def validate(self, job: TrainingJob) -> None:
        path = self.replicas_path()
        if "Launcher" not in job.replica_specs:
            raise JobSpecError(f"{path}.Launcher", "missing: an MPIJob runs mpirun from its Launcher replica")
        if job.replicas_of("Launcher") != 1:
            raise JobSpecError(f"{path}.Launcher.replicas", "an MPIJob needs exactly 1 Launcher")
        slots = spec(job).slots_per_worker
        if slots is not None and slots < 1:
            raise JobSpecError("spec.slotsPerWorker", f"must be >= 1, got {slots}")
        if job.replicas_of("Worker") == 0 and not spec(job).run_launcher_as_worker:
            raise JobSpecError(f"{path}.Worker", "an MPIJob needs at least 1 Worker (or runLauncherAsWorker: true)")
        if job.api_version == V2BETA1:
            _validate_for_mpi_operator(job, path)

    def operator_env(self, job: TrainingJob, replica: ReplicaId, topology: Topology) -> list[tuple[str, str]]:
        env = [("K_MPI_JOB_ROLE", replica.type.lower())]
        if replica != LAUNCHER:
            return env
        path = str(topology.file(HOSTFILE))
        slots = str(slots_per_worker(job))
        impl = spec(job).mpi_implementation or MPIImplementation.OPENMPI
        if impl == MPIImplementation.OPENMPI:
            env += [
                ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                ("OMPI_MCA_orte_default_hostfile", path),
                ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                ("OMPI_MCA_orte_set_default_slots", slots),
            ]
        elif impl == MPIImplementation.INTEL:
            env += [
                ("I_MPI_HYDRA_HOST_FILE", path),
                ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10"),
                ("I_MPI_PERHOST", slots),
            ]
        else:
            env += [("HYDRA_HOST_FILE", path), ("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10")]
        if not spec(job).run_launcher_as_worker:
            # mpi-operator hides GPUs from a launcher that is not also a worker.
            env += [("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
        return env

    def operator_files(self, job: TrainingJob, topology: Topology) -> dict[str, MountedFile]:
        return {HOSTFILE: MountedFile(hostfile(job, topology.host, merge_hosts=True))}

    def default_restart_policy(self, job: TrainingJob, replica_type: str) -> RestartPolicy:
        return RestartPolicy.ON_FAILURE if replica_type == "Launcher" else RestartPolicy.NEVER

    def backoff(self, job: TrainingJob, replica_type: str) -> Backoff:
        """mpi-operator runs the launcher as a batch Job, ``<job>-launcher``, given ``runPolicy.backoffLimit`` (the
        Job's default when unset) and the launcher's restart policy (ExitCode is refused): the Job controller
        restarts it (kubeflow/mpi-operator@v0.8.2:pkg/controller/mpi_job_controller.go, newLauncherJob,
        setRestartPolicy), and the MPIJob fails when that Job does."""
        if replica_type != "Launcher":
            return super().backoff(job, replica_type)
        limit = job.run_policy.backoff_limit
        return Backoff(JOB_DEFAULT_BACKOFF_LIMIT if limit is None else limit, job=f"{job.name}-launcher")

    def succeeded(self, job: TrainingJob, done: set[ReplicaId]) -> bool:
        return LAUNCHER in done

    def hosts_training(self, job: TrainingJob, replica_type: str) -> bool:
        return replica_type != "Launcher" or bool(spec(job).run_launcher_as_worker)

    def process_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        return [LAUNCHER]  # Workers only host the ranks that mpirun starts

    def runs_mpirun(self, job: TrainingJob, replica: ReplicaId) -> bool:
        return replica == LAUNCHER

    def pod_hostname(self, job: TrainingJob, replica: ReplicaId) -> str:
        # The launcher is <job>-launcher, without an index: its pod's hostname in v2beta1, whose pod a batch Job names
        # (kubeflow/mpi-operator@v0.8.2:pkg/controller/mpi_job_controller.go, newLauncherPodTemplate: Hostname =
        # launcherName), and its pod's name in v1 (kubeflow/training-operator@v1.9.0:pkg/controller.v1/mpi/mpijob.go,
        # launcherSuffix).
        return f"{job.name}-launcher" if replica == LAUNCHER else super().pod_hostname(job, replica)

    def summary(self, job: TrainingJob) -> dict[str, object]:
        return {"slots": total_slots(job)}

    def convert(self, job: TrainingJob, api_version: str) -> TrainingJob:
        if api_version == job.api_version:
            return copy.deepcopy(job)
        if api_version == V1:
            return to_v1(job)
        if api_version == V2BETA1:
            return to_v2beta1(job)
        raise JobSpecError("apiVersion", f"{api_version!r} is not an MPIJob version")


class MPIJobV1Kind(MPIJobV2Beta1Kind):
    """training-operator v1.9.0 (``pkg/controller.v1/mpi/mpijob_controller.go``, ``newLauncher``): the launcher's
    first container gets ``OMPI_MCA_plm_rsh_agent`` (kubexec.sh) and ``OMPI_MCA_orte_default_hostfile``, the
    emptied ``NVIDIA_*`` variables unless the launcher asks for a GPU, and Intel MPI's ``I_MPI_HYDRA_BOOTSTRAP``
    and ``I_MPI_HYDRA_BOOTSTRAP_EXEC`` unless that container sets them; Workers get nothing; no
    ``K_MPI_JOB_ROLE``; restart policy Never by default."""

    def main_container_name(self, job: TrainingJob, replica_type: str) -> str | None:
        return spec(job).main_container if replica_type == "Worker" else None

    def operator_env(self, job: TrainingJob, replica: ReplicaId, topology: Topology) -> list[tuple[str, str]]:
        if replica != LAUNCHER:
            return []
        kubexec = str(topology.file(KUBEXEC))
        env = [
            ("OMPI_MCA_plm_rsh_agent", kubexec),
            ("OMPI_MCA_orte_default_hostfile", str(topology.file(HOSTFILE))),
        ]
        if not _launcher_asks_for_gpu(job):
            env += [("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
        containers = job.replica_specs["Launcher"].template.spec.containers
        own = {e.name for e in (containers[0].env or [])} if containers else set()
        if "I_MPI_HYDRA_BOOTSTRAP" not in own:
            env.append(("I_MPI_HYDRA_BOOTSTRAP", I_MPI_DEFAULT_BOOTSTRAP))
        if "I_MPI_HYDRA_BOOTSTRAP_EXEC" not in own:
            env.append(("I_MPI_HYDRA_BOOTSTRAP_EXEC", kubexec))
        return env

    def operator_files(self, job: TrainingJob, topology: Topology) -> dict[str, MountedFile]:
        workers = [ReplicaId("Worker", i) for i in range(job.replicas_of("Worker"))]
        return {
            **super().operator_files(job, topology),
            KUBEXEC: MountedFile(_LOCAL_KUBEXEC, 0o555),
            **self.membership_files(job, topology, workers),
        }

    def membership_files(
        self, job: TrainingJob, topology: Topology, running: Sequence[ReplicaId]
    ) -> dict[str, MountedFile]:
        return {DISCOVER_HOSTS: MountedFile(discover_hosts(job, running, topology.host_of), 0o555)}

    def default_restart_policy(self, job: TrainingJob, replica_type: str) -> RestartPolicy:
        return RestartPolicy.NEVER

    def backoff(self, job: TrainingJob, replica_type: str) -> Backoff:
        # training-operator runs the launcher as a pod of its own (pkg/controller.v1/mpi/mpijob_controller.go,
        # newLauncher), counted with the job's other pods.
        return Kind.backoff(self, job, replica_type)


def to_v1(job: TrainingJob) -> TrainingJob:
    """A v2beta1 MPIJob (mpi-operator) as a kubeflow.org/v1 MPIJob (training-operator).

    v1 has no sshAuthMountPath, launcherCreationPolicy, runLauncherAsWorker or mpiImplementation. Fields
    whose non-default value would change what runs are refused rather than silently dropped.
    """
    out = copy.deepcopy(job)
    mpi = spec(out)
    if mpi.run_launcher_as_worker:
        raise JobSpecError("spec.runLauncherAsWorker", "is true, which kubeflow.org/v1 MPIJob cannot express")
    if mpi.launcher_creation_policy not in (None, LauncherCreationPolicy.AT_STARTUP):
        raise JobSpecError(
            "spec.launcherCreationPolicy",
            f"{mpi.launcher_creation_policy.value} is not supported by kubeflow.org/v1 MPIJob",
        )
    if mpi.mpi_implementation == MPIImplementation.MPICH:
        raise JobSpecError("spec.mpiImplementation", "MPICH is not supported by kubeflow.org/v1 MPIJob")
    # v1 reaches workers with kubectl exec, not ssh, and reads Intel MPI from env: nothing to keep.
    mpi.ssh_auth_mount_path = None
    mpi.launcher_creation_policy = None
    mpi.run_launcher_as_worker = None
    mpi.mpi_implementation = None
    out.api_version = V1  # both put the launcher's contract in its first container; the workers' first runs the ranks
    return out


def to_v2beta1(job: TrainingJob) -> TrainingJob:
    """A kubeflow.org/v1 MPIJob as a v2beta1 one: the workers' mainContainer first, spec.cleanPodPolicy into
    runPolicy."""
    out = copy.deepcopy(job)
    mpi = spec(out)
    main = mpi.main_container
    workers = out.replica_specs.get("Worker")
    if main and workers is not None:
        # v2beta1 has no mainContainer: mpirun reaches the workers' first container.
        containers = workers.template.spec.containers
        idx = next((i for i, c in enumerate(containers) if c.name == main), 0)
        containers.insert(0, containers.pop(idx))
    if mpi.clean_pod_policy is not None:
        run_policy = mpi.run_policy or RunPolicy()
        if run_policy.clean_pod_policy is None:  # v1 lets runPolicy win when both are set
            run_policy.clean_pod_policy = mpi.clean_pod_policy
        mpi.run_policy = run_policy
    mpi.clean_pod_policy = None
    mpi.main_container = None
    out.api_version = V2BETA1
    return out
