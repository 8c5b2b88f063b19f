"""KFP's launcher: moves a task's artifacts and runs its container command, as ``launcher_v2.go`` does.

Each function cites the launcher's code it follows, with E = kubeflow/pipelines@2.5.0:backend/src/v2/component/
launcher_v2.go, F = the same file @2.17.0, G = kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/object_store.go.
Recorded artifacts are what ML Metadata keeps of them (:mod:`testbed.kfp_backend.mlmd`): a later task reads that
metadata, and a null field fails this task. The step's process, and what a cancelled run does to it:
:mod:`testbed.kfp_backend.pod_process`.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from kftrain.job.manifest.schema import as_go_json
from testbed.kfp_backend import mlmd
from testbed.kfp_backend.driver import DriverError
from testbed.kfp_backend.layout import local_path
from testbed.kfp_backend.pod_process import Cancel, run_step
from testbed.kfp_backend.store import Bucket, key_from_uri, prefixed_bucket
from testbed.kfp_backend.versions import Backend

SITE_DIR = Path(__file__).with_name("pod_site")


class LauncherError(Exception):
    """The task failed in its launcher (or its command failed): the run stops there."""


@dataclass
class LaunchRecord:
    """What happened in one task pod."""

    executor_input: dict[str, Any]
    env: dict[str, str]
    downloaded_bytes: dict[str, int] = field(default_factory=dict)  # per input artifact
    uploaded_bytes: dict[str, int] = field(default_factory=dict)
    exit_code: int = 0
    log: str = ""


def with_defaults(executor_input: dict[str, Any], component: dict[str, Any]) -> dict[str, Any]:
    """The parameters the task was not given get their component defaults before the command sees them
    (addDefaultParams: E:358, E:928; F:425, F:1310)."""
    out = copy.deepcopy(executor_input)
    values = out.setdefault("inputs", {}).setdefault("parameterValues", {})
    for name, spec in component.get("inputDefinitions", {}).get("parameters", {}).items():
        if name not in values and "defaultValue" in spec:
            values[name] = spec["defaultValue"]
    return out


class PodFilesystem:
    """The task pod's own files: each absolute container path lives under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, container_path: str) -> Path:
        if Path(container_path).is_relative_to(self.root):
            return Path(container_path)
        return self.root / container_path.lstrip("/")


@dataclass(frozen=True)
class TaskFiles:
    """Where a task's files are: the store's bucket, the run's folder in it (``run_dir``), the store's session (as
    recorded on each output artifact) and the pod's own files."""

    bucket: Bucket
    run_dir: str
    session_info: str
    pod_fs: PodFilesystem


