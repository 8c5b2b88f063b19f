"""MPIJob: mpi-operator's ``kubeflow.org/v2beta1`` and the training-operator's ``kubeflow.org/v1``.

Only the Launcher runs a program (``mpirun ...``); Workers host the ranks mpirun starts (over ssh in
v2beta1, ``kubectl exec`` in v1). The operator mounts a hostfile listing each worker with its slots
(``host slots=N`` for OpenMPI, ``host:N`` for Intel MPI and MPICH) and gives the launcher's first container
the variables that point its MPI at it; both hide GPUs from a launcher that does not host ranks, and
v2beta1 also sets ``K_MPI_JOB_ROLE`` on every pod. Success: the Launcher succeeds.

A v1 MPIJob's launcher also gets ``/etc/mpi/discover_hosts.sh``, the host-discovery script of elastic Horovod
(``horovodrun --min-np/--max-np --host-discovery-script``): one ``echo <pod>:<slots>`` line per running worker
pod, sorted, rewritten as workers come and go (:func:`discover_hosts`; :meth:`Kind.membership_files`).

Locally every host is this machine. The hostfile collapses to one ``localhost`` line holding all the slots.
The discovery script cannot: horovodrun needs a name per worker (a failed host is blacklisted, and a host's
slots are its own), and it starts a rank without ssh only on a host whose name resolves to one of this
machine's addresses. Worker ``i`` is therefore written as 127.0.0.1 with ``i`` zeros before its last digit
(``127.0.0.1``, ``127.0.0.01``, ``127.0.0.001``: :func:`local_worker_host`), distinct names that all resolve to
127.0.0.1; horovodrun gives each rank its host as ``HOROVOD_HOSTNAME``.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
from collections.abc import Iterable, Sequence

from kftrain.errors import JobSpecError
from kftrain.job.kinds.base import GROUP, Kind, KindSpec, MountedFile
from kftrain.job.model import (
    JobKind,
    LauncherCreationPolicy,
    MPIImplementation,
    RestartPolicy,
    RunPolicy,
    TrainingJob,
)
from kftrain.job.topology import ReplicaId, Topology

V2BETA1 = f"{GROUP}/v2beta1"
V1 = f"{GROUP}/v1"
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
SPEC_V2BETA1 = KindSpec(
    kind=JobKind.MPIJOB,
    api_version=V2BETA1,
    plural="mpijobs",
    replica_key="mpiReplicaSpecs",
    replica_types=("Launcher", "Worker"),
    singletons=frozenset({"Launcher"}),
    default_container=None,
    container_name="mpi",
    spec_fields=_COMMON_FIELDS
    | {"ssh_auth_mount_path", "launcher_creation_policy", "run_launcher_as_worker", "mpi_implementation"},
    fixed_replicas=("Launcher",),
    workers_run_program=False,
)
SPEC_V1 = dataclasses.replace(
    SPEC_V2BETA1,
    api_version=V1,
    # The controller injects into the launcher's first container; mainContainer names the worker container
    # that `kubectl exec` runs the ranks in (pkg/controller.v1/mpi/mpijob_controller.go, newLauncher, newConfigMap).
    spec_fields=_COMMON_FIELDS | {"main_container", "clean_pod_policy"},
)


def slots_per_worker(job: TrainingJob) -> int:
    return job.spec.slots_per_worker or 1


def total_slots(job: TrainingJob) -> int:
    hosts = job.replicas_of("Worker") + (1 if job.spec.run_launcher_as_worker else 0)
    return hosts * slots_per_worker(job)


def hostfile(job: TrainingJob, host: str | None = None, *, merge_hosts: bool = False) -> str:
    """The hostfile the operator writes; ``host`` replaces the per-pod DNS names.

    With ``merge_hosts`` every slot lands on one ``host`` line, which is what mpirun needs when all
    "workers" are the same machine.
    """
    slots = slots_per_worker(job)
    impl = job.spec.mpi_implementation or MPIImplementation.OPENMPI
    v1 = job.api_version == V1

    def pod_host(pod: str) -> str:
        # v1 reaches pods by `kubectl exec <pod>`; v2beta1 by DNS through the job's headless service.
        return pod if v1 else f"{pod}.{job.name}.{job.metadata.namespace or 'default'}.svc"

    hosts: list[str] = []
    if job.spec.run_launcher_as_worker or (v1 and _launcher_asks_for_gpu(job)):
        hosts.append(host or pod_host(f"{job.name}-launcher"))
    for i in range(job.replicas_of("Worker")):
        hosts.append(host or pod_host(f"{job.name}-worker-{i}"))
    entries = [(hosts[0], slots * len(hosts))] if merge_hosts and hosts else [(h, slots) for h in hosts]
    if impl == MPIImplementation.OPENMPI:
        return "".join(f"{h} slots={n}\n" for h, n in entries)
    return "".join(f"{h}:{n}\n" for h, n in entries)


def local_mpirun_env(env: dict[str, str]) -> None:
    """What an mpirun whose every slot is on this machine needs in ``env`` (MPIJob and MPI TrainJob launchers)."""
    if os.geteuid() == 0:
        # mpirun refuses root without these; MPI images set them the same way.
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if not any(shutil.which(tool, path=env.get("PATH")) for tool in ("ssh", "rsh")):
        # Every slot is on localhost, so mpirun never starts a remote daemon; but OpenMPI 4 refuses to start
        # at all when its rsh launch agent (ssh or rsh) is missing. Any existing program satisfies that check.
        env.setdefault("OMPI_MCA_plm_rsh_agent", shutil.which("false") or "/bin/false")


def local_worker_host(index: int) -> str:
    """Worker ``index``'s host name on one machine: 127.0.0.1 with ``index`` zeros before its last digit.

    Each is a distinct name (horovodrun tells the workers apart by name) that resolves to 127.0.0.1 (so
    horovodrun starts its ranks here, without ssh); the leading zeros are read as the same octet.
    """
    return "127.0.0." + "0" * index + "1"


def discover_hosts(job: TrainingJob, running: Iterable[ReplicaId], *, local: bool = False) -> str:
    """The v1 controller's ``discover_hosts.sh`` for the ``running`` worker pods (training-operator v1.9.0,
    ``updateDiscoverHostsInConfigMap``): ``#!/bin/sh``, the launcher first when it asks for a GPU, then one
    ``echo <pod>:<slots>`` per running worker sorted by pod name; no final newline.

    ``local`` names the pods as this machine (:func:`local_worker_host`; the launcher ``localhost``).
    """
    slots = slots_per_worker(job)
    pods = sorted((f"{job.name}-{r.label}", r) for r in running if r.type == "Worker")
    script = "#!/bin/sh"
    if _launcher_asks_for_gpu(job):
        script += f"\necho {'localhost' if local else job.name + '-launcher'}:{slots}\n"
    for pod, replica in pods:
        script += f"\necho {local_worker_host(replica.index) if local else pod}:{slots}"
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
        slots = job.spec.slots_per_worker
        if slots is not None and slots < 1:
            raise JobSpecError("spec.slotsPerWorker", f"must be >= 1, got {slots}")
        if job.replicas_of("Worker") == 0 and not job.spec.run_launcher_as_worker:
            raise JobSpecError(f"{path}.Worker", "an MPIJob needs at least 1 Worker (or runLauncherAsWorker: true)")

    def operator_env(self, job: TrainingJob, replica: ReplicaId, topology: Topology) -> list[tuple[str, str]]:
        env = [("K_MPI_JOB_ROLE", replica.type.lower())]
        if replica != LAUNCHER:
            return env
        path = str(topology.file(HOSTFILE))
        slots = str(slots_per_worker(job))
        impl = job.spec.mpi_implementation or MPIImplementation.OPENMPI
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
        if not job.spec.run_launcher_as_worker:
            # mpi-operator hides GPUs from a launcher that is not also a worker.
            env += [("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
        return env

    def operator_files(self, job: TrainingJob, topology: Topology) -> dict[str, MountedFile]:
        return {HOSTFILE: MountedFile(hostfile(job, topology.host, merge_hosts=True))}

    def default_restart_policy(self, job: TrainingJob, replica_type: str) -> RestartPolicy:
        return RestartPolicy.ON_FAILURE if replica_type == "Launcher" else RestartPolicy.NEVER

    def succeeded(self, job: TrainingJob, done: set[ReplicaId]) -> bool:
        return LAUNCHER in done

    def hosts_training(self, job: TrainingJob, replica_type: str) -> bool:
        return replica_type != "Launcher" or bool(job.spec.run_launcher_as_worker)

    def process_replicas(self, job: TrainingJob) -> list[ReplicaId]:
        return [LAUNCHER]  # Workers only host the ranks that mpirun starts

    def adapt_local_env(self, job: TrainingJob, replica: ReplicaId, env: dict[str, str]) -> None:
        local_mpirun_env(env)

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
        return job.spec.main_container if replica_type == "Worker" else None

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
        return {DISCOVER_HOSTS: MountedFile(discover_hosts(job, running, local=True), 0o555)}

    def local_host_name(self, replica: ReplicaId, topology: Topology) -> str:
        return local_worker_host(replica.index) if replica.type == "Worker" else topology.host

    def default_restart_policy(self, job: TrainingJob, replica_type: str) -> RestartPolicy:
        return RestartPolicy.NEVER


MPIJOB_V2BETA1 = MPIJobV2Beta1Kind(SPEC_V2BETA1)
MPIJOB_V1 = MPIJobV1Kind(SPEC_V1)


def to_v1(job: TrainingJob) -> TrainingJob:
    """A v2beta1 MPIJob (mpi-operator) as a kubeflow.org/v1 MPIJob (training-operator).

    v1 has no sshAuthMountPath, launcherCreationPolicy, runLauncherAsWorker or mpiImplementation. Fields
    whose non-default value would change what runs are refused rather than silently dropped.
    """
    out = copy.deepcopy(job)
    spec = out.spec
    if spec.run_launcher_as_worker:
        raise JobSpecError("spec.runLauncherAsWorker", "is true, which kubeflow.org/v1 MPIJob cannot express")
    if spec.launcher_creation_policy not in (None, LauncherCreationPolicy.AT_STARTUP):
        raise JobSpecError(
            "spec.launcherCreationPolicy",
            f"{spec.launcher_creation_policy.value} is not supported by kubeflow.org/v1 MPIJob",
        )
    if spec.mpi_implementation == MPIImplementation.MPICH:
        raise JobSpecError("spec.mpiImplementation", "MPICH is not supported by kubeflow.org/v1 MPIJob")
    # v1 reaches workers with kubectl exec, not ssh, and reads Intel MPI from env: nothing to keep.
    spec.ssh_auth_mount_path = None
    spec.launcher_creation_policy = None
    spec.run_launcher_as_worker = None
    spec.mpi_implementation = None
    out.api_version = V1  # both put the launcher's contract in its first container; the workers' first runs the ranks
    return out


def to_v2beta1(job: TrainingJob) -> TrainingJob:
    """A kubeflow.org/v1 MPIJob as a v2beta1 one: the workers' mainContainer first, spec.cleanPodPolicy into
    runPolicy."""
    out = copy.deepcopy(job)
    main = out.spec.main_container
    workers = out.replica_specs.get("Worker")
    if main and workers is not None:
        # v2beta1 has no mainContainer: mpirun reaches the workers' first container.
        containers = workers.template.spec.containers
        idx = next((i for i, c in enumerate(containers) if c.name == main), 0)
        containers.insert(0, containers.pop(idx))
    if out.spec.clean_pod_policy is not None:
        run_policy = out.spec.run_policy or RunPolicy()
        if run_policy.clean_pod_policy is None:  # v1 lets runPolicy win when both are set
            run_policy.clean_pod_policy = out.spec.clean_pod_policy
        out.spec.run_policy = run_policy
    out.spec.clean_pod_policy = None
    out.spec.main_container = None
    out.api_version = V2BETA1
    return out


def served_version(served: Iterable[str]) -> str:
    """The MPIJob version to render, given the versions a cluster serves ``mpijobs`` in: v2beta1 preferred."""
    versions = list(served)
    for version in ("v2beta1", "v1"):
        if version in versions:
            return f"{GROUP}/{version}"
    raise JobSpecError(
        "apiVersion",
        "no MPIJob CRD is served by this cluster (looked for mpijobs in kubeflow.org/v2beta1 and kubeflow.org/v1); "
        "install mpi-operator or the training-operator",
    )
