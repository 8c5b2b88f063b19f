"""A job's identity within a pipeline run: its name, and the labels and annotations that tie it to the run.

A launch step names its job deterministically from KFP's run and task ids, so a restarted step finds the
job it created instead of creating a second one, and labels the job and its pods with both ids (so
``kubectl get pods -l kftrain.io/run-id=...`` finds them, and a reattaching step can check the job is its
own). The same stamp serves jobs built from inputs and jobs given as manifests.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from kftrain import __version__
from kftrain.job.model import TrainingJob

RUN_ID_LABEL = "kftrain.io/run-id"
TASK_ID_LABEL = "kftrain.io/task-id"
# The full ids, in case sanitizing them into label values lost something.
RUN_ID_ANNOTATION = "kftrain.io/run-id"
TASK_ID_ANNOTATION = "kftrain.io/task-id"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
VERSION_LABEL = "kftrain.io/version"
MANAGED_BY = "kftrain"
# Where the launch step keeps what outlives the job's pods: the model it writes and every replica's log, so
# `kftrain jobs logs` and `download` find them (on either backend) once the pods are gone.
MODEL_URI_ANNOTATION = "kftrain.io/model-uri"
LOGS_URI_ANNOTATION = "kftrain.io/logs-uri"

_NOT_NAME = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")
# Room left for the operator's suffixes: it names pods and Services "<job>-worker-<i>" and "<job>-launcher",
# and both must stay within 63 characters.
DEFAULT_NAME_LENGTH = 48
_HASH_LENGTH = 8


def job_name_for(run_id: str, task_id: str, base: str = "", max_length: int = DEFAULT_NAME_LENGTH) -> str:
    """A deterministic job name for one task of one KFP run: ``<base>-<run id>-<hash>``.

    The same (run, task) always gives the same name; the hash covers the full ids, so truncation never
    makes two tasks collide. The result is an RFC 1123 label that starts with a letter (Service names
    need one), at most ``max_length`` (<= 63) characters.
    """
    if not run_id or not task_id:
        raise ValueError("job_name_for needs both a run id and a task id")
    max_length = min(max_length, 63)
    digest = hashlib.sha256(f"{run_id}\0{task_id}".encode()).hexdigest()[:_HASH_LENGTH]
    stem = "-".join(p for p in (_sanitize_name(base), _sanitize_name(run_id)[:8]) if p)
    if not stem or not stem[0].isalpha():
        stem = f"kft-{stem}" if stem else "kft"
    stem = stem[: max_length - _HASH_LENGTH - 1].strip("-")
    return f"{stem}-{digest}"


def _sanitize_name(text: str) -> str:
    return _NOT_NAME.sub("-", text.lower()).strip("-")


def label_value(text: str) -> str:
    """``text`` as a valid label value: [A-Za-z0-9._-], at most 63, alphanumeric at both ends."""
    value = _NOT_LABEL.sub("-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def stamp_run_identity(job: TrainingJob, run_id: str, task_id: str) -> None:
    """Name ``job`` after its run and task (its current name as the base) and label it, and its pods, with both."""
    job.metadata.name = job_name_for(run_id, task_id, base=job.name)
    job.metadata.generate_name = None
    ids = {RUN_ID_LABEL: label_value(run_id), TASK_ID_LABEL: label_value(task_id)}
    job.metadata.labels = {
        **(job.metadata.labels or {}),
        MANAGED_BY_LABEL: MANAGED_BY,
        VERSION_LABEL: label_value(__version__),
        **ids,
    }
    job.metadata.annotations = {
        **(job.metadata.annotations or {}),
        RUN_ID_ANNOTATION: run_id,
        TASK_ID_ANNOTATION: task_id,
    }
    for rspec in job.replica_specs.values():
        template_meta = dict(rspec.template.metadata or {})
        template_meta["labels"] = {**(template_meta.get("labels") or {}), **ids}
        rspec.template.metadata = template_meta


def run_identity(job: TrainingJob) -> dict[str, str]:
    """The run and task labels ``job`` carries (empty when it was not launched by a pipeline step)."""
    labels = job.metadata.labels or {}
    return {k: labels[k] for k in (RUN_ID_LABEL, TASK_ID_LABEL) if k in labels}


def stamp_outputs(job: TrainingJob, model_uri: str, logs_uri: str) -> None:
    """Record on ``job`` where its model and its replicas' logs are kept."""
    job.metadata.annotations = {
        **(job.metadata.annotations or {}),
        MODEL_URI_ANNOTATION: model_uri,
        LOGS_URI_ANNOTATION: logs_uri,
    }


def outputs_of(annotations: Mapping[str, str] | None) -> tuple[str, str]:
    """The (model URI, logs URI) a job's annotations record; "" for what they do not."""
    annotations = annotations or {}
    return annotations.get(MODEL_URI_ANNOTATION, ""), annotations.get(LOGS_URI_ANNOTATION, "")
