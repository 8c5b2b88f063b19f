"""The model contract: folders written with or without kftrain, recognised from their content, loaded as predictors;
a published folder read only through its marker, every path confined."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kftrain import storage
from kftrain.models import ModelError, describe_model, load_predictor, predictor_for, save_model
from kftrain.models.history import read_history, x_axis
from kftrain.models.predictors import onnx_session
from testbed.needs import require

X = np.random.default_rng(0).normal(size=(16, 5)).astype(np.float32)


def test_save_model_writes_torchscript_that_evaluation_loads(tmp_path):
    from testbed.torch_nets import Net, expected

    model = Net()
    model.train()
    spec = save_model(model, str(tmp_path / "m"), example_input=X[:4], classes=["a", "b", "c"], history=[{"epoch": 1}])
    assert model.training, "the caller's module is left in the mode it was in"
    assert (spec.format, spec.path, spec.task) == ("torchscript", "model.pt", "classification")
    assert spec.classes == ["a", "b", "c"]
    assert [t.to_json() for t in spec.inputs] == [{"name": "input", "dtype": "float32", "shape": [-1, 5]}]
    assert spec.outputs[0].shape == (-1, 3)
    storage.require_complete(str(tmp_path / "m"), verify=True)
    np.testing.assert_allclose(predictor_for(spec)(X), expected(model, X), atol=1e-6)
    assert json.loads((tmp_path / "m" / "metrics.jsonl").read_text()) == {"epoch": 1}


def test_a_module_that_cannot_be_scripted_is_traced_on_the_example(tmp_path):
    from testbed.torch_nets import Unscriptable, expected

    with pytest.raises(ModelError, match="pass example_input=<a batch> so the model can be traced"):
        save_model(Unscriptable(), str(tmp_path / "no"))
    assert not (tmp_path / "no").exists(), "nothing published after the error"
    spec = save_model(Unscriptable(), str(tmp_path / "m"), example_input=X[:2])
    np.testing.assert_allclose(predictor_for(spec)(X), expected(Unscriptable(), X), atol=1e-6)


def test_save_model_writes_onnx_from_a_torch_module(tmp_path):
    from testbed.torch_nets import Net, expected

    spec = save_model(Net(), str(tmp_path / "m"), example_input=X[:2], format="onnx", task="regression")
    assert (spec.format, spec.path, spec.task) == ("onnx", "model.onnx", "regression")
    np.testing.assert_allclose(predictor_for(spec)(X), expected(Net(), X), atol=1e-5)
    with pytest.raises(ModelError, match="'onnx' needs example_input"):
        save_model(Net(), str(tmp_path / "n"), format="onnx")


def test_a_folder_written_without_kftrain_is_recognised_from_its_files(tmp_path):
    import torch

    from testbed.torch_nets import Net, expected

    folder = tmp_path / "plain"
    folder.mkdir()
    torch.jit.save(torch.jit.script(Net().eval()), str(folder / "weights.pth"))
    spec = describe_model(str(folder))  # no model.json, no _COMPLETE.json: the finished job's folder as it is
    assert (spec.format, spec.path, spec.info) == ("torchscript", "weights.pth", {})
    predict, info = load_predictor(str(folder))
    np.testing.assert_allclose(predict(X), expected(Net(), X), atol=1e-6)
    assert info == {}


def test_onnx_without_model_json(tmp_path):
    import torch

    from testbed.torch_nets import Net, expected

    folder = tmp_path / "onnx"
    folder.mkdir()
    torch.onnx.export(Net().eval(), (torch.from_numpy(X[:1]),), str(folder / "net.onnx"), dynamo=False,
                      input_names=["features"], dynamic_axes={"features": {0: "n"}})  # fmt: skip
    spec = describe_model(str(folder))
    assert (spec.format, spec.path) == ("onnx", "net.onnx")
    scores = predictor_for(spec)(X)
    np.testing.assert_allclose(scores, expected(Net(), X), atol=1e-5)
    assert scores.dtype == np.float32, "a float32 model's scores stay float32, as TorchScript's do"


def test_an_onnx_session_sleeps_between_operators(tmp_path):
    # Evaluation reads the next batch on a thread beside the model: intra-op threads that spin would take its core.
    import torch

    from testbed.torch_nets import Net

    torch.onnx.export(Net().eval(), (torch.from_numpy(X[:1]),), str(tmp_path / "net.onnx"), dynamo=False)
    session = onnx_session((tmp_path / "net.onnx").read_bytes())
    assert session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert session.get_providers() == ["CPUExecutionProvider"]


@pytest.mark.parametrize("saved", ["state_dict", "module"])
def test_a_torch_save_pickle_is_refused_naming_the_file_and_the_fix(tmp_path, saved):
    import torch

    from testbed.torch_nets import Net

    folder = tmp_path / "m"
    folder.mkdir()
    torch.save(Net().state_dict() if saved == "state_dict" else Net(), folder / "model.pt")
    with pytest.raises(ModelError) as err:
        describe_model(str(folder))
    message = str(err.value)
    assert f"{folder / 'model.pt'}: a torch.save() pickle" in message
    assert "torch.jit.save(torch.jit.script(model), 'model.pt')" in message and "README" in message
    assert "did not finish" not in message


@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({}, "the model folder is empty"),
        ({"model.pkl": b"x"}, "model.pkl is a pickle needs the Python code"),
        ({"notes.txt": b"x"}, "no model found among notes.txt"),
        ({"model.json": b"[1]"}, "model.json: expected a JSON object"),
        ({"model.json": b'{"format": "pmml"}'}, "format 'pmml' is not one of"),
        ({"model.json": b'{"task": "ranking"}', "m.onnx": b"x"}, "model.json: task must be one of"),
        ({"model.json": b'{"format": "onnx", "file": "gone.onnx"}', "m.onnx": b"x"}, "file 'gone.onnx' is not in"),
        ({"a.onnx": b"x", "b.onnx": b"x"}, r"more than one model \(a.onnx \(onnx\), b.onnx \(onnx\)\)"),
    ],
)
def test_unusable_folders_fail_naming_what_is_wrong(tmp_path, files, error):
    folder = tmp_path / "m"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    with pytest.raises(ModelError, match=error):
        describe_model(str(folder))


def test_a_missing_model_folder(tmp_path):
    with pytest.raises(ModelError, match="no model there"):
        describe_model(str(tmp_path / "nothing"))


def test_the_builtin_mlp_format_is_read_like_the_others(tmp_path):
    from kftrain.models.pytorch import MLP, MLPConfig, write_model
    from testbed.torch_nets import expected

    config = MLPConfig(num_features=5, num_classes=3, hidden=(4,))
    model = MLP(config).eval()
    write_model(str(tmp_path / "m"), model, config, [0, 1, 2], [f"f{i}" for i in range(5)], {"val_accuracy": 1.0})
    spec = describe_model(str(tmp_path / "m"))
    assert (spec.format, spec.framework, spec.task) == ("kftrain-mlp", "pytorch", "classification")
    assert spec.classes == [0, 1, 2]
    np.testing.assert_allclose(predictor_for(spec)(X), expected(model, X), atol=1e-6)


def test_training_history_skips_bad_lines(tmp_path, caplog):
    lines = ['{"epoch": 1, "loss": 0.5, "tag": "x"}', "not json", "[1]", "", '{"epoch": 2, "loss": 0.25}']
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    points = read_history(str(tmp_path))
    assert points == [{"epoch": 1.0, "loss": 0.5}, {"epoch": 2.0, "loss": 0.25}]
    assert x_axis(points) == "epoch"
    assert "metrics.jsonl:2: not JSON" in caplog.text and "metrics.jsonl:3: not a JSON object" in caplog.text


# --- TensorFlow ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keras3():
    require("tensorflow")
    import keras

    inputs = keras.Input((5,), name="features")
    model = keras.Model(inputs, keras.layers.Dense(3, name="scores")(keras.layers.Dense(4, activation="relu")(inputs)))
    return model


def test_a_keras3_model_is_saved_as_a_savedmodel(tmp_path, keras3):
    spec = save_model(keras3, str(tmp_path / "m"), classes=[0, 1, 2])
    assert (spec.format, spec.path) == ("savedmodel", "")
    assert (tmp_path / "m" / "saved_model.pb").is_file()
    np.testing.assert_allclose(predictor_for(spec)(X), keras3.predict(X, verbose=0), atol=1e-5)


def test_keras_files_of_either_keras_are_recognised(tmp_path, keras3):
    import tf_keras

    folder = tmp_path / "k3"
    folder.mkdir()
    keras3.save(str(folder / "model.keras"))
    np.testing.assert_allclose(load_predictor(str(folder))[0](X), keras3.predict(X, verbose=0), atol=1e-5)

    legacy = tf_keras.Sequential([tf_keras.Input((5,)), tf_keras.layers.Dense(2)])
    folder = tmp_path / "k2"
    folder.mkdir()
    legacy.save(str(folder / "model.keras"))
    spec = describe_model(str(folder))
    assert (spec.format, spec.path) == ("keras", "model.keras")
    np.testing.assert_allclose(predictor_for(spec)(X), legacy.predict(X, verbose=0), atol=1e-5)


def test_a_savedmodel_in_a_subfolder_without_model_json(tmp_path, keras3):
    keras3.export(str(tmp_path / "m" / "export"), verbose=False)
    spec = describe_model(str(tmp_path / "m"))
    assert (spec.format, spec.path) == ("savedmodel", "export")
    np.testing.assert_allclose(predictor_for(spec)(X), keras3.predict(X, verbose=0), atol=1e-5)


# --- published model folders -----------------------------------------------------------------------------
# Model folders are read as every artifact is: a folder kftrain published only through its marker (one version,
# each file checked), and every relative path, model.json's "file" included, confined to the folder. Folders a
# program wrote without a marker are read as they are, still confined.

X3 = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)


def _saved(tmp_path: Path) -> Path:
    import torch
    from torch import nn

    torch.manual_seed(0)
    out = tmp_path / "model"
    save_model(nn.Linear(3, 2).eval(), str(out), example_input=X3[:2], history=[{"epoch": 1, "loss": 0.5}])
    return out


def _plain_onnx(folder: Path) -> None:
    import torch
    from torch import nn

    folder.mkdir(parents=True)
    torch.onnx.export(nn.Linear(3, 2).eval(), (torch.from_numpy(X3[:1]),), str(folder / "m.onnx"), dynamo=False,
                      input_names=["x"], dynamic_axes={"x": {0: "n"}})  # fmt: skip


@pytest.mark.parametrize(
    ("file", "fragment"),
    [
        ("../outside/m.onnx", "'..' part: a path inside an artifact must stay inside it"),
        ("/etc/passwd", "is absolute"),
        ("a//m.onnx", "has an empty"),
    ],
)
def test_model_json_file_outside_the_folder_is_refused(tmp_path: Path, file: str, fragment: str) -> None:
    _plain_onnx(tmp_path / "outside")
    folder = tmp_path / "model"
    _plain_onnx(folder)
    (folder / "model.json").write_text(json.dumps({"format": "onnx", "file": file}))
    with pytest.raises(ModelError, match=fragment) as err:
        describe_model(str(folder))
    assert "model.json (file)" in str(err.value)


def test_a_published_model_changed_afterwards_is_refused(tmp_path: Path) -> None:

    out = _saved(tmp_path)
    predict, _ = load_predictor(str(out))
    assert predict(X3).shape == (8, 2)
    data = (out / "model.pt").read_bytes()
    (out / "model.pt").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, one bit flipped
    with pytest.raises(storage.StorageError, match=r"model.pt: checksum mismatch \(expected sha256"):
        load_predictor(str(out))


def test_a_file_dropped_into_a_published_model_is_not_part_of_it(tmp_path: Path) -> None:
    out = _saved(tmp_path)
    _plain_onnx(tmp_path / "other")
    (out / "extra.onnx").write_bytes((tmp_path / "other" / "m.onnx").read_bytes())
    spec = describe_model(str(out))  # the marker lists one model; the listing would have found two
    assert (spec.format, spec.path) == ("torchscript", "model.pt")


def test_training_curves_of_a_published_model_are_checked(tmp_path: Path) -> None:
    out = _saved(tmp_path)
    assert read_history(str(out)) == [{"epoch": 1.0, "loss": 0.5}]
    (out / "metrics.jsonl").write_text('{"epoch": 1, "loss": 9.5}\n')  # same size, other numbers
    with pytest.raises(storage.StorageError, match=r"metrics\.jsonl: checksum mismatch"):
        read_history(str(out))


def test_a_folder_without_a_marker_is_read_as_written(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    _plain_onnx(folder)
    predict, info = load_predictor(str(folder))
    assert predict(X3).shape == (8, 2) and info == {}


# --------------------------------------------------------------------------------------------------
# A model file that is a symbolic link out of its folder is never read (evaluated, exported, uploaded)


def _linked_out(tmp_path: Path) -> Path:
    """A plain model folder whose model.pt is a symbolic link to another folder's model."""
    elsewhere = _saved(tmp_path)
    folder = tmp_path / "linked"
    folder.mkdir()
    (folder / "model.pt").symlink_to(elsewhere / "model.pt")
    return folder


