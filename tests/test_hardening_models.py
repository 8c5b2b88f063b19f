"""Model folders are read as the storage hardening reads every artifact: a folder kftrain published only through
its marker (one version, each file checked), and every relative path, ``model.json``'s ``file`` included,
confined to the folder. Folders a program wrote without a marker are read as they are, still confined."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from kftrain import storage
from kftrain.models import ModelError, describe_model, load_predictor, save_model
from kftrain.models.history import read_history

X = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)


def _saved(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    out = tmp_path / "model"
    save_model(nn.Linear(3, 2).eval(), str(out), example_input=X[:2], history=[{"epoch": 1, "loss": 0.5}])
    return out


def _plain_onnx(folder: Path) -> None:
    folder.mkdir(parents=True)
    torch.onnx.export(nn.Linear(3, 2).eval(), (torch.from_numpy(X[:1]),), str(folder / "m.onnx"), dynamo=False,
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
    assert predict(X).shape == (8, 2)
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
    assert predict(X).shape == (8, 2) and info == {}


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


class _Broken(nn.Module):
    def __init__(self, bad: float, outputs: int) -> None:
        super().__init__()
        self.bad, self.outputs = bad, outputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x[:, : self.outputs] * 0.0
        return torch.cat([out[:1] + self.bad, out[1:]])  # the first row of every batch


@pytest.mark.parametrize(
    ("bad", "outputs"), [(float("nan"), 2), (float("inf"), 2), (float("-inf"), 1), (float("nan"), 1)]
)
def test_a_classifier_that_outputs_nan_or_infinity_is_named(bad: float, outputs: int, tmp_path: Path) -> None:
    from kftrain.steps.evaluate import EvaluationError, evaluate_model
    from kftrain.steps.export import ExportError, export_model

    dataset = _dataset(tmp_path)
    save_model(_Broken(bad, outputs).eval(), str(tmp_path / "m"), example_input=X[:2])
    with pytest.raises(EvaluationError, match=r"m/model\.pt: the model output NaN or infinity for 1 of"):
        evaluate_model(str(tmp_path / "m"), str(dataset))
    with pytest.raises(ExportError, match="the model outputs NaN or infinity on the test split"):
        export_model(str(tmp_path / "m"), str(dataset), str(tmp_path / "export"))
    assert not (tmp_path / "export").exists()
