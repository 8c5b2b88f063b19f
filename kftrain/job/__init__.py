"""The pure job model: one typed :class:`TrainingJob` for every kind, with no I/O but reading a manifest.

:mod:`.model` (the shapes every kind shares) and :mod:`.serde` (the one dict mapping); :mod:`.kinds` (one package
per kind: its spec fields, contract, launch inputs and program, and the registry ``KINDS``); :mod:`.manifest`
(load and render YAML, CRD schemas); :mod:`.build` (a job from typed replica inputs); :mod:`.request` (a job
from a launch component's typed inputs); :mod:`.validate` (what every kind checks); :mod:`.pod_settings` (every
pod setting, declared once) and :mod:`.pod_apply` (what each does to a job); :mod:`.topology` (replica ids and
where they listen); :mod:`.naming` (a job's name and its run's labels).
"""

from kftrain.job.build import ReplicaInput, build_job
from kftrain.job.kinds import KINDS, Kind, kind_for, kind_of, main_container
from kftrain.job.manifest import load_manifest, load_manifest_file, render_manifest, render_yaml
from kftrain.job.model import (
    CleanPodPolicy,
    Container,
    EnvVar,
    JobSpec,
    ObjectMeta,
    ReplicaSpec,
    RestartPolicy,
    RunPolicy,
    TrainingJob,
)
from kftrain.job.pod_settings import PodSettings, apply_pod_settings
from kftrain.job.validate import validate_job

__all__ = [
    "KINDS",
    "CleanPodPolicy",
    "Container",
    "EnvVar",
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
