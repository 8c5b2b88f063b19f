"""The ClusterTrainingRuntimes Kubeflow Trainer v2.3.0 installs, known by name without their manifests.

Each is its facts only: framework, ML policy, image, and a shape: ``single`` (one replicated job ``node`` running
the program on ``numNodes`` pods) or ``mpi-launcher`` (job ``node`` runs the image's sshd on port 2222 as user 1000;
job ``launcher``, started once the nodes are ready, runs the program and also runs ranks; the JobSet succeeds when it
does). A folder given with ``--runtimes`` (or ``KFTRAIN_TRAINER_RUNTIMES``) overrides any of them by name.
"""

from __future__ import annotations

from typing import Any

from kftrain.job.kinds.trainjob.runtime import (
    ANCESTOR_LABEL,
    API_VERSION,
    CLUSTER_RUNTIME,
    GROUP,
    LAUNCHER,
    NODE,
    TRAINER_ANCESTOR,
    Runtime,
)

_MPI_HOME = "/home/mpiuser"
_MPI_POLICY = {
    "numProcPerNode": 1,
    "mpiImplementation": "OpenMPI",
    "sshAuthMountPath": f"{_MPI_HOME}/.ssh",
    "runLauncherAsNode": True,
}

# name: (framework label, ML policy source, image, shape)
_KNOWN: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "torch-distributed": ("torch", {"torch": {}}, "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", "single"),
    "jax-distributed": ("jax", {"jax": {}}, "nvcr.io/nvidia/jax:25.10-py3", "single"),
    "xgboost-distributed": ("xgboost", {"xgboost": {}}, "ghcr.io/kubeflow/trainer/xgboost-runtime", "single"),
    "deepspeed-distributed": (
        "deepspeed",
        {"mpi": _MPI_POLICY},
        "ghcr.io/kubeflow/trainer/deepspeed-runtime",
        "mpi-launcher",
    ),
    "mlx-distributed": ("mlx", {"mpi": _MPI_POLICY}, "ghcr.io/kubeflow/trainer/mlx-runtime", "mpi-launcher"),
}


def _job(name: str, pod_spec: dict[str, Any], *, trainer: bool) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"template": {"spec": pod_spec}}}
    if trainer:
        template["metadata"] = {"labels": {ANCESTOR_LABEL: TRAINER_ANCESTOR}}
    return {"name": name, "template": template}


def _template(image: str, shape: str) -> dict[str, Any]:
    if shape == "single":
        return {"replicatedJobs": [_job(NODE, {"containers": [{"name": NODE, "image": image}]}, trainer=True)]}
    user = {"runAsUser": 1000}
    sshd = {
        "name": NODE,
        "image": image,
        "securityContext": user,
        "command": ["/usr/sbin/sshd"],
        "args": ["-De", "-f", f"{_MPI_HOME}/.sshd_config"],
        "readinessProbe": {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 5},
    }
    group = {"fsGroup": 1000}
    launcher = _job(
        LAUNCHER,
        {"securityContext": group, "containers": [{"name": NODE, "image": image, "securityContext": user}]},
        trainer=True,
    )
    launcher["dependsOn"] = [{"name": NODE, "status": "Ready"}]
    return {
        "network": {"publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [LAUNCHER]},
        "replicatedJobs": [_job(NODE, {"securityContext": group, "containers": [sshd]}, trainer=False), launcher],
    }


def builtin_manifest(name: str) -> dict[str, Any]:
    framework, policy, image, shape = _KNOWN[name]
    return {
        "apiVersion": API_VERSION,
        "kind": CLUSTER_RUNTIME,
        "metadata": {"name": name, "labels": {f"{GROUP}/framework": framework}},
        "spec": {"mlPolicy": {"numNodes": 1, **policy}, "template": {"spec": _template(image, shape)}},
    }


def builtin_runtimes() -> list[Runtime]:
    return [
        Runtime(CLUSTER_RUNTIME, name, None, builtin_manifest(name), f"built-in {name} (Trainer v2.3.0)")
        for name in _KNOWN
    ]
