"""The env contract each operator gives a replica, reproduced with fixed local ports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kftrain.errors import JobSpecError
from kftrain.job import RestartPolicy, TrainingJob, kind_of, load_manifest
from kftrain.job.kinds.mpijob import hostfile as mpi_hostfile
from kftrain.job.kinds.mpijob.kind import total_slots as total_mpi_slots
from kftrain.job.kinds.restarts import is_retryable_exit_code
from kftrain.job.kinds.tfjob.kind import tf_config
from kftrain.job.topology import ReplicaId, Topology, all_replicas
from testbed.manifests import mpijob_v1, mpijob_v2, pytorchjob, replica, tfjob

M0, W0, W1, W2 = ReplicaId("Master", 0), ReplicaId("Worker", 0), ReplicaId("Worker", 1), ReplicaId("Worker", 2)
L0 = ReplicaId("Launcher", 0)


def topo(ports: dict[ReplicaId, int], workdir: str = ".") -> Topology:
    return Topology(ports=ports, files_root=Path(workdir))


# The contract is the job's kind's: these read it the way the local backend does.
def replica_env(job: TrainingJob, replica: ReplicaId, topology: Topology) -> list[tuple[str, str]]:
    return kind_of(job).operator_env(job, replica, topology)


def replica_files(job: TrainingJob, topology: Topology) -> dict[str, str]:
    return {path: mounted.content for path, mounted in kind_of(job).operator_files(job, topology).items()}


def replicas_needing_ports(job: TrainingJob) -> list[ReplicaId]:
    return kind_of(job).listening_replicas(job)


def process_replicas(job: TrainingJob) -> list[ReplicaId]:
    return kind_of(job).process_replicas(job)


# --- TFJob ---------------------------------------------------------------------------------------

TF_FULL = tfjob(
    # deliberately not in sorted order: TF_CONFIG sorts the cluster like Go's encoder
    {
        "Worker": replica(2, "tensorflow"),
        "PS": replica(1, "tensorflow"),
        "Evaluator": replica(1, "tensorflow"),
        "Chief": replica(1, "tensorflow"),
    },
    name="dist",
)
TF_PORTS = {
    ReplicaId("Chief", 0): 2000,
    ReplicaId("Evaluator", 0): 2100,
    ReplicaId("PS", 0): 2200,
    W0: 2300,
    W1: 2301,
}
TF_CLUSTER = (
    '{"chief":["localhost:2000"],"evaluator":["localhost:2100"],"ps":["localhost:2200"],'
    '"worker":["localhost:2300","localhost:2301"]}'
)


@pytest.mark.parametrize(
    ("rid", "task"),
    [
        (ReplicaId("Chief", 0), '{"type":"chief","index":0}'),
        (ReplicaId("PS", 0), '{"type":"ps","index":0}'),
        (W0, '{"type":"worker","index":0}'),
        (W1, '{"type":"worker","index":1}'),
        (ReplicaId("Evaluator", 0), '{"type":"evaluator","index":0}'),
    ],
)
def test_tf_config_every_role(rid, task):
    job = load_manifest(TF_FULL)
    expected = '{"cluster":' + TF_CLUSTER + ',"task":' + task + ',"environment":"cloud"}'
    assert replica_env(job, rid, topo(TF_PORTS)) == [("TF_CONFIG", expected)]
    assert list(json.loads(expected)) == ["cluster", "task", "environment"]


def test_tf_replicas_and_ports():
    job = load_manifest(TF_FULL)
    assert sorted(replicas_needing_ports(job)) == sorted(TF_PORTS)
    assert sorted(process_replicas(job)) == sorted(TF_PORTS)
    assert replica_files(job, topo(TF_PORTS)) == {}


def test_tf_config_legacy_master_type():
    job = load_manifest(tfjob({"Master": 1, "Worker": 1}))
    ports = {ReplicaId("Master", 0): 1, W0: 2}
    assert tf_config(job, W0, topo(ports)) == (
        '{"cluster":{"master":["localhost:1"],"worker":["localhost:2"]},'
        '"task":{"type":"worker","index":0},"environment":"cloud"}'
    )


@pytest.mark.parametrize(
    ("rid", "expected"),
    [
        (ReplicaId("PS", 0), '{"sparseCluster":{"worker":{},"ps":["localhost:2200"]},"task":{"type":"ps","index":0}}'),
        (
            W1,
            '{"sparseCluster":{"worker":{"1":"localhost:2301"},"ps":["localhost:2200"]},'
            '"task":{"type":"worker","index":1}}',
        ),
        (ReplicaId("Chief", 0), '{"sparseCluster":{"worker":{},"ps":[]},"task":{"type":"chief","index":0}}'),
    ],
)
def test_tf_config_dynamic_worker(rid, expected):
    m = tfjob({"Chief": 1, "PS": 1, "Worker": 2}, enableDynamicWorker=True)
    ports = {ReplicaId("Chief", 0): 2000, ReplicaId("PS", 0): 2200, W0: 2300, W1: 2301}
    assert tf_config(load_manifest(m), rid, topo(ports)) == expected


@pytest.mark.parametrize(
    "replicas",
    [{"Worker": 1}, {"Chief": 1}, {"Worker": {"template": replica(1, "tensorflow")["template"]}}],
    ids=["worker", "chief", "unset-count"],
)
def test_single_replica_tfjob_has_no_tf_config(replicas):
    job = load_manifest(tfjob(replicas))
    rid = all_replicas(job)[0]
    assert replica_env(job, rid, topo({rid: 2222})) == []


# --- PyTorchJob ----------------------------------------------------------------------------------


# training-operator v1.9.0, pkg/controller.v1/pytorch/envvar.go (setPodEnv): PYTHONUNBUFFERED=1 first; with a
# Master the master variables, WORLD_SIZE, RANK and PET_NODE_RANK; then PET_NPROC_PER_NODE whenever nprocPerNode
# is set (the defaulter in pkg/apis/kubeflow.org/v1/pytorch_defaults.go sets "auto"); then elastic.go's
# variables or PET_NNODES.
def pt_env(port: int, world: int, rank: int, nnodes: int, nproc: str = "auto") -> list[tuple[str, str]]:
    return [
        ("PYTHONUNBUFFERED", "1"),
        ("MASTER_PORT", str(port)),
        ("PET_MASTER_PORT", str(port)),
        ("MASTER_ADDR", "localhost"),
        ("PET_MASTER_ADDR", "localhost"),
        ("WORLD_SIZE", str(world)),
        ("RANK", str(rank)),
        ("PET_NODE_RANK", str(rank)),
        ("PET_NPROC_PER_NODE", nproc),
        ("PET_NNODES", str(nnodes)),
    ]


@pytest.mark.parametrize(
    ("spec", "rid", "expected"),
    [
        ({}, M0, pt_env(29500, 4, 0, 4)),
        ({}, W0, pt_env(29500, 4, 1, 4)),
        ({}, W2, pt_env(29500, 4, 3, 4)),
        ({"nprocPerNode": "2"}, M0, pt_env(29500, 8, 0, 4, "2")),
        ({"nprocPerNode": "2"}, W1, pt_env(29500, 8, 2, 4, "2")),
        ({"nprocPerNode": "auto"}, W1, pt_env(29500, 4, 2, 4, "auto")),
        ({"nprocPerNode": "gpu"}, W0, pt_env(29500, 4, 1, 4, "gpu")),
    ],
)
def test_pytorch_env(spec, rid, expected):
    job = load_manifest(pytorchjob({"Master": 1, "Worker": 3}, **spec))
    assert replicas_needing_ports(job) == [M0]
    assert replica_env(job, rid, topo({M0: 29500})) == expected


def test_pytorch_master_only():
    job = load_manifest(pytorchjob({"Master": 1}))
    assert replica_env(job, M0, topo({M0: 1234})) == pt_env(1234, 1, 0, 1)


ELASTIC_FULL = {
    "minReplicas": 1,
    "maxReplicas": 3,
    "maxRestarts": 5,
    "rdzvId": "abc",
    "rdzvConf": [{"key": "timeout", "value": "900"}, {"key": "join", "value": "1"}],
    "standalone": True,
    "nProcPerNode": 2,
}


@pytest.mark.parametrize(
    ("elastic", "expected_tail"),
    [
        (
            ELASTIC_FULL,
            [
                ("PET_RDZV_ENDPOINT", "localhost:29400"),
                ("PET_RDZV_BACKEND", "c10d"),
                ("PET_NNODES", "1:3"),
                ("PET_MAX_RESTARTS", "5"),
                ("PET_NPROC_PER_NODE", "2"),
                ("PET_RDZV_ID", "abc"),
                ("PET_RDZV_CONF", "timeout=900,join=1"),
                ("PET_STANDALONE", ""),
            ],
        ),
        ({}, [("PET_RDZV_ENDPOINT", "localhost:29400"), ("PET_RDZV_BACKEND", "c10d"), ("PET_NNODES", "2:2")]),
        (
            {"maxReplicas": 4},
            [("PET_RDZV_ENDPOINT", "localhost:29400"), ("PET_RDZV_BACKEND", "c10d"), ("PET_NNODES", "4:4")],
        ),
        (
            {"minReplicas": 2},
            [("PET_RDZV_ENDPOINT", "localhost:29400"), ("PET_RDZV_BACKEND", "c10d"), ("PET_NNODES", "2:2")],
        ),
        (
            {"rdzvHost": "etcd.example", "rdzvPort": 2379, "rdzvBackend": "etcd-v2", "standalone": False},
            [("PET_RDZV_ENDPOINT", "etcd.example:2379"), ("PET_RDZV_BACKEND", "etcd-v2"), ("PET_NNODES", "2:2")],
        ),
    ],
    ids=["full", "defaults", "only-max", "only-min", "explicit-rdzv"],
)
@pytest.mark.parametrize("rid", [W0, W1])
def test_pytorch_elastic_env_without_master(elastic, expected_tail, rid):
    job = load_manifest(pytorchjob({"Worker": 2}, elasticPolicy=elastic))
    assert replicas_needing_ports(job) == [W0]
    # Without a Master there are no master variables, but nprocPerNode (defaulted to "auto" unless the
    # elasticPolicy sets nProcPerNode) is still given.
    nproc = [] if "nProcPerNode" in elastic else [("PET_NPROC_PER_NODE", "auto")]
    assert replica_env(job, rid, topo({W0: 29400})) == [("PYTHONUNBUFFERED", "1"), *nproc, *expected_tail]


def test_pytorch_elastic_env_with_master():
    job = load_manifest(pytorchjob({"Master": 1, "Worker": 2}, elasticPolicy={"minReplicas": 1, "maxReplicas": 2}))
    ports = {M0: 29500, W0: 29400}
    assert replicas_needing_ports(job) == [M0, W0]
    env = replica_env(job, W1, topo(ports))
    assert env == [
        *pt_env(29500, 3, 2, 0)[:-1],
        ("PET_RDZV_ENDPOINT", "localhost:29400"),
        ("PET_RDZV_BACKEND", "c10d"),
        ("PET_NNODES", "1:2"),
    ]


# --- MPIJob --------------------------------------------------------------------------------------

LAUNCHER_ENV = {
    "OpenMPI": [
        ("K_MPI_JOB_ROLE", "launcher"),
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_orte_default_hostfile", "/w/etc/mpi/hostfile"),
        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ("OMPI_MCA_orte_set_default_slots", "2"),
    ],
    "Intel": [
        ("K_MPI_JOB_ROLE", "launcher"),
        ("I_MPI_HYDRA_HOST_FILE", "/w/etc/mpi/hostfile"),
        ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10"),
        ("I_MPI_PERHOST", "2"),
    ],
    "MPICH": [
        ("K_MPI_JOB_ROLE", "launcher"),
        ("HYDRA_HOST_FILE", "/w/etc/mpi/hostfile"),
        ("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10"),
    ],
}


def mpi_v2(impl: str | None, *, workers: int = 2, slots: int | None = 2, as_worker: bool = False, **kw):
    spec = dict(kw)
    if impl is not None:
        spec["mpiImplementation"] = impl
    if slots is not None:
        spec["slotsPerWorker"] = slots
    if as_worker:
        spec["runLauncherAsWorker"] = True
    return load_manifest(mpijob_v2({"Launcher": 1, "Worker": workers}, name="tb", **spec))


@pytest.mark.parametrize("impl", ["OpenMPI", "Intel", "MPICH"])
def test_mpi_v2beta1_env(impl):
    job = mpi_v2(impl, as_worker=True)
    t = topo({}, "/w")
    assert replica_env(job, L0, t) == LAUNCHER_ENV[impl]
    assert replica_env(job, W1, t) == [("K_MPI_JOB_ROLE", "worker")]
    assert process_replicas(job) == [L0]
    assert replicas_needing_ports(job) == []


def test_mpi_default_implementation_is_openmpi_with_one_slot():
    job = mpi_v2(None, slots=None, as_worker=True)
    env = dict(replica_env(job, L0, topo({}, "/w")))
    assert env["OMPI_MCA_orte_set_default_slots"] == "1"
    assert mpi_hostfile(job) == (
        "tb-launcher.tb.default.svc slots=1\ntb-worker-0.tb.default.svc slots=1\ntb-worker-1.tb.default.svc slots=1\n"
    )


@pytest.mark.parametrize("impl", ["OpenMPI", "Intel", "MPICH"])
def test_mpi_v2beta1_launcher_hides_gpus_unless_it_is_a_worker(impl):
    job = mpi_v2(impl)
    expected = [*LAUNCHER_ENV[impl], ("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
    assert replica_env(job, L0, topo({}, "/w")) == expected


@pytest.mark.parametrize(
    ("impl", "as_worker", "namespace", "expected"),
    [
        ("OpenMPI", False, None, "tb-worker-0.tb.default.svc slots=2\ntb-worker-1.tb.default.svc slots=2\n"),
        ("Intel", False, "ml", "tb-worker-0.tb.ml.svc:2\ntb-worker-1.tb.ml.svc:2\n"),
        ("MPICH", False, None, "tb-worker-0.tb.default.svc:2\ntb-worker-1.tb.default.svc:2\n"),
        (
            "OpenMPI",
            True,
            "ml",
            "tb-launcher.tb.ml.svc slots=2\ntb-worker-0.tb.ml.svc slots=2\ntb-worker-1.tb.ml.svc slots=2\n",
        ),
        (
            "Intel",
            True,
            None,
            "tb-launcher.tb.default.svc:2\ntb-worker-0.tb.default.svc:2\ntb-worker-1.tb.default.svc:2\n",
        ),
    ],
)
def test_mpi_hostfile_formats(impl, as_worker, namespace, expected):
    job = mpi_v2(impl, as_worker=as_worker)
    job.metadata.namespace = namespace
    assert mpi_hostfile(job) == expected


@pytest.mark.parametrize(
    ("impl", "as_worker", "expected_line", "slots"),
    [
        ("OpenMPI", False, "localhost slots=4\n", 4),
        ("OpenMPI", True, "localhost slots=6\n", 6),
        ("Intel", False, "localhost:4\n", 4),
        ("MPICH", True, "localhost:6\n", 6),
    ],
)
def test_mpi_local_hostfile_is_merged(impl, as_worker, expected_line, slots):
    job = mpi_v2(impl, as_worker=as_worker)
    assert mpi_hostfile(job, "localhost", merge_hosts=True) == expected_line
    assert mpi_hostfile(job, "localhost") == expected_line.replace(str(slots), "2") * (slots // 2)
    assert replica_files(job, topo({}, "/w")) == {"/etc/mpi/hostfile": expected_line}
    assert total_mpi_slots(job) == slots


# training-operator v1.9.0, pkg/controller.v1/mpi/mpijob_controller.go (newLauncher): the launcher's first
# container gets the kubexec rsh agent and the hostfile, the emptied NVIDIA variables (no GPU asked for), and
# Intel MPI's bootstrap variables unless it sets them itself; workers get nothing.
def test_mpi_v1_env():
    job = load_manifest(mpijob_v1({"Launcher": 1, "Worker": 2}, name="tm", slotsPerWorker=3))
    t = topo({}, "/w")
    assert replica_env(job, L0, t) == [
        ("OMPI_MCA_plm_rsh_agent", "/w/etc/mpi/kubexec.sh"),
        ("OMPI_MCA_orte_default_hostfile", "/w/etc/mpi/hostfile"),
        ("NVIDIA_VISIBLE_DEVICES", ""),
        ("NVIDIA_DRIVER_CAPABILITIES", ""),
        ("I_MPI_HYDRA_BOOTSTRAP", "rsh"),
        ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/w/etc/mpi/kubexec.sh"),
    ]
    assert replica_env(job, W0, t) == []
    files = replica_files(job, t)
    assert files["/etc/mpi/hostfile"] == "localhost slots=6\n"
    assert files["/etc/mpi/kubexec.sh"].startswith("#!/bin/sh")


def test_mpi_v1_env_keeps_the_users_intel_bootstrap_and_a_gpu_launcher():
    launcher = replica(1, "mpi-launcher", env=[{"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "ssh"}])
    launcher["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    job = load_manifest(mpijob_v1({"Launcher": launcher, "Worker": 1}, name="g"))
    names = [name for name, _ in replica_env(job, L0, topo({}, "/w"))]
    assert names == ["OMPI_MCA_plm_rsh_agent", "OMPI_MCA_orte_default_hostfile", "I_MPI_HYDRA_BOOTSTRAP_EXEC"]
    assert mpi_hostfile(job).splitlines()[0] == "g-launcher slots=1"  # a GPU launcher hosts ranks too


def test_mpi_v1_containers_need_no_particular_name():
    """The controller uses the launcher's first container; mainContainer only names the worker container that
    `kubectl exec` runs ranks in, and must exist there."""
    m = mpijob_v1({"Launcher": replica(1, "mpi-launcher"), "Worker": replica(2, "mpi-worker")}, name="e")
    load_manifest(m)
    load_manifest({**m, "spec": {**m["spec"], "mainContainer": "mpi-worker"}})
    with pytest.raises(JobSpecError, match=r"Worker\.template\.spec\.containers: no container named 'trainer'"):
        load_manifest({**m, "spec": {**m["spec"], "mainContainer": "trainer"}})


def test_mpi_v1_hostfile_uses_pod_names():
    job = load_manifest(mpijob_v1({"Launcher": 1, "Worker": 2}, name="tm"))
    assert mpi_hostfile(job) == "tm-worker-0 slots=1\ntm-worker-1 slots=1\n"


# --- outcome rules -------------------------------------------------------------------------------

SUCCESS_CASES = [
    ("pt-master-done", pytorchjob({"Master": 1, "Worker": 2}), [M0], True),
    ("pt-workers-done-master-not", pytorchjob({"Master": 1, "Worker": 2}), [W0, W1], False),
    ("pt-elastic-any-worker", pytorchjob({"Worker": 3}, elasticPolicy={"maxReplicas": 3}), [W1], True),
    ("pt-elastic-none", pytorchjob({"Worker": 3}, elasticPolicy={"maxReplicas": 3}), [], False),
    ("pt-no-master-all-workers", pytorchjob({"Worker": 2}), [W0, W1], True),
    ("pt-no-master-one-worker", pytorchjob({"Worker": 2}), [W0], False),
    ("tf-chief-done", tfjob({"Chief": 1, "PS": 1, "Worker": 2}), [ReplicaId("Chief", 0)], True),
    ("tf-workers-done-chief-not", tfjob({"Chief": 1, "Worker": 2}), [W0, W1], False),
    ("tf-master-done", tfjob({"Master": 1, "Worker": 2}), [ReplicaId("Master", 0)], True),
    ("tf-worker0-default", tfjob({"PS": 1, "Worker": 2}), [W0], True),
    ("tf-worker1-default", tfjob({"PS": 1, "Worker": 2}), [W1], False),
    ("tf-allworkers-one", tfjob({"PS": 1, "Worker": 2}, successPolicy="AllWorkers"), [W0], False),
    ("tf-allworkers-all", tfjob({"PS": 1, "Worker": 2}, successPolicy="AllWorkers"), [W0, W1], True),
    ("tf-ps-only-done", tfjob({"PS": 1, "Worker": 2}), [ReplicaId("PS", 0)], False),
    ("mpi-launcher", mpijob_v2({"Launcher": 1, "Worker": 2}), [L0], True),
    ("mpi-workers", mpijob_v2({"Launcher": 1, "Worker": 2}), [W0, W1], False),
    ("mpi-v1-launcher", mpijob_v1({"Launcher": 1, "Worker": 2}), [L0], True),
]


@pytest.mark.parametrize(("m", "done", "expected"), [pytest.param(m, d, e, id=i) for i, m, d, e in SUCCESS_CASES])
def test_job_succeeded(m, done, expected):
    job = load_manifest(m, validate=False)
    assert kind_of(job).succeeded(job, {r for r in all_replicas(job) if r in done}) is expected


@pytest.mark.parametrize(
    ("m", "rtype", "expected"),
    [
        (pytorchjob({"Master": 1, "Worker": 1}), "Master", RestartPolicy.ON_FAILURE),
        (pytorchjob({"Master": 1, "Worker": 1}), "Worker", RestartPolicy.ON_FAILURE),
        (tfjob({"Chief": 1, "Worker": 1}), "Chief", RestartPolicy.NEVER),
        (tfjob({"PS": 1, "Worker": 1}), "PS", RestartPolicy.NEVER),
        (mpijob_v2({"Launcher": 1, "Worker": 1}), "Launcher", RestartPolicy.ON_FAILURE),
        (mpijob_v2({"Launcher": 1, "Worker": 1}), "Worker", RestartPolicy.NEVER),
        (mpijob_v1({"Launcher": 1, "Worker": 1}), "Launcher", RestartPolicy.NEVER),
        (mpijob_v1({"Launcher": 1, "Worker": 1}), "Worker", RestartPolicy.NEVER),
        (tfjob({"Worker": replica(1, "tensorflow", restart_policy="Always")}), "Worker", RestartPolicy.ALWAYS),
        (pytorchjob({"Master": replica(1, restart_policy="Never")}), "Master", RestartPolicy.NEVER),
    ],
)
def test_effective_restart_policy(m, rtype, expected):
    job = load_manifest(m)
    assert kind_of(job).restart_policy(job, rtype) is expected


@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        (0, False),
        (1, False),
        (2, False),
        (126, False),
        (127, False),
        (128, True),
        (137, True),
        (139, True),
        (143, True),
        (255, True),
        (-9, True),
        (-15, True),
    ],
)
def test_is_retryable_exit_code(code, retryable):
    assert is_retryable_exit_code(code) is retryable


def test_replica_labels_and_all_replicas():
    job = load_manifest(tfjob({"Chief": 1, "PS": 2, "Worker": 0}))
    assert [r.label for r in all_replicas(job)] == ["chief-0", "ps-0", "ps-1"]
    assert topo({ReplicaId("PS", 1): 7}).address(ReplicaId("PS", 1)) == "localhost:7"
