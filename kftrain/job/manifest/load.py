"""Load kubectl-style manifests into a :class:`TrainingJob` and render them back.

The text is parsed by :mod:`kftrain.job.manifest.parse`, which bounds what untrusted YAML can cost. A kind whose
manifest is laid out as replica specs is mapped here (its ``spec`` fields are the kind's ``spec_type``); a kind
with a shape of its own (TrainJob) loads and renders itself (:meth:`Kind.load`, :meth:`Kind.render`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kftrain.errors import JobSpecError
from kftrain.job.kinds import KINDS, KindSpec, kind_for, kind_of
from kftrain.job.manifest.parse import parse_yaml_documents, read_text_file
from kftrain.job.model import ObjectMeta, ReplicaSpec, TrainingJob
from kftrain.job.serde import from_dict, to_dict
from kftrain.job.validate import validate_job

_TOP_LEVEL_KEYS = {"apiVersion", "kind", "metadata", "spec", "status"}


def load_manifest_file(path: str | Path, *, runtimes: Any = None) -> TrainingJob:
    """The job in the manifest file at ``path``: a regular file, bounded in size, UTF-8 (:func:`read_text_file`), one
    job among its YAML documents (with what the job's kind takes beside it: a TrainJob's runtimes)."""
    return load_manifest(read_text_file(path), runtimes=runtimes, source=str(path))


def load_manifest(
    data: Mapping[str, Any] | str, *, validate: bool = True, runtimes: Any = None, source: str = "<manifest>"
) -> TrainingJob:
    """Build a job from a manifest dict (or YAML text) and validate it.

    ``runtimes`` is what the job may name outside itself (a TrainJob's runtime catalog: by default the runtimes
    Trainer installs; :meth:`Kind.runtimes_from_env` adds those the environment names). YAML text may hold several
    documents, as ``kubectl apply -f`` takes them: one job, and what its kind takes beside it
    (:meth:`Kind.with_companions`: a TrainJob's TrainingRuntimes and ClusterTrainingRuntimes, which win over
    ``runtimes``)."""
    if isinstance(data, str):
        job_doc, companions = _the_job(parse_yaml_documents(data, source), source)
        if companions:
            kind = kind_for(str(job_doc.get("kind")), str(job_doc.get("apiVersion")))
            runtimes = kind.with_companions(companions, source, runtimes)
        data = job_doc
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
        spec=from_dict(kspec.spec_type, spec, "spec"),
    )
    if validate:
        validate_job(job)
    return job


def _the_job(docs: list[Any], source: str) -> tuple[Any, list[tuple[int, Mapping[str, Any]]]]:
    """The one job among ``docs``, and the other documents with their index (``file.yaml#1``)."""
    if len(docs) == 1:
        return docs[0], []
    if not docs:
        raise JobSpecError(source, "expected exactly one YAML document, found 0")
    kinds = {kind.spec.kind for kind in KINDS}
    jobs = [(i, d) for i, d in enumerate(docs) if isinstance(d, Mapping) and d.get("kind") in kinds]
    others = [(i, d) for i, d in enumerate(docs) if isinstance(d, Mapping) and d.get("kind") not in kinds]
    odd = [i for i, d in enumerate(docs) if not isinstance(d, Mapping)]
    if odd:
        raise JobSpecError(f"{source}#{odd[0]}", f"a manifest must be a mapping, got {type(docs[odd[0]]).__name__}")
    if len(jobs) != 1:
        found = ", ".join(f"#{i} {d.get('kind')} {(d.get('metadata') or {}).get('name')}" for i, d in jobs) or "none"
        raise JobSpecError(source, f"expected exactly one job among its {len(docs)} YAML documents, found: {found}")
    return jobs[0][1], others


def _reject_fields_of_other_kinds(kspec: KindSpec, spec: Mapping[str, Any]) -> None:
    """A field another kind (or another version of this one) has is named as such, not as merely unknown."""
    own = {f.metadata["json"] for f in dataclasses.fields(kspec.spec_type) if kspec.accepts(f.name)}
    others = {
        f.metadata["json"] for kind in KINDS for f in dataclasses.fields(kind.spec.spec_type) if f.metadata.get("json")
    }
    for key in spec:
        if key not in own and key in others:
            raise JobSpecError(f"spec.{key}", f"not a field of {kspec.kind} {kspec.api_version}")


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
        "kind": job.kind,
        "metadata": to_dict(job.metadata),
        "spec": spec,
    }


def render_yaml(job: TrainingJob) -> str:
    return yaml.safe_dump(render_manifest(job), sort_keys=False, default_flow_style=False)
