"""The contract each Kubeflow operator gives a replica, reproduced for replicas run as local processes.

Facts mirrored here (training-operator v1.9, mpi-operator v0.8):

* PyTorchJob: every container gets ``PYTHONUNBUFFERED`` (the operator sets "0"; Python treats any
  non-empty value as "unbuffered"), then, only when the job has a Master, ``MASTER_PORT``,
  ``PET_MASTER_PORT``, ``MASTER_ADDR``, ``PET_MASTER_ADDR`` (the master's address, for the master
  too), ``WORLD_SIZE`` = total replicas x nprocPerNode (auto/cpu/gpu count as 1), ``RANK`` (Master 0,
  Worker i -> i+1), ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``; then either the elastic variables
  or ``PET_NNODES`` = total replicas.
* TFJob: ``TF_CONFIG`` on the ``tensorflow`` container when the job has more than one replica,
  ``{"cluster": {...sorted types...}, "task": {"type", "index"}, "environment": "cloud"}``,
  serialized compactly as Go's encoder does; every replica type, the evaluator included, is in
  the cluster.
* MPIJob: only the Launcher runs a program; Workers run sshd. The launcher gets ``K_MPI_JOB_ROLE``
  and the hostfile variables of its MPI implementation; the hostfile lists each worker with its
  slots (``host slots=N`` for OpenMPI, ``host:N`` for Intel MPI and MPICH).

Locally every host is ``localhost`` and every port a free one, so an MPI hostfile collapses to a
single ``localhost`` line holding all the slots.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kftrain.job.model import JobKind, MPIImplementation, RestartPolicy, TrainingJob

LOCAL_HOST = "localhost"
MPI_CONFIG_DIR = "etc/mpi"  # relative to the local job's work dir; /etc/mpi in the pod


@dataclass(frozen=True, order=True)
class ReplicaId:
    type: str
    index: int

    @property
    def label(self) -> str:
        """``worker-1``: the suffix of the pod name, and the prefix of every log line."""
        return f"{self.type.lower()}-{self.index}"


@dataclass
class LocalTopology:
    """Where each replica listens on this machine."""

    ports: dict[ReplicaId, int] = field(default_factory=dict)
    host: str = LOCAL_HOST
    workdir: Path = Path(".")

    def address(self, replica: ReplicaId) -> str:
        return f"{self.host}:{self.ports[replica]}"


def all_replicas(job: TrainingJob) -> list[ReplicaId]:
    return [ReplicaId(rtype, i) for rtype, spec in job.replica_specs.items() for i in range(spec.count)]


def nproc_per_node(job: TrainingJob) -> int:
    value = job.spec.nproc_per_node
    return int(value) if value is not None and value.isdigit() else 1


def process_replicas(job: TrainingJob) -> list[ReplicaId]:
    """Replicas that run a program locally. MPI workers only host ranks started by the launcher."""
    if job.kind == JobKind.MPIJOB:
        return [ReplicaId("Launcher", 0)]
    return all_replicas(job)


def replicas_needing_ports(job: TrainingJob) -> list[ReplicaId]:
    if job.kind == JobKind.TFJOB:
        return all_replicas(job)
    if job.kind == JobKind.PYTORCHJOB:
        wanted = [ReplicaId("Master", 0)] if "Master" in job.replica_specs else []
        if job.spec.elastic_policy is not None and "Worker" in job.replica_specs:
            wanted.append(ReplicaId("Worker", 0))
        return wanted
    return []


def replica_env(job: TrainingJob, replica: ReplicaId, topology: LocalTopology) -> list[tuple[str, str]]:
    """The variables the operator appends to the replica's main container, in the operator's order."""
    if job.kind == JobKind.PYTORCHJOB:
        return _pytorch_env(job, replica, topology)
    if job.kind == JobKind.TFJOB:
        return _tf_env(job, replica, topology)
    return _mpi_env(job, replica, topology)


def replica_files(job: TrainingJob, topology: LocalTopology) -> dict[str, str]:
    """Files the operator mounts, relative to the work dir (the MPI hostfile)."""
    if job.kind != JobKind.MPIJOB:
        return {}
    return {f"{MPI_CONFIG_DIR}/hostfile": mpi_hostfile(job, LOCAL_HOST, merge_hosts=True)}


# --- PyTorchJob -------------------------------------------------------------------------------


def _pytorch_env(job: TrainingJob, replica: ReplicaId, topology: LocalTopology) -> list[tuple[str, str]]:
    env = [("PYTHONUNBUFFERED", "0")]
    total = sum(spec.count for spec in job.replica_specs.values())
    if "Master" in job.replica_specs:
        master = ReplicaId("Master", 0)
        port = str(topology.ports[master])
        rank = replica.index + 1 if replica.type == "Worker" else replica.index
        env += [
            ("MASTER_PORT", port),
            ("PET_MASTER_PORT", port),
            ("MASTER_ADDR", topology.host),
            ("PET_MASTER_ADDR", topology.host),
            ("WORLD_SIZE", str(total * nproc_per_node(job))),
            ("RANK", str(rank)),
            ("PET_NPROC_PER_NODE", job.spec.nproc_per_node or "auto"),
            ("PET_NODE_RANK", str(rank)),
        ]
    elastic = job.spec.elastic_policy
    if elastic is None:
        env.append(("PET_NNODES", str(total)))
        return env
    workers = job.replicas_of("Worker")
    lo = elastic.min_replicas if elastic.min_replicas is not None else elastic.max_replicas
    hi = elastic.max_replicas if elastic.max_replicas is not None else elastic.min_replicas
    lo = workers if lo is None else lo
    hi = workers if hi is None else hi
    rdzv_port = elastic.rdzv_port or topology.ports.get(ReplicaId("Worker", 0))
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


# --- TFJob ------------------------------------------------------------------------------------


def tf_config(job: TrainingJob, replica: ReplicaId, topology: LocalTopology) -> str:
    cluster: dict[str, list[str]] = {}
    for rtype in sorted(job.replica_specs, key=str.lower):  # Go sorts map keys when encoding
        count = job.replica_specs[rtype].count
        cluster[rtype.lower()] = [topology.address(ReplicaId(rtype, i)) for i in range(count)]
    if job.spec.enable_dynamic_worker:
        sparse: dict[str, object] = {"worker": {}, "ps": []}
        if replica.type == "PS":
            sparse = {"worker": {}, "ps": [topology.address(replica)]}
        elif replica.type == "Worker":
            sparse = {"worker": {str(replica.index): topology.address(replica)}, "ps": cluster.get("ps", [])}
        payload: dict[str, object] = {
            "sparseCluster": sparse,
            "task": {"type": replica.type.lower(), "index": replica.index},
        }
    else:
        payload = {
            "cluster": cluster,
            "task": {"type": replica.type.lower(), "index": replica.index},
            "environment": "cloud",
        }
    return json.dumps(payload, separators=(",", ":"))


def _tf_env(job: TrainingJob, replica: ReplicaId, topology: LocalTopology) -> list[tuple[str, str]]:
    total = sum(spec.count for spec in job.replica_specs.values())
    if total == 1:  # not distributed: the operator leaves TF_CONFIG unset
        return []
    return [("TF_CONFIG", tf_config(job, replica, topology))]


# --- MPIJob -----------------------------------------------------------------------------------


def mpi_slots(job: TrainingJob) -> int:
    return job.spec.slots_per_worker or 1


def mpi_hostfile(job: TrainingJob, host: str | None = None, *, merge_hosts: bool = False) -> str:
    """The hostfile the operator writes; ``host`` replaces the per-pod DNS names.

    With ``merge_hosts`` every slot lands on one ``host`` line, which is what mpirun needs when
    all "workers" are the same machine.
    """
    slots = mpi_slots(job)
    impl = job.spec.mpi_implementation or MPIImplementation.OPENMPI
    v1 = job.api_version.endswith("/v1")

    def pod_host(pod: str) -> str:
        # v1 reaches pods by `kubectl exec <pod>`; v2beta1 by DNS through the job's headless service.
        return pod if v1 else f"{pod}.{job.name}.{job.metadata.namespace or 'default'}.svc"

    hosts: list[str] = []
    if job.spec.run_launcher_as_worker or (v1 and _launcher_has_gpu(job)):
        hosts.append(host or pod_host(f"{job.name}-launcher"))
    for i in range(job.replicas_of("Worker")):
        hosts.append(host or pod_host(f"{job.name}-worker-{i}"))
    entries: list[tuple[str, int]] = []
    entries = [(hosts[0], slots * len(hosts))] if merge_hosts and hosts else [(h, slots) for h in hosts]
    if impl == MPIImplementation.OPENMPI:
        return "".join(f"{h} slots={n}\n" for h, n in entries)
    return "".join(f"{h}:{n}\n" for h, n in entries)


def _launcher_has_gpu(job: TrainingJob) -> bool:
    """training-operator v1 lists a launcher that asks for a GPU in the hostfile, first."""
    for container in job.replica_specs["Launcher"].template.spec.containers:
        limits = (container.resources or {}).get("limits") or {}
        if any(key.endswith(".com/gpu") or "gpu" in key for key in limits):
            return True
    return False


def total_mpi_slots(job: TrainingJob) -> int:
    hosts = job.replicas_of("Worker") + (1 if job.spec.run_launcher_as_worker else 0)
    return hosts * mpi_slots(job)


def _mpi_env(job: TrainingJob, replica: ReplicaId, topology: LocalTopology) -> list[tuple[str, str]]:
    hostfile = str(topology.workdir / MPI_CONFIG_DIR / "hostfile")
    slots = str(mpi_slots(job))
    if job.api_version.endswith("/v1"):
        # training-operator v1 reaches workers by `kubectl exec`; locally they are this machine.
        return [("OMPI_MCA_orte_default_hostfile", hostfile)] if replica.type == "Launcher" else []
    env = [("K_MPI_JOB_ROLE", replica.type.lower())]
    if replica.type != "Launcher":
        return env
    impl = job.spec.mpi_implementation or MPIImplementation.OPENMPI
    if impl == MPIImplementation.OPENMPI:
        env += [
            ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            ("OMPI_MCA_orte_default_hostfile", hostfile),
            ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
            ("OMPI_MCA_orte_set_default_slots", slots),
        ]
    elif impl == MPIImplementation.INTEL:
        env += [
            ("I_MPI_HYDRA_HOST_FILE", hostfile),
            ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10"),
            ("I_MPI_PERHOST", slots),
        ]
    else:
        env += [
            ("HYDRA_HOST_FILE", hostfile),
            ("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10"),
        ]
    if not job.spec.run_launcher_as_worker:
        # mpi-operator hides GPUs from a launcher that is not also a worker.
        env += [("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
    return env


# --- Job outcome ------------------------------------------------------------------------------


def effective_restart_policy(job: TrainingJob, rtype: str) -> RestartPolicy:
    """The operator's default when a replica spec leaves restartPolicy unset."""
    policy = job.replica_specs[rtype].restart_policy
    if policy is not None:
        return policy
    if job.kind == JobKind.PYTORCHJOB:
        return RestartPolicy.ON_FAILURE
    if job.kind == JobKind.MPIJOB and rtype == "Launcher" and not job.api_version.endswith("/v1"):
        return RestartPolicy.ON_FAILURE
    return RestartPolicy.NEVER


