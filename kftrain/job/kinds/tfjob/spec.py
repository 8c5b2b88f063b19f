"""A TFJob's own ``spec`` fields (training-operator v1.9.0, ``pkg/apis/kubeflow.org/v1/tensorflow_types.go``)."""

from __future__ import annotations

from dataclasses import dataclass

from kftrain.job.model import JobSpec
from kftrain.job.serde import json_field


@dataclass
class TFJobSpec(JobSpec):
    success_policy: str | None = json_field("successPolicy")
    enable_dynamic_worker: bool | None = json_field("enableDynamicWorker")