def _evaluate(folder: Path, tmp_path: Path) -> None:
    from kftrain.steps.evaluate import evaluate_model

    evaluate_model(str(folder), str(_dataset(tmp_path)))


def _export(folder: Path, tmp_path: Path) -> None:
    from kftrain.steps.export import export_model

    export_model(str(folder), str(_dataset(tmp_path)), str(tmp_path / "export"))


def _dataset(tmp_path: Path) -> Path:
    from kftrain.steps.prep import prepare_dataset

    rows = 60
    table = "a,b,c,y\n" + "".join(f"{i % 7},{i % 5},{i % 3},{i % 2}\n" for i in range(rows))
    (tmp_path / "t.csv").write_text(table)
    prepare_dataset(str(tmp_path / "ds"), source=str(tmp_path / "t.csv"), label_column="y")
    return tmp_path / "ds"


LINK_READERS = {
    "describe": lambda folder, tmp_path: describe_model(str(folder)),
    "load": lambda folder, tmp_path: load_predictor(str(folder)),
    "evaluate": _evaluate,
    "export": _export,
    "upload": lambda folder, tmp_path: storage.upload(folder, tmp_path / "copy"),
}


@pytest.mark.parametrize("reader", LINK_READERS)
def test_a_model_file_linked_out_of_its_folder_is_refused(reader: str, tmp_path: Path) -> None:
    folder = _linked_out(tmp_path)
    with pytest.raises((ModelError, storage.StorageError), match=r"model\.pt: leads outside .* through a symbolic"):
        LINK_READERS[reader](folder, tmp_path)
    assert not (tmp_path / "export").exists() and not (tmp_path / "copy").exists()


# --------------------------------------------------------------------------------------------------
# A model whose outputs are not finite numbers is named, never a traceback


@pytest.mark.parametrize(
    ("bad", "outputs"), [(float("nan"), 2), (float("inf"), 2), (float("-inf"), 1), (float("nan"), 1)]
)
def test_a_classifier_that_outputs_nan_or_infinity_is_named(bad: float, outputs: int, tmp_path: Path) -> None:
    from kftrain.steps.evaluate import EvaluationError, evaluate_model
    from kftrain.steps.export import ExportError, export_model
    from testbed.torch_nets import Broken

    dataset = _dataset(tmp_path)
    save_model(Broken(bad, outputs).eval(), str(tmp_path / "m"), example_input=X3[:2])
    with pytest.raises(EvaluationError, match=r"m/model\.pt: the model output NaN or infinity for 1 of"):
        evaluate_model(str(tmp_path / "m"), str(dataset))
    with pytest.raises(ExportError, match="the model outputs NaN or infinity on the test split"):
        export_model(str(tmp_path / "m"), str(dataset), str(tmp_path / "export"))
    assert not (tmp_path / "export").exists()
