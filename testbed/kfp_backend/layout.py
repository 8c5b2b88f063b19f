"""Where KFP's backend puts a run's outputs, and the local paths its launcher maps URIs to.

The rules, with their upstream lines, are in the comment below the imports.
"""

from __future__ import annotations

import uuid

from testbed.kfp_backend.versions import Backend

# - The run's directory is ``<pipeline root>/<pipeline name>/<run uuid>`` (kubeflow/pipelines@2.5.0:
#   backend/src/v2/metadata/client.go:316, GetPipeline's ``pipeline_root``; @2.17.0 the same at client.go:420).
# - An output artifact is ``<run dir>/<task name>/<salt>/<output name>``, the salt a fresh UUID per task execution
#   (kubeflow/pipelines@2.5.0:backend/src/v2/driver/driver.go:316-322, Container -> provisionOutputs(...,
#   uuid.NewString()); driver.go:2046 the URI; @2.17.0:backend/src/v2/driver/driver.go:775-786, the task root
#   ``<task>/<salt>`` then ``<output>``). Joining trims the root's trailing ``/`` and drops its query string
#   (kubeflow/pipelines@2.5.0:backend/src/v2/metadata/client.go:287-302, GenerateOutputURI).
# - A URI's local path in the container: ``gs://`` -> ``/gcs/``, ``minio://`` -> ``/minio/``, ``s3://`` ->
#   ``/s3/``, ``oci://`` -> ``/oci/``; any other scheme has none (kubeflow/pipelines@2.5.0:
#   backend/src/v2/component/launcher_v2.go:882-896, LocalPathForURI; @2.17.0 launcher_v2.go:1239-1253).
# - Output parameters are written to ``/tmp/kfp/outputs/<name>`` (driver.go:2056 at 2.5.0, driver.go:796 at 2.17.0).
# - The executor output file: ``/tmp/kfp_outputs/output_metadata.json`` before 2.15 (kubeflow/pipelines@2.5.0:
#   backend/src/v2/driver/driver.go:2020, ``component.OutputMetadataFilepath``, component/launcher_v2.go:458;
#   @2.14.0 launcher_v2.go:437), from 2.15 ``output_metadata.json`` in the task root's local path
#   (kubeflow/pipelines@2.15.0:backend/src/v2/driver/driver.go:719-724; @2.17.0 driver.go:802-807).


LOCAL_PREFIXES = {"gs://": "/gcs/", "minio://": "/minio/", "s3://": "/s3/", "oci://": "/oci/"}
OUTPUT_PARAMETERS_DIR = "/tmp/kfp/outputs"
LEGACY_OUTPUT_FILE = "/tmp/kfp_outputs/output_metadata.json"


def _join(root: str, *parts: str) -> str:
    root = root.split("?", 1)[0]
    return root.rstrip("/") + "/" + "/".join(p.strip("/") for p in parts)


def run_root(pipeline_root: str, pipeline_name: str, run_id: str) -> str:
    """The run's directory under ``pipeline_root``."""
    return _join(pipeline_root, pipeline_name, run_id)


def output_uri(run_dir: str, task_name: str, salt: str, output: str) -> str:
    """The URI of one output of one task execution."""
    return _join(run_dir, task_name, salt, output)


def new_salt() -> str:
    return str(uuid.uuid4())


def local_path(uri: str) -> str | None:
    """The container path the launcher maps ``uri`` to; None for a scheme it does not recognise."""
    for prefix, local in LOCAL_PREFIXES.items():
        if uri.startswith(prefix):
            rest = uri[len(prefix) :]
            return local + (rest.replace("/", "_") + "/models" if prefix == "oci://" else rest)
    return None


def executor_output_file(backend: Backend, run_dir: str, task_name: str, salt: str) -> str:
    """The container path the task's executor output file is given at on ``backend``."""
    if not backend.at_least("2.15"):
        return LEGACY_OUTPUT_FILE
    task_root = local_path(output_uri(run_dir, task_name, salt, "").rstrip("/"))
    return f"{task_root}/output_metadata.json" if task_root is not None else LEGACY_OUTPUT_FILE
