"""The experiment and the pipeline version a run or a recurring run refers to, found or created on the server.

The pipeline is uploaded once by name; when a pipeline of that name exists, the file is uploaded as
a new version (named by :func:`kftrain.cli.kfp.package.default_version_name` unless given), and a
version of that name that already exists is reused, so submitting the same commit twice uploads nothing.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from kftrain.cli.kfp.connection import Connection, display_name, eq_filter, pages, quiet
from kftrain.cli.kfp.package import Prepared
from kftrain.errors import KftrainError

DEFAULT_EXPERIMENT = "Default"


# --- experiments ------------------------------------------------------------------------------------


def find_experiment(client: Any, conn: Connection, name: str) -> Any:
    try:
        with quiet():
            return client.get_experiment(experiment_name=name, namespace=conn.namespace)
    except ValueError as exc:
        raise KftrainError(f"experiment {name!r}: {exc}") from exc


def ensure_experiment(client: Any, conn: Connection, name: str) -> tuple[Any, bool]:
    """The experiment of that name, created when missing; (experiment, created)."""
    try:
        with quiet():
            return client.get_experiment(experiment_name=name, namespace=conn.namespace), False
    except ValueError as exc:
        if not str(exc).startswith("No experiment is found"):
            raise KftrainError(f"experiment {name!r}: {exc}") from exc
    with quiet():
        return client.create_experiment(name=name, namespace=conn.namespace), True


def use_experiment(client: Any, conn: Connection, name: str) -> Any:
    """:func:`ensure_experiment`, saying which."""
    experiment, created = ensure_experiment(client, conn, name)
    print(f"[kftrain] {'created' if created else 'using'} experiment {name!r} ({experiment.experiment_id})")
    return experiment


# --- pipelines and versions -------------------------------------------------------------------------


@dataclass(frozen=True)
class Uploaded:
    pipeline_id: str
    version_id: str
    version_name: str
    action: str  # "uploaded", "uploaded new version", "reused existing version"


def find_pipeline(client: Any, conn: Connection, name: str) -> Any | None:
    found = [
        p
        for p in pages(client.list_pipelines, "pipelines", filter=eq_filter(name), namespace=conn.namespace)
        if display_name(p) == name
    ]
    if len(found) > 1:
        ids = ", ".join(p.pipeline_id for p in found)
        raise KftrainError(f"{len(found)} pipelines are named {name!r} ({ids}); pass --pipeline-name")
    return found[0] if found else None


def find_version(client: Any, pipeline_id: str, name: str) -> Any | None:
    for version in pages(
        client.list_pipeline_versions, "pipeline_versions", pipeline_id=pipeline_id, filter=eq_filter(name)
    ):
        if display_name(version) == name:
            return version
    return None


def ensure_pipeline(client: Any, conn: Connection, prepared: Prepared, description: str | None) -> Uploaded:
    """Upload the pipeline, or a version of it named ``prepared.version_name`` (reused when it exists)."""
    name, version_name, path = prepared.name, prepared.version_name, str(prepared.package.path)
    existing = find_pipeline(client, conn, name)
    if existing is None:
        with quiet():
            pipeline = client.upload_pipeline(
                path, pipeline_name=name, description=description, namespace=conn.namespace
            )
        versions = client.list_pipeline_versions(
            pipeline_id=pipeline.pipeline_id, page_size=1, sort_by="created_at desc"
        ).pipeline_versions
        if not versions:
            raise KftrainError(f"pipeline {name!r} ({pipeline.pipeline_id}) was uploaded but has no version")
        return Uploaded(pipeline.pipeline_id, versions[0].pipeline_version_id, display_name(versions[0]), "uploaded")
    version = find_version(client, existing.pipeline_id, version_name)
    if version is not None:
        return Uploaded(existing.pipeline_id, version.pipeline_version_id, version_name, "reused existing version")
    with quiet():
        version = client.upload_pipeline_version(
            path,
            pipeline_version_name=version_name,
            pipeline_id=existing.pipeline_id,
            description=description,
        )
    return Uploaded(existing.pipeline_id, version.pipeline_version_id, version_name, "uploaded new version")


def upload(client: Any, conn: Connection, prepared: Prepared, description: str | None) -> Uploaded:
    """:func:`ensure_pipeline`, saying what it did."""
    uploaded = ensure_pipeline(client, conn, prepared, description)
    print(
        f"[kftrain] {uploaded.action}: pipeline {prepared.name!r} ({uploaded.pipeline_id}) "
        f"version {uploaded.version_name!r} ({uploaded.version_id})"
    )
    return uploaded


def run_target(prepared: Prepared, uploaded: Uploaded, args: argparse.Namespace) -> dict[str, Any]:
    """What a run and a recurring run of the uploaded version share: the keyword arguments of both KFP calls."""
    return {
        "params": prepared.params,
        "pipeline_id": uploaded.pipeline_id,
        "version_id": uploaded.version_id,
        "pipeline_root": args.pipeline_root,
        "service_account": args.service_account,
    }
