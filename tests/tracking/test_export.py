"""A registered model's name is checked against MLflow's own rule before the export writes anything: each name
MLflow's server refuses is refused here, each it takes is taken."""

from __future__ import annotations

import pytest
from mlflow.exceptions import MlflowException
from mlflow.utils.validation import _validate_model_name

from kftrain.errors import JobSpecError
from kftrain.tracking.export import check_model_name

REFUSED = ["..hidden", "..", ".", "../up", "a/b", "/abs", "a:b", "models:/x", "..\u00a0x", "...", "..x..y"]
ACCEPTED = ["digits", "digits-v2", "my.model", "a..b", "x.", "mine_1", ".hidden"]


@pytest.mark.parametrize("name", REFUSED)
def test_a_name_mlflow_refuses_is_refused_first(name: str) -> None:
    with pytest.raises(MlflowException):
        _validate_model_name(name)  # the rule this follows (mlflow-skinny, pinned in constraints.txt)
    with pytest.raises(JobSpecError, match="register_model"):
        check_model_name(name)


@pytest.mark.parametrize("name", ACCEPTED)
def test_a_name_mlflow_takes_is_taken(name: str) -> None:
    _validate_model_name(name)
    check_model_name(name)


@pytest.mark.parametrize("name", [" digits", "digits ", "\tdigits"])
def test_a_name_with_surrounding_spaces_is_refused(name: str) -> None:
    with pytest.raises(JobSpecError, match="surrounding spaces"):
        check_model_name(name)