def run_task(
    *,
    backend: Backend,
    executor_input: dict[str, Any],
    component: dict[str, Any],
    container: dict[str, Any],
    files: TaskFiles,
    env: dict[str, str],
    timeout: float,
    cancel: Cancel | None = None,
) -> tuple[LaunchRecord, dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Run one container task of the run whose files ``files`` holds; returns what happened, its output parameters
    and its recorded output artifacts. The command is the container's command and args with ``{{$}}`` replaced by
    the executor input (JSON)."""
    bucket, pod_fs = files.bucket, files.pod_fs
    executor_input = with_defaults(executor_input, component)
    record = LaunchRecord(executor_input, env)
    for name, listed in executor_input.get("inputs", {}).get("artifacts", {}).items():
        for artifact in listed.get("artifacts", []):
            record.downloaded_bytes[name] = record.downloaded_bytes.get(name, 0) + download(
                backend, artifact, bucket, pod_fs
            )
    for listed in executor_input.get("outputs", {}).get("artifacts", {}).values():
        for artifact in listed["artifacts"]:
            local = local_path(artifact["uri"])
            if local:
                pod_fs.path(local).parent.mkdir(parents=True, exist_ok=True)
    for spec in executor_input.get("outputs", {}).get("parameters", {}).values():
        pod_fs.path(spec["outputFile"]).parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(as_go_json(executor_input))  # as protojson writes it
    command = [text if part == "{{$}}" else part for part in container["command"]]
    args = [text if part == "{{$}}" else part for part in container.get("args", [])]
    left = [p for p in command + args if "{{$" in p]
    if left:
        raise DriverError(f"placeholders {left} are not modelled by this harness")
    log = pod_fs.root / "main.log"
    try:
        argv = [*command, *args]
        record.exit_code = run_step(argv, env=env, cwd=pod_fs.root, log=log, timeout=timeout, cancel=cancel)
    finally:
        record.log = log.read_text(errors="replace") if log.exists() else ""
    if record.exit_code != 0:
        raise LauncherError(f"exit code {record.exit_code}:\n{record.log[-6000:]}")
    output = executor_output(pod_fs.path(executor_input["outputs"]["outputFile"]))
    parameters = output_parameters(executor_input, output, component, pod_fs)
    artifacts = upload_outputs(executor_input, output, files, record)
    return record, parameters, artifacts


def download(backend: Backend, artifact: dict[str, Any], bucket: Bucket, pod_fs: PodFilesystem) -> int:
    """Download one input artifact to its local path as the launcher does; the bytes copied.

    Every input artifact is downloaded before the command starts, whether the command reads ``.path`` or not
    ("TODO: Selectively copy artifacts for which .path was actually specified", E:662, F:977); skipped: a URI of a
    scheme with no local path (E:641-645, F:956-960) and, from 2.15, an artifact whose metadata carries
    ``_kfp_workspace: true`` (F:950-954). A download lists the key as a raw prefix: before 2.17 every object whose
    key merely starts with it comes too (``<model>`` brings ``<model>-checkpoints/``...: G:123-148; 2.17 keeps keys
    under ``<prefix>/`` only, kubeflow/pipelines@2.17.0:backend/src/v2/objectstore/object_store.go:171-174, 192)."""
    if backend.workspace_marker and (artifact.get("metadata") or {}).get("_kfp_workspace") is True:
        return 0
    local = local_path(artifact["uri"])
    if local is None or artifact["uri"].startswith("oci://"):
        return 0
    siblings_too = not backend.at_least("2.17")
    return bucket.download_prefix(artifact["uri"], pod_fs.path(local), siblings_too=siblings_too)


def executor_output(path: Path) -> dict[str, Any]:
    """The executor output file, parsed strictly (``protojson.Unmarshal``, E:875, F:1232): what is not JSON
    (Python's ``NaN``/``Infinity``) or not a field of ``ExecutorOutput`` fails the task; an output artifact's URI
    and metadata in it replace the provisioned ones (mergeRuntimeArtifacts, E:835-849)."""
    if not path.is_file():
        return {"parameterValues": {}, "artifacts": {}}
    text = path.read_text()
    try:
        parsed = json.loads(text, parse_constant=_not_json)  # Go's JSON has no NaN or Infinity
        json_format.ParseDict(parsed, pipeline_spec_pb2.ExecutorOutput(), ignore_unknown_fields=False)
    except (ValueError, json_format.ParseError) as exc:
        raise LauncherError(f"failed to unmarshall ExecutorOutput in file {path}: {exc}") from None
    return dict(parsed)


def _not_json(token: str) -> Any:
    raise ValueError(f"invalid value {token} (not JSON)")


def output_parameters(
    executor_input: dict[str, Any], output: dict[str, Any], component: dict[str, Any], pod_fs: PodFilesystem
) -> dict[str, Any]:
    """Output parameters from the executor output, else from their files (collectOutputParameters, E:416-450)."""
    values = dict(output.get("parameterValues") or {})
    definitions = component.get("outputDefinitions", {}).get("parameters", {})
    for name, spec in executor_input.get("outputs", {}).get("parameters", {}).items():
        if name in values:
            continue
        path = pod_fs.path(spec["outputFile"])
        if not path.is_file():
            raise LauncherError(f"output parameter {name}: {spec['outputFile']} was not written")
        text = path.read_text()
        kind = definitions.get(name, {}).get("parameterType", "STRING")
        values[name] = text if kind == "STRING" else json.loads(text)
    return values


def upload_outputs(
    executor_input: dict[str, Any], output: dict[str, Any], files: TaskFiles, record: LaunchRecord
) -> dict[str, list[dict[str, Any]]]:
    """Upload each output artifact and record it as ML Metadata keeps it; the recorded artifacts by output.

    An artifact is uploaded from its local path, if there is one (a missing path is allowed, E:566-570); its key
    must lie under the run's own folder, ``<pipeline root>/<pipeline>/<run id>``: the launcher opens the bucket from
    the run context's pipeline root (E:215-216; kubeflow/pipelines@2.5.0:backend/src/v2/metadata/client.go:224-233,
    GetPipelineRoot, which GetPipeline set to that folder at client.go:316; @2.17.0 launcher_v2.go:256-257,
    client.go:420) and KeyFromURI refuses a URI outside it (E:561-564; kubeflow/pipelines@2.5.0:backend/src/v2/
    objectstore/config.go:82-97, 103-137): a URI in another run's folder fails the task. A URI of a scheme with no
    local path is recorded without an upload (E:558-560)."""
    run_bucket = prefixed_bucket(files.run_dir)
    recorded: dict[str, list[dict[str, Any]]] = {}
    for name, listed in executor_input.get("outputs", {}).get("artifacts", {}).items():
        artifact = copy.deepcopy(listed["artifacts"][0])
        given = (output.get("artifacts") or {}).get(name, {}).get("artifacts") or []
        if given:
            if given[0].get("uri"):
                artifact["uri"] = given[0]["uri"]
            if given[0].get("metadata"):
                artifact["metadata"] = {**(artifact.get("metadata") or {}), **given[0]["metadata"]}
        local = local_path(artifact["uri"])
        if local is not None and not artifact["uri"].startswith("oci://"):
            try:
                key_from_uri(run_bucket, artifact["uri"])
            except ValueError as exc:
                raise LauncherError(f"failed to upload output artifact {name!r}: {exc}") from None
            source = files.pod_fs.path(local)
            if source.exists():
                record.uploaded_bytes[name] = files.bucket.upload(source, artifact["uri"])
        try:
            metadata = mlmd.recorded(name, artifact.get("metadata") or {}, files.session_info)
        except mlmd.MetadataError as exc:
            raise LauncherError(str(exc)) from None
        recorded[name] = [{**artifact, "name": mlmd.artifact_id(), "metadata": metadata}]
    return recorded


def pod_environment(base: dict[str, str], pod_env: dict[str, str]) -> dict[str, str]:
    """The user container's environment: the image's (``base``), then what KFP and the pod spec add."""
    pythonpath = os.pathsep.join(p for p in (str(SITE_DIR), base.get("PYTHONPATH", "")) if p)
    return {**base, **pod_env, "PYTHONPATH": pythonpath}
