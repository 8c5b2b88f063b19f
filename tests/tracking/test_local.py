"""The params a local run's task logs, written as KFP 2.17's launcher writes them: each input parameter as protobuf's
Struct holds it (every number a float64), marshalled by Go's encoding/json (kubeflow/pipelines@2.17.0:
backend/src/v2/common/plugins/mlflow/handler.go, mapToParams)."""

from __future__ import annotations

import pytest

from kftrain.tracking.local import MAX_PARAM_VALUE, _param_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("test", '"test"'),  # a string, quoted
        (3600.0, "3600"),  # a whole float64: Go writes no ".0"
        (0.25, "0.25"),
        (1e22, "1e+22"),  # from 1e21 on, Go's exponent form
        (True, "true"),
        (None, "null"),
        ({"b": 2.0, "a": [1.5, "x"]}, '{"a":[1.5,"x"],"b":2}'),  # compact, keys sorted
        ("<a & b>", '"\\u003ca \\u0026 b\\u003e"'),  # HTML-safe escapes
        ("é", '"é"'),  # non-ASCII as it is
    ],
)
def test_params_are_written_as_kfps_launcher_writes_them(value, text):
    assert _param_text(value) == text


def test_a_param_longer_than_mlflow_takes_is_cut():
    text = _param_text("x" * 10_000)
    assert len(text) == MAX_PARAM_VALUE and text.endswith("...")
