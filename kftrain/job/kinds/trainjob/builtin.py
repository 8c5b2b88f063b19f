"""The ClusterTrainingRuntimes Kubeflow Trainer v2.3.0 installs, known by name without their manifests.

Each is its facts only: framework, ML policy, image, and a shape: ``single`` (one replicated job ``node`` running
the program on ``numNodes`` pods) or ``mpi-launcher`` (job ``node`` runs the image's sshd on port 2222 as user 1000;
job ``launcher``, started once the nodes are ready, runs the program and also runs ranks; the JobSet succeeds when it
does); the torchtune runtimes have their manifests' shape (:func:`_torchtune_template`). A folder given with
``--runtimes`` (or ``KFTRAIN_TRAINER_RUNTIMES``) overrides any of them by name.
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


# Trainer's torchtune runtimes (kubeflow/trainer@v2.3.0:manifests/base/runtimes/torchtune/): name -> (the model the
# model initializer downloads, the config of `tune run`, the tokenizer's files under /workspace/model).
_WORKSPACE = "/workspace"
_TORCHTUNE_IMAGE = "ghcr.io/kubeflow/trainer/torchtune-trainer"
_LLAMA_TOKENIZER = ("tokenizer.path=original/tokenizer.model",)
_TORCHTUNE: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "torchtune-llama3.2-1b": ("hf://meta-llama/Llama-3.2-1B-Instruct", "llama3_2/1B_full", _LLAMA_TOKENIZER),
    "torchtune-llama3.2-3b": ("hf://meta-llama/Llama-3.2-3B-Instruct", "llama3_2/3B_full", _LLAMA_TOKENIZER),
    "torchtune-qwen2.5-1.5b": (
        "hf://Qwen/Qwen2.5-1.5B-Instruct",
        "qwen2_5/1.5B_full",
        ("tokenizer.path=vocab.json", "tokenizer.merges_file=merges.txt"),
    ),
}


def _torchtune_template(model_uri: str, config: str, tokenizer: tuple[str, ...]) -> dict[str, Any]:
    """llama3_2/llama3_2_1B.yaml's shape: the initializers on a volume ``initializer`` at /workspace, then the node."""
    mount = [{"name": "initializer", "mountPath": _WORKSPACE}]
    claim = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}

    def initializer(name: str, image: str, uri: str) -> dict[str, Any]:
        container = {
            "name": name,
            "image": image,
            "env": [{"name": "STORAGE_URI", "value": uri}],
            "volumeMounts": mount,
        }
        job = _job(name, {"containers": [container]}, trainer=False)
        job["template"]["metadata"] = {"labels": {ANCESTOR_LABEL: name}}
        return job

    command = [
        "tune", "run", "--rdzv_endpoint=localhost:29500", "full_finetune_distributed", "--config", config,
        "dataset=torchtune.datasets.instruct_dataset", "dataset.source=parquet",
        f"dataset.data_dir={_WORKSPACE}/dataset/data", f"output_dir={_WORKSPACE}/output",
        *(f"{key}={_WORKSPACE}/model/{path}" for key, path in (t.split("=", 1) for t in tokenizer)),
        f"checkpointer.checkpoint_dir={_WORKSPACE}/model",
    ]  # fmt: skip
    node_container = {
        "name": NODE,
        "image": _TORCHTUNE_IMAGE,
        "command": command,
        "resources": {"limits": {"nvidia.com/gpu": 2}},
        "volumeMounts": mount,
    }
    node = _job(NODE, {"containers": [node_container]}, trainer=True)
    node["dependsOn"] = [{"name": n, "status": "Complete"} for n in ("dataset-initializer", "model-initializer")]
    return {
        "volumeClaimPolicies": [{"templates": [{"metadata": {"name": "initializer"}, "spec": claim}]}],
        "replicatedJobs": [
            initializer("dataset-initializer", "ghcr.io/kubeflow/trainer/dataset-initializer", "hf://tatsu-lab/alpaca"),
            initializer("model-initializer", "ghcr.io/kubeflow/trainer/model-initializer", model_uri),
            node,
        ],
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
    if name in _TORCHTUNE:
        return {
            "apiVersion": API_VERSION,
            "kind": CLUSTER_RUNTIME,
            "metadata": {"name": name, "labels": {f"{GROUP}/framework": "torchtune"}},
            "spec": {
                "mlPolicy": {"numNodes": 1, "torch": {}},
                "template": {"spec": _torchtune_template(*_TORCHTUNE[name])},
            },
        }
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
        for name in (*_KNOWN, *_TORCHTUNE)
    ]
