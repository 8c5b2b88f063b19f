"""A PyTorchJob's own ``spec`` fields (training-operator v1.9.0, ``pkg/apis/kubeflow.org/v1/pytorch_types.go``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kftrain.job.model import JobSpec
from kftrain.job.serde import INT32, json_field


@dataclass
class RdzvConf:
    key: str | None = json_field("key")
    value: str | None = json_field("value")


@dataclass
class ElasticPolicy:
    min_replicas: int | None = json_field("minReplicas", bits=INT32)
    max_replicas: int | None = json_field("maxReplicas", bits=INT32)
    rdzv_backend: str | None = json_field("rdzvBackend")
    rdzv_port: int | None = json_field("rdzvPort", bits=INT32)
    rdzv_host: str | None = json_field("rdzvHost")
    rdzv_id: str | None = json_field("rdzvId")
    rdzv_conf: list[RdzvConf] | None = json_field("rdzvConf")
    standalone: bool | None = json_field("standalone")
    n_proc_per_node: int | None = json_field("nProcPerNode", bits=INT32)
    max_restarts: int | None = json_field("maxRestarts", bits=INT32)
    metrics: list[dict[str, Any]] | None = json_field("metrics")


@dataclass
class PyTorchJobSpec(JobSpec):
    elastic_policy: ElasticPolicy | None = json_field("elasticPolicy")
    nproc_per_node: str | None = json_field("nprocPerNode")
