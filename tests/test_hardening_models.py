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
