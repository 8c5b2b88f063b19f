"""The typed job model shared by TFJob, PyTorchJob and MPIJob."""

from kftrain.job.builder import ReplicaInput, build_job
from kftrain.job.kinds import KIND_SPECS, KindSpec, kind_spec
from kftrain.job.manifest import load_manifest, load_manifest_file, render_manifest, render_yaml
from kftrain.job.model import (
    CleanPodPolicy,
    Container,
    ElasticPolicy,
    EnvVar,
    JobKind,
    JobSpec,
    ObjectMeta,
    ReplicaSpec,
    RestartPolicy,
    RunPolicy,
    TrainingJob,
)
from kftrain.job.validate import main_container_name, validate_job

__all__ = [
    "KIND_SPECS",
    "CleanPodPolicy",
    "Container",
    "ElasticPolicy",
    "EnvVar",
    "JobKind",
    "JobSpec",
    "KindSpec",
    "ObjectMeta",
    "ReplicaInput",
    "ReplicaSpec",
    "RestartPolicy",
    "RunPolicy",
    "TrainingJob",
    "build_job",
    "kind_spec",
    "load_manifest",
    "load_manifest_file",
    "main_container_name",
    "render_manifest",
    "render_yaml",
    "validate_job",
]
