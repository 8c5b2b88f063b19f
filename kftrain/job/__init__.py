"""The pure job model: one typed TrainingJob for TFJob, PyTorchJob and MPIJob, with no I/O but reading a manifest.

model.py (dataclasses) and serde.py (the one dict mapping) hold the shape; manifest.py loads and renders
kubectl-style YAML; builder.py builds a job from typed inputs; validate.py checks what every kind shares
and kinds/ holds everything one kind does differently; crd_schema.py validates against the operators'
CRD schemas; topology.py names replicas and where they listen; naming.py ties a job to its pipeline run;
pods.py is the one policy for the platform's pod settings.
"""

from kftrain.job.builder import ReplicaInput, build_job
from kftrain.job.kinds import Kind, kind_for, kind_of, main_container
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
from kftrain.job.pods import PodSettings, apply_pod_settings
from kftrain.job.validate import validate_job

__all__ = [
    "CleanPodPolicy",
    "Container",
    "ElasticPolicy",
    "EnvVar",
    "JobKind",
    "JobSpec",
    "Kind",
    "ObjectMeta",
    "PodSettings",
    "ReplicaInput",
    "ReplicaSpec",
    "RestartPolicy",
    "RunPolicy",
    "TrainingJob",
    "apply_pod_settings",
    "build_job",
    "kind_for",
    "kind_of",
    "load_manifest",
    "load_manifest_file",
    "main_container",
    "render_manifest",
    "render_yaml",
    "validate_job",
]