def is_retryable_exit_code(code: int) -> bool:
    """ExitCode policy: 128-255 (killed by a signal, e.g. 137 OOM/preemption) are retried, 1-127 are not."""
    return code >= 128 or code < 0  # a negative code is Python's "killed by signal N"


def job_succeeded(job: TrainingJob, succeeded: Mapping[ReplicaId, bool]) -> bool:
    """Whether the replicas that have exited successfully complete the job, per the kind's rules."""
    done = {r for r, ok in succeeded.items() if ok}
    if job.kind == JobKind.MPIJOB:
        return ReplicaId("Launcher", 0) in done
    if job.kind == JobKind.PYTORCHJOB:
        if "Master" in job.replica_specs:
            return ReplicaId("Master", 0) in done
        workers = [ReplicaId("Worker", i) for i in range(job.replicas_of("Worker"))]
        if job.spec.elastic_policy is not None:
            return any(w in done for w in workers)
        return all(w in done for w in workers)
    for chief in ("Chief", "Master"):
        if chief in job.replica_specs:
            return ReplicaId(chief, 0) in done
    workers = [ReplicaId("Worker", i) for i in range(job.replicas_of("Worker"))]
    if job.spec.success_policy == "AllWorkers":
        return bool(workers) and all(w in done for w in workers)
    return ReplicaId("Worker", 0) in done
