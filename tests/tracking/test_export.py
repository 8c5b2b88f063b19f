"""A registered model's name is checked against MLflow's own rule before the export writes anything: each name
MLflow's server refuses is refused here, each it takes is taken."""

from __future__ import annotations

import pytest

from kftrain.errors import JobSpecError
from kftrain.tracking.export import check_model_name

REFUSED = ["..hidden", "..", ".", "../up", "a/b", "/abs", "a:b", "models:/x", "..\u00a0x", "...", "..x..y"]
ACCEPTED = ["digits", "digits-v2", "my.model", "a..b", "x.", "mine_1", ".hidden"]


@pytest.mark.parametrize("name", REFUSED)
def test_a_name_mlflow_refuses_is_refused_first(name: str) -> None:
    from mlflow.exceptions import MlflowException  # MLflow is imported when a test runs, not at collection (seconds)
    from mlflow.utils.validation import _validate_model_name

    with pytest.raises(MlflowException):
        _validate_model_name(name)  # the rule this follows (mlflow-skinny, pinned in constraints.txt)
    with pytest.raises(JobSpecError, match="register_model"):
        check_model_name(name)


@pytest.mark.parametrize("name", ACCEPTED)
def test_a_name_mlflow_takes_is_taken(name: str) -> None:
    from mlflow.utils.validation import _validate_model_name

    _validate_model_name(name)
    check_model_name(name)


@pytest.mark.parametrize("name", [" digits", "digits ", "\tdigits"])
def test_a_name_with_surrounding_spaces_is_refused(name: str) -> None:
    with pytest.raises(JobSpecError, match="surrounding spaces"):
        check_model_name(name)


def test_a_minio_export_is_registered_with_an_s3_source(tmp_path, monkeypatch) -> None:
    """MLflow downloads ``s3://`` (at MLFLOW_S3_ENDPOINT_URL) and has no ``minio://``: the version's source is the
    same bucket and key as ``s3://``."""
    from mlflow.tracking import MlflowClient

    from kftrain.tracking.client import TaskRun, Tracking
    from kftrain.tracking.export import register_export

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a store in the test's folder, no server to start
    uri = (tmp_path / "mlruns").as_uri()
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    run_id = client.create_run(client.create_experiment("export")).info.run_id
    run = TaskRun(Tracking(uri, run_id), client)
    version = register_export(run, "cancer", "minio://mlpipeline/v2/artifacts/run/exported", gate_passed=True)
    registered = client.get_model_version("cancer", version)
    assert registered.source == "s3://mlpipeline/v2/artifacts/run/exported"
