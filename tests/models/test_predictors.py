"""The model output contract: floating-point scores of shape [rows, k] or [rows]; anything else (class ids, flags,
another shape) is refused naming the output, its shape and dtype, by every format and before any score is read."""

from __future__ import annotations

import numpy as np
import pytest

from kftrain.models import ModelError, describe_model, predictor_for, save_model
from kftrain.models.predictors import model_scores
from kftrain.steps.evaluate import evaluate_model
from kftrain.steps.prep import prepare_dataset
from testbed.bundled import table_source

ROWS = 4

# Each case: the output of a model for ROWS rows; the 2-D scores read, or the error's words.
OUTPUTS = {
    "logits [rows, classes]": (np.zeros((ROWS, 3), np.float32), (ROWS, 3)),
    "one score per row": (np.zeros(ROWS, np.float64), (ROWS, 1)),
    "half precision": (np.zeros((ROWS, 2), np.float16), (ROWS, 2)),
    "int64 class ids [rows]": (np.arange(ROWS, dtype=np.int64) % 2, r"\(int64, shape \[4\] .*class ids"),
    "int32 ids [rows, 1]": (np.zeros((ROWS, 1), np.int32), r"\(int32, shape \[4, 1\] .*class ids"),
    "booleans": (np.zeros((ROWS, 2), bool), r"\(bool, shape \[4, 2\] .*class ids"),
    "strings": (np.array(["a"] * ROWS), r"\(<U1, shape \[4\] .*not floating-point scores"),
    "three dimensions": (np.zeros((ROWS, 2, 1), np.float32), r"\(float32, shape \[4, 2, 1\] .*expected \[rows, k\]"),
    "another row count": (np.zeros((ROWS + 1, 2), np.float32), r"\(float32, shape \[5, 2\] for 4 rows\): expected"),
    "a scalar": (np.float32(1.0), r"\(float32, shape \[\] for 4 rows\): expected"),
}


@pytest.mark.parametrize("case", OUTPUTS)
def test_the_contract_reads_scores_and_refuses_anything_else(case) -> None:
    value, expected = OUTPUTS[case]
    if isinstance(expected, tuple):
        assert model_scores(value, ROWS, "m", "out").shape == expected
        return
    with pytest.raises(ModelError, match=r"^m: the model's output 'out' " + expected):
        model_scores(value, ROWS, "m", "out")


def _argmax_model(tmp_path, fmt: str | None) -> str:
    """A two-class model that returns its predicted class ids (int64, [rows]), not scores."""
    import torch
    from torch import nn

    class ClassIds(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(1, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x).argmax(dim=1)

    uri = str(tmp_path / f"ids-{fmt}")
    save_model(ClassIds(), uri, example_input=np.zeros((2, 1), np.float32), format=fmt)
    return uri


@pytest.mark.parametrize("fmt", [None, "onnx"])  # TorchScript (whose output was cast to float) and ONNX
def test_a_model_returning_class_ids_is_refused_by_every_format(tmp_path, fmt) -> None:
    spec = describe_model(_argmax_model(tmp_path, fmt))
    predict = predictor_for(spec)
    with pytest.raises(ModelError, match=r"the model's output .*\(int64, shape \[3\] for 3 rows\).*class ids"):
        predict(np.zeros((3, 1), np.float32))


def test_evaluation_refuses_class_ids_instead_of_scoring_them_as_logits(tmp_path) -> None:
    x = np.repeat([0.0, 1.0], 50)[:, None]
    y = np.where(x[:, 0] == 0, "a", "b")
    prepare_dataset(str(tmp_path / "ds"), source=table_source(tmp_path, "t", x, y, ["x"]), label_column="target")
    with pytest.raises(ModelError, match=r"int64, shape \[\d+\].*class ids or labels are not scores"):
        evaluate_model(_argmax_model(tmp_path, None), str(tmp_path / "ds"))


def _onnx_with_external_weights(location: str) -> bytes:
    """A MatMul model whose weight tensor ``W`` says its 48 bytes are in the file ``location`` (ONNX external data)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.external_data_helper import set_external_data

    weight = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    set_external_data(weight, location=location, offset=0, length=48)
    weight.data_location = TensorProto.EXTERNAL
    weight.ClearField("raw_data")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 3])],
        [weight],
    )
    model: bytes = helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]).SerializeToString()
    return model


# ONNX external data (issue 52, class 5): where the weights are said to be, and whether that is outside the folder.
EXTERNAL = {
    "beside the folder": ("../secret.bin", True),
    "an absolute path": ("{tmp}/secret.bin", True),
    "in the working directory, or the folder": ("weights.bin", False),
}


@pytest.mark.parametrize("case", list(EXTERNAL))
def test_onnx_external_data_is_refused_naming_the_tensor_and_the_file(case, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    location, outside = EXTERNAL[case]
    location = location.format(tmp=tmp_path)
    weights = np.full((4, 3), 7, np.float32).tobytes()
    folder, cwd = tmp_path / "model", tmp_path / "cwd"
    for where in (tmp_path / "secret.bin", folder / "weights.bin", cwd / "weights.bin"):
        where.parent.mkdir(exist_ok=True)
        where.write_bytes(weights)  # each place a runtime could read them from has them: none may be read
    (folder / "model.onnx").write_bytes(_onnx_with_external_weights(location))
    monkeypatch.chdir(cwd)
    with pytest.raises(ModelError) as caught:
        predictor_for(describe_model(str(folder)))(np.ones((2, 4), np.float32))
    said = str(caught.value)
    assert "\n" not in said and f"tensor 'W' keeps its data in {location!r}" in said, said
    assert ("outside the model folder" in said) == outside, said
