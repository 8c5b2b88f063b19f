"""The tests' job manifests, as plain dicts (or the YAML text a user hands a launch component): tiny builders of
every kind, a replica given as a count (one container) or a full dict. A kind's apiVersion, replica key and container
name are its own facts (:data:`kftrain.job.kinds.KINDS`): :func:`replica_job` builds any kind laid out as replica
specs from them, and the named builders are it for one kind each."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import yaml

from kftrain.job.kinds import KINDS
from kftrain.job.kinds.mpijob import V1, V2BETA1

Replicas = Mapping[str, "int | Mapping[str, Any]"]
IMAGE = "example.com/train:1"


def container(name: str, command: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": IMAGE}
    if command is not None:
        out["command"] = list(command)
    out.update(fields)
    return out


def replica(
    replicas: int | None = 1,
    container_name: str = "pytorch",
    command: list[str] | None = None,
    restart_policy: str | None = None,
    **container_fields: Any,
) -> dict[str, Any]:
    """A replica spec whose pod has the one container ``container_name`` (``container_fields`` on it)."""
    out: dict[str, Any] = {}
    if replicas is not None:
        out["replicas"] = replicas
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    out["template"] = {"spec": {"containers": [container(container_name, command, **container_fields)]}}
    return out


def manifest(
    kind: str,
    api_version: str,
    replica_key: str,
    container_name: str,
    replicas: Replicas,
    *,
    name: str = "job",
    **spec: Any,
) -> dict[str, Any]:
    """A manifest whose replica specs are given as a count (a one-container replica) or a full dict."""
    specs = {
        rtype: replica(r, container_name) if isinstance(r, int) else copy.deepcopy(dict(r))
        for rtype, r in replicas.items()
    }
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name},
        "spec": {replica_key: specs, **copy.deepcopy(spec)},
    }


def replica_job(kind: str, replicas: Replicas, *, api_version: str | None = None, **kw: Any) -> dict[str, Any]:
    """A job of ``kind`` at ``api_version`` (None: its preferred version), as the kind lays out its replica specs."""
    spec = KINDS.get(kind, api_version).spec
    return manifest(spec.kind, spec.api_version, spec.replica_key, spec.container_name, replicas, **kw)


def tfjob(replicas: Replicas, **kw: Any) -> dict[str, Any]:
    return replica_job("TFJob", replicas, **kw)


def pytorchjob(replicas: Replicas, **kw: Any) -> dict[str, Any]:
    return replica_job("PyTorchJob", replicas, **kw)


def mpijob_v2(replicas: Replicas, **kw: Any) -> dict[str, Any]:
    return replica_job("MPIJob", replicas, api_version=V2BETA1, **kw)


def mpijob_v1(replicas: Replicas, **kw: Any) -> dict[str, Any]:
    return replica_job("MPIJob", replicas, api_version=V1, **kw)


def trainjob(runtime: str = "torch-distributed", name: str = "tj", **spec: Any) -> dict[str, Any]:
    """A Trainer v2 TrainJob on the runtime ``runtime`` (a ClusterTrainingRuntime unless ``runtimeRef`` says)."""
    return {
        "apiVersion": KINDS.get("TrainJob").spec.api_version,
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": runtime}, **copy.deepcopy(spec)},
    }


# A runtime's default name here, and the label marking its trainer's replicated job
# (kubeflow/trainer@v2.3.0:pkg/constants/constants.go, LabelTrainJobAncestor).
RUNTIME = "my-runtime"
TRAINER_ANCESTOR = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}


def replicated_job(
    name: str,
    container: str,
    *,
    trainer: bool = False,
    depends_on: list[str] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A runtime's replicated job ``name``: one container ``container`` (after ``init_containers``), the trainer's
    with ``trainer``, started once each of ``depends_on`` has completed."""
    pod: dict[str, Any] = {"containers": [{"name": container, "image": "img"}]}
    if init_containers is not None:
        pod = {"initContainers": copy.deepcopy(init_containers), **pod}
    template: dict[str, Any] = {"spec": {"template": {"spec": pod}}}
    if trainer:
        template["metadata"] = {"labels": dict(TRAINER_ANCESTOR)}
    rjob: dict[str, Any] = {"name": name, "template": template}
    if depends_on is not None:
        rjob["dependsOn"] = [{"name": dep, "status": "Complete"} for dep in depends_on]
    return rjob


def training_runtime(
    *jobs: dict[str, Any], name: str = RUNTIME, kind: str = "ClusterTrainingRuntime"
) -> dict[str, Any]:
    """A torch runtime of the replicated ``jobs`` (by default a ``prep`` job, then the trainer's, which waits on
    it)."""
    jobs = jobs or (replicated_job("prep", "prep"), replicated_job("node", "node", trainer=True, depends_on=["prep"]))
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": list(jobs)}}},
    }


def as_yaml(m: Mapping[str, Any]) -> str:
    """``m`` as a user writes it: YAML text, keys in their order."""
    return yaml.safe_dump(dict(m), sort_keys=False)


def set_path(m: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``m`` with the field at the dotted ``path`` (a number indexes a list; a missing map is added) set to ``value``,
    in place."""
    node = m
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[keys[-1]] = value
    return m


def drop_path(m: dict[str, Any], path: str) -> dict[str, Any]:
    """``m`` without the field at the dotted ``path``, in place."""
    node = m
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[key]
    del node[keys[-1]]
    return m
