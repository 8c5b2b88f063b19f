"""fail ends the run on purpose (a pipeline's dsl.Else for a value no branch takes): its message and the refused
value as one error line, exit status 2."""

from __future__ import annotations

import pytest

from kftrain_components.control.fail.component import fail


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("pickle", "ERROR: model_format: expected torchscript or onnx (got 'pickle')"),
        ("", "ERROR: model_format: expected torchscript or onnx"),
    ],
)
def test_the_message_and_the_refused_value_end_the_step_with_status_2(capsys, value, said):
    with pytest.raises(SystemExit) as ended:
        fail.python_func(message="model_format: expected torchscript or onnx", value=value)
    assert ended.value.code == 2
    assert capsys.readouterr().err.splitlines() == [said]


def test_a_local_run_fails_the_task_with_the_message(kfp_local, capfd):
    with pytest.raises(RuntimeError, match=r"'fail'.* finished with status .*FAILURE"):
        fail(message="framework: no branch takes it", value="jax")
    out, err = capfd.readouterr()
    assert "ERROR: framework: no branch takes it (got 'jax')" in out + err
