"""A launch step's run and task, read from its Model output's URI as KFP's backend and local runner lay it out.

The backend's URIs are built here as its driver builds them (``testbed/kfp_backend/layout.py``: a real run UUID,
the task's name and a fresh UUID salt per task execution), never hand-written salts.
"""

from __future__ import annotations

import uuid

import pytest

from kftrain.errors import JobSpecError
from kftrain.launch.identity import identity_from_output_uri, resolve_run_identity
from testbed.kfp_backend.layout import output_uri, run_root

ROOT = "minio://mlpipeline/v2/artifacts"


def test_backend_uri_gives_the_run_uuid_and_the_task_with_its_salt():
    run = str(uuid.uuid4())
    salt = str(uuid.uuid4())
    uri = output_uri(run_root(ROOT, "pytorch-digits", run), "pytorchjob-launch", salt, "model")
    identity = identity_from_output_uri(uri)
    assert (identity.run_id, identity.task_id) == (run, f"pytorchjob-launch/{salt}")


def test_two_executions_of_one_task_name_are_two_tasks_of_one_run():
    """A ParallelFor's iterations share the task's name; the driver's salt tells them apart."""
    root = run_root(ROOT, "pytorch-digits", str(uuid.uuid4()))
    first, second = (
        identity_from_output_uri(output_uri(root, "pytorchjob-launch", str(uuid.uuid4()), "model")) for _ in range(2)
    )
    assert first.run_id == second.run_id
    assert first.task_id != second.task_id


@pytest.mark.parametrize(
    "root",
    [
        "minio://mlpipeline/private-artifacts/team-a/v2/artifacts",  # a KFP 2.16 profile's defaultPipelineRoot
        "s3://bucket/prefix",
        "gs://bucket",
        "minio://mlpipeline/v2/artifacts/",  # a trailing slash: the driver trims it
    ],
)
def test_any_pipeline_root_and_uuid_run_id(root):
    run, salt = str(uuid.uuid4()), str(uuid.uuid4())
    identity = identity_from_output_uri(output_uri(run_root(root, "tf-digits", run), "tfjob-launch", salt, "model"))
    assert identity.run_id == run
    assert identity.task_id == f"tfjob-launch/{salt}"


def test_local_runner_uri_gives_its_run_folder_and_task(tmp_path):
    uri = str(tmp_path / "pytorch-digits-2026-11-23-10-00-00-000000" / "pytorchjob-launch" / "model")
    identity = identity_from_output_uri(uri)
    assert (identity.run_id, identity.task_id) == ("pytorch-digits-2026-11-23-10-00-00-000000", "pytorchjob-launch")


# A fixed UUID: the ids must be the same in every process that collects them (pytest-xdist's workers).
@pytest.mark.parametrize("uri", ["model", "minio://bucket/model", "s3://b/0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0/model"])
def test_a_uri_of_neither_layout_is_refused_naming_the_inputs(uri):
    with pytest.raises(JobSpecError, match="run_id"):
        identity_from_output_uri(uri)


def test_placeholders_left_unfilled_are_refused():
    with pytest.raises(JobSpecError, match="task_id"):
        resolve_run_identity("run-1", "{{$.pipeline_task_uuid}}", "")
