"""The launch task's own settings a launch step refuses (``REFUSED``: each with the one line it ends with) and takes
(``TAKEN``), shared by tests/launch/test_launch_task_config.py and the hostile-input area ``task-config``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch_task_config
from kftrain_components.training.trainjob_launch.component import trainjob_launch_task_config

GPU = "nvidia.com/gpu"
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
]}}}  # fmt: skip
VOLUME = {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}
MOUNT = {"name": "data", "mountPath": "/data"}
ON_A_TASK = " (with the launch task's own settings, task_config)"
# A manifest whose Master has its own cpu limit and a volume named "data" (an emptyDir).
OWN_MANIFEST = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: own}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: me/train:1
            command: [python, t.py]
            resources: {limits: {cpu: "1"}}
          volumes: [{name: data, emptyDir: {}}]
"""
NODE_TERMS = "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def _required_node_affinity(requirement: dict[str, Any]) -> dict[str, Any]:
    terms = [{"matchExpressions": [requirement]}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


# (component, what the task sets, the explicit inputs beside it, how the one line the step ends with starts: "[*]" any
# index, as the settings beside it place the entry). Each is what the
# same input refuses given explicitly, what the API server or Trainer's webhook refuses of the job it ends in, or a
# task setting that another setting of the job would silently have replaced.
REFUSED: dict[str, tuple[Any, dict[str, Any], dict[str, Any], str]] = {
    # kubeflow/trainer@v2.3.0: pkg/constants/constants.go TorchRunReservedEnvNames, refused by plugins/torch/torch.go
    "a torch runtime's reserved env": (
        trainjob_launch_task_config,
        {"env": [{"name": "PET_NNODES", "value": "3"}]},
        {},
        "spec.trainer.env: must not have reserved envs, invalid envs configured: ['PET_NNODES'] (the torch runtime "
        "sets them)" + ON_A_TASK,
    ),
    # XGBoostReservedEnvNames, refused by plugins/xgboost/xgboost.go
    "an xgboost runtime's reserved env": (
        trainjob_launch_task_config,
        {"env": [{"name": "DMLC_TRACKER_URI", "value": "elsewhere"}]},
        {"runtime": "xgboost-distributed", "command": ["python", "-c", "pass"]},
        "spec.trainer.env[*]: Forbidden: DMLC_TRACKER_URI is reserved for the XGBoost runtime" + ON_A_TASK,
    ),
    # MPIReservedEnvNames, refused by plugins/mpi/mpi.go
    "an MPI runtime's reserved env": (
        trainjob_launch_task_config,
        {"env": [{"name": "OMPI_MCA_orte_default_hostfile", "value": "/tmp/h"}]},
        {"runtime": "deepspeed-distributed"},
        "spec.trainer.env: must not have reserved envs, invalid envs configured: ['OMPI_MCA_orte_default_hostfile'] "
        "(the mpi runtime sets them)" + ON_A_TASK,
    ),
    "the model URI the step sets": (
        pytorchjob_launch_task_config,
        {"env": [{"name": "KFTRAIN_MODEL_URI", "value": "s3://elsewhere/model"}]},
        {},
        "task_config.env[0]: KFTRAIN_MODEL_URI is set by the launch step from the model output's URI; give it there",
    ),
    "an env name the API server refuses": (
        pytorchjob_launch_task_config,
        {"env": [{"name": "1X", "value": "v"}]},
        {},
        "task_config.env[0]: '1X' is not a valid variable name",
    ),
    "an env name set twice": (
        pytorchjob_launch_task_config,
        {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
        {},
        "task_config.env[1]: 'A' is already set by task_config.env[0]",
    ),
    "an env value from two sources": (
        pytorchjob_launch_task_config,
        {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}, "fieldRef": {}}}]},
        {},
        "task_config.env[0].valueFrom: must name exactly one source",
    ),
    "limits given as a string": (
        pytorchjob_launch_task_config,
        {"resources": {"limits": "4"}},
        {},
        "task_config.resources.limits: expected a mapping, got str",
    ),
    # kubernetes/kubernetes@v1.36.3 pkg/apis/core/validation ValidateContainerResourceRequirements
    "a request above its limit": (
        pytorchjob_launch_task_config,
        {"resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}},
        {},
        "task_config.resources.requests.cpu: 2 must be less than or equal to cpu limit of 1",
    ),
    "a request above the job's own limit": (
        pytorchjob_launch_task_config,
        {"resources": {"requests": {"cpu": "2"}}},
        {"manifest": OWN_MANIFEST},
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.requests.cpu: 2 must be less than or "
        "equal to cpu limit of 1" + ON_A_TASK,
    ),
    "a GPU request without its limit": (
        pytorchjob_launch_task_config,
        {"resources": {"requests": {GPU: 1}}},
        {},
        "task_config.resources.limits.nvidia.com/gpu: Limit must be set for non overcommitable resources",
    ),
    "a resource no container has": (
        pytorchjob_launch_task_config,
        {"resources": {"limits": {"gpu": "1"}}},
        {},
        "task_config.resources.limits.gpu: 'gpu' must be a standard resource for containers",
    ),
    "a volume named as the job's, another source": (
        pytorchjob_launch_task_config,
        {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}], "volume_mounts": [MOUNT]},
        {"manifest": OWN_MANIFEST},
        "task_config.volumes[0].name: 'data' is already a volume of the Master replicas, with another source",
    ),
    "a volume named as an explicit input's": (
        pytorchjob_launch_task_config,
        {"volumes": [{"name": "pvc-datasets", "emptyDir": {}}]},
        {"pvc_mounts": {"/datasets": "datasets"}},
        "task_config.volumes[0].name: 'pvc-datasets' is already a volume of the Master replicas, with another source",
    ),
    "a volume without a source": (
        pytorchjob_launch_task_config,
        {"volumes": [{"name": "data"}]},
        {},
        "task_config.volumes[0]: must specify a volume type",
    ),
    # ValidateVolumeMounts: the name must be one of the pod's volumes
    "a mount of a volume the pod lacks": (
        pytorchjob_launch_task_config,
        {"volume_mounts": [{"name": "nope", "mountPath": "/x"}]},
        {},
        "task_config.volume_mounts[0].name: 'nope' is not a volume of the Master replicas' pods",
    ),
    "a relative mount path": (
        pytorchjob_launch_task_config,
        {"volumes": [VOLUME], "volume_mounts": [{"name": "data", "mountPath": "data"}]},
        {},
        "task_config.volume_mounts[0].mountPath: 'data': the mount path must be absolute",
    ),
    "an affinity not a mapping": (
        pytorchjob_launch_task_config,
        {"affinity": {"nodeAffinity": "zone-a"}},
        {},
        "task_config.affinity.nodeAffinity: expected a mapping, got str",
    ),
    "an affinity field misspelt": (
        pytorchjob_launch_task_config,
        {"affinity": {"nodeAfinity": {}}},
        {},
        "task_config.affinity.nodeAfinity: unknown field",
    ),
    "an affinity operator": (
        pytorchjob_launch_task_config,
        {"affinity": _required_node_affinity({"key": "zone", "operator": "Is", "values": ["a"]})},
        {},
        f"task_config.affinity.{NODE_TERMS}[0].matchExpressions[0].operator: 'Is' is not a valid selector operator",
    ),
    "a pod affinity without its topology key": (
        pytorchjob_launch_task_config,
        {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}},
        {},
        "task_config.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: can not "
        "be empty",
    ),
    "a node selector key": (
        pytorchjob_launch_task_config,
        {"node_selector": {"bad key": "a"}},
        {},
        "task_config.node_selector.bad key: 'bad key' is not a valid label key",
    ),
    "a toleration": (
        pytorchjob_launch_task_config,
        {"tolerations": [{"key": "gpu", "operator": "Maybe"}]},
        {},
        "task_config.tolerations[0].operator: 'Maybe' must be Exists or Equal",
    ),
}


# (what the task sets, the explicit inputs beside it, what every replica's pod then has)
TAKEN: dict[str, tuple[dict[str, Any], dict[str, Any], Callable[[dict[str, Any]], bool]]] = {
    "the job's own volume, given again": (
        {"volumes": [{"name": "data", "emptyDir": {}}], "volume_mounts": [{"name": "data", "mountPath": "/data"}]},
        {"manifest": OWN_MANIFEST},
        lambda pod: [v for v in pod["volumes"] if v["name"] == "data"] == [{"name": "data", "emptyDir": {}}],
    ),
    "a variable read from a secret": (
        {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]},
        {},
        lambda pod: (
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}
            in pod["containers"][0]["env"]
        ),
    ),
    "a GPU request equal to its limit": (
        {"resources": {"limits": {GPU: 1.0}, "requests": {GPU: "1"}}},
        {},
        lambda pod: pod["containers"][0]["resources"] == {"limits": {GPU: "1"}, "requests": {GPU: "1"}},
    ),
    "an affinity the API server takes": (
        {"affinity": AFFINITY},
        {},
        lambda pod: pod["affinity"] == AFFINITY,
    ),
}
