"""KFP's launcher: moves a task's artifacts and runs its container command, as ``launcher_v2.go`` does.

E = kubeflow/pipelines@2.5.0:backend/src/v2/component/launcher_v2.go, F = the same file @2.17.0,
G = kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/object_store.go:

- Parameters the task was not given get their component defaults before the command sees them
  (addDefaultParams: E:358, E:928; F:425, F:1310).
- Every input artifact is downloaded to its local path before the command starts, whether the command reads
  ``.path`` or not ("TODO: Selectively copy artifacts for which .path was actually specified", E:662, F:977);
  skipped: a URI of a scheme with no local path (E:641-645, F:956-960) and, from 2.15, an artifact whose
  metadata carries ``_kfp_workspace: true`` (F:950-954). A download lists the key as a raw prefix: before 2.17
  every object whose key merely starts with it comes too (``<model>`` brings ``<model>-checkpoints/``...:
  G:123-148; 2.17 keeps keys under ``<prefix>/`` only, kubeflow/pipelines@2.17.0:
  backend/src/v2/objectstore/object_store.go:171-174, 192).
- The command is the container's command and args with ``{{$}}`` replaced by the executor input (JSON).
- Its executor output file is parsed strictly (``protojson.Unmarshal``, E:875, F:1232); an output artifact's
  URI and metadata in it replace the provisioned ones (mergeRuntimeArtifacts, E:835-849).
- Each output artifact is uploaded from its local path, if there is one (a missing path is allowed, E:566-570);
  its key must lie under the run's bucket and prefix, else the task fails (KeyFromURI, E:561-564;
  kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/config.go:86-97); a URI of a scheme with no local path
  is recorded without an upload (E:558-560).
- Recorded artifacts keep their metadata, less ``_kfp_workspace`` (kubeflow/pipelines@2.17.0:
  backend/src/v2/metadata/converter.go:122-126).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from testbed.kfp_backend.driver import DriverError
from testbed.kfp_backend.layout import local_path
from testbed.kfp_backend.store import Bucket
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


def as_protojson(value: Any) -> Any:
    """``value`` as Go's protojson writes a ``structpb.Value``: every number is a double, written without a
    fraction when it has none (42, not 42.0), which Python's json reads back as an int."""
    if isinstance(value, dict):
        return {k: as_protojson(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_protojson(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


def with_defaults(executor_input: dict[str, Any], component: dict[str, Any]) -> dict[str, Any]:
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


def run_task(
    *,
    backend: Backend,
    executor_input: dict[str, Any],
    component: dict[str, Any],
    container: dict[str, Any],
    bucket: Bucket,
    pod_fs: PodFilesystem,
    env: dict[str, str],
    timeout: float,
) -> tuple[LaunchRecord, dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Run one container task; returns what happened, its output parameters and its recorded output artifacts."""
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
    text = json.dumps(as_protojson(executor_input))
    command = [text if part == "{{$}}" else part for part in container["command"]]
    args = [text if part == "{{$}}" else part for part in container.get("args", [])]
    left = [p for p in command + args if "{{$" in p]
    if left:
        raise DriverError(f"placeholders {left} are not modelled by this harness")
    result = subprocess.run(
        [*command, *args], env=env, cwd=pod_fs.root, capture_output=True, text=True, timeout=timeout, check=False
    )
    record.exit_code, record.log = result.returncode, result.stdout + result.stderr
    if result.returncode != 0:
        raise LauncherError(f"exit code {result.returncode}:\n{record.log[-6000:]}")
    output = executor_output(pod_fs.path(executor_input["outputs"]["outputFile"]))
    parameters = output_parameters(executor_input, output, component, pod_fs)
    artifacts = upload_outputs(executor_input, output, bucket, pod_fs, record)
    return record, parameters, artifacts


def download(backend: Backend, artifact: dict[str, Any], bucket: Bucket, pod_fs: PodFilesystem) -> int:
    """Download one input artifact to its local path as the launcher does; the bytes copied."""
    if backend.workspace_marker and (artifact.get("metadata") or {}).get("_kfp_workspace") is True:
        return 0
    local = local_path(artifact["uri"])
    if local is None or artifact["uri"].startswith("oci://"):
        return 0
    siblings_too = backend.tag < "2.17"
    return bucket.download_prefix(artifact["uri"], pod_fs.path(local), siblings_too=siblings_too)


def executor_output(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {"parameterValues": {}, "artifacts": {}}
    text = path.read_text()
    try:
        json_format.Parse(text, pipeline_spec_pb2.ExecutorOutput(), ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise LauncherError(f"failed to unmarshall ExecutorOutput in file {path}: {exc}") from None
    return dict(json.loads(text))


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
    executor_input: dict[str, Any],
    output: dict[str, Any],
    bucket: Bucket,
    pod_fs: PodFilesystem,
    record: LaunchRecord,
) -> dict[str, list[dict[str, Any]]]:
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
        if local is not None:
            if not bucket.owns(artifact["uri"]):
                raise LauncherError(
                    f"failed to upload output artifact {name!r}: URI {artifact['uri']!r} does not have expected "
                    f"bucket prefix {bucket.prefixed_bucket!r}"
                )
            source = pod_fs.path(local)
            if source.exists():
                record.uploaded_bytes[name] = bucket.upload(source, artifact["uri"])
        metadata = {k: v for k, v in (artifact.get("metadata") or {}).items() if k != "_kfp_workspace"}
        recorded[name] = [{**artifact, "metadata": metadata}]
    return recorded


def pod_environment(base: dict[str, str], pod_env: dict[str, str]) -> dict[str, str]:
    """The user container's environment: the image's (``base``), then what KFP and the pod spec add."""
    pythonpath = os.pathsep.join(p for p in (str(SITE_DIR), base.get("PYTHONPATH", "")) if p)
    return {**base, **pod_env, "PYTHONPATH": pythonpath}
