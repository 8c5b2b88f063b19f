"""Load kubectl-style manifests into a :class:`TrainingJob` and render them back.

The text is parsed by :mod:`kftrain.job.yaml_input`, which bounds what untrusted YAML can cost."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kftrain.errors import JobSpecError
from kftrain.job.kinds import KindSpec, kind_for, kind_of
from kftrain.job.model import JobSpec, ObjectMeta, ReplicaSpec, TrainingJob
from kftrain.job.serde import from_dict, to_dict
from kftrain.job.trainer_catalog import RuntimeCatalog
from kftrain.job.validate import validate_job
from kftrain.job.yaml_input import MAX_MANIFEST_BYTES, check_size, decode_manifest, parse_yaml

_TOP_LEVEL_KEYS = {"apiVersion", "kind", "metadata", "spec", "status"}


def load_manifest_file(path: str | Path, *, runtimes: RuntimeCatalog | None = None) -> TrainingJob:
    """The job in the manifest file at ``path``: bounded in size, UTF-8, one YAML document."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            check_size(os.fstat(handle.fileno()).st_size, str(path))  # before reading a byte of a huge file
            data = handle.read(MAX_MANIFEST_BYTES + 1)  # a pipe has no size: never more than the limit
    except OSError as exc:
        raise JobSpecError(str(path), f"cannot read manifest: {exc.strerror or exc}") from None
    source = str(path)
    return load_manifest(parse_yaml(decode_manifest(data, source), source), runtimes=runtimes)


def load_manifest(
    data: Mapping[str, Any] | str, *, validate: bool = True, runtimes: RuntimeCatalog | None = None
) -> TrainingJob:
    """Build a job from a manifest dict (or YAML text) and validate it.

    A TrainJob is resolved on the runtime it names, from ``runtimes`` (default: the runtimes Trainer installs,
    and those in ``KFTRAIN_TRAINER_RUNTIMES``)."""
    if isinstance(data, str):
        data = parse_yaml(data)
    if not isinstance(data, Mapping):
        raise JobSpecError("", f"a manifest must be a mapping, got {type(data).__name__}")
    for key in ("apiVersion", "kind"):
        if not data.get(key):
            raise JobSpecError(key, "missing")
    unknown = sorted(set(map(str, data)) - _TOP_LEVEL_KEYS)
    if unknown:
        raise JobSpecError(unknown[0], "unknown top-level field")
    kind = kind_for(data["kind"], data["apiVersion"])
    own = kind.load(data, runtimes=runtimes)
    if own is not None:
        if validate:
            validate_job(own)
        return own
    kspec = kind.spec
    spec = data.get("spec")
    if not isinstance(spec, Mapping):
        raise JobSpecError("spec", "missing or not a mapping")
    spec = dict(spec)
    raw_replicas = spec.pop(kspec.replica_key, None)
    if not isinstance(raw_replicas, Mapping) or not raw_replicas:
        raise JobSpecError(f"spec.{kspec.replica_key}", "missing or empty: a job needs at least one replica type")
    _reject_fields_of_other_kinds(kspec, spec)
    job = TrainingJob(
        kind=kspec.kind,
        api_version=kspec.api_version,
        metadata=from_dict(ObjectMeta, data.get("metadata") or {}, "metadata"),
        replica_specs={
            str(rtype): from_dict(ReplicaSpec, rspec, f"spec.{kspec.replica_key}.{rtype}")
            for rtype, rspec in raw_replicas.items()
        },
        spec=from_dict(JobSpec, spec, "spec"),
    )
    if validate:
        validate_job(job)
    return job


def _reject_fields_of_other_kinds(kspec: KindSpec, spec: Mapping[str, Any]) -> None:
    json_to_attr = {f.metadata["json"]: f.name for f in dataclasses.fields(JobSpec)}
    for key in spec:
        attr = json_to_attr.get(key)
        if attr is not None and attr not in kspec.spec_fields:
            raise JobSpecError(f"spec.{key}", f"not a field of {kspec.kind.value} {kspec.api_version}")


def render_manifest(job: TrainingJob) -> dict[str, Any]:
    """The manifest the operator would be given for ``job`` (no status)."""
    kind = kind_of(job)
    own = kind.render(job)
    if own is not None:
        return own
    kspec = kind.spec
    spec: dict[str, Any] = {kspec.replica_key: {rtype: to_dict(r) for rtype, r in job.replica_specs.items()}}
    spec.update(to_dict(job.spec))
    return {
        "apiVersion": job.api_version,
        "kind": job.kind.value,
        "metadata": to_dict(job.metadata),
        "spec": spec,
    }


def render_yaml(job: TrainingJob) -> str:
    return yaml.safe_dump(render_manifest(job), sort_keys=False, default_flow_style=False)
