"""What the launch step records of the model its job wrote: a language model's folder (the fine-tuning program's,
or a Hugging Face one) is described as such, with no warning that it breaks the classifier's model contract; any
other folder the contract refuses is still warned about, and the step goes on."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from kftrain.launch.component import _model_metadata
from testbed.k8s_harness import pytorch_job

RESULT = SimpleNamespace(duration_s=12.34)
CONTRACT_WARNING = "does not follow the model contract"


def written(folder: Path, files: dict[str, bytes]) -> str:
    for name, content in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    return str(folder)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"kftrain-llm.json": json.dumps({"method": "full"}).encode(), "base/model.safetensors": b"w"},
            {"framework": "transformers", "format": "kftrain-llm/v1", "method": "full"},
        ),
        (
            {"config.json": b"{}", "model.safetensors": b"w", "tokenizer.json": b"{}"},
            {"framework": "transformers", "format": "huggingface"},
        ),
    ],
    ids=["fine-tuned", "hugging-face"],
)
def test_a_language_model_is_described_without_a_contract_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, files: dict[str, bytes], expected: dict[str, str]
) -> None:
    with caplog.at_level(logging.WARNING):
        metadata = _model_metadata(pytorch_job(), written(tmp_path, files), RESULT)  # type: ignore[arg-type]
    assert expected.items() <= metadata.items() and metadata["job"] == "digits"
    assert CONTRACT_WARNING not in caplog.text


@pytest.mark.parametrize(
    "files",
    [{"model.safetensors": b"w"}, {"kftrain-llm.json": json.dumps({"method": "distill"}).encode()}],
    ids=["weights-alone", "unknown-method"],
)
def test_another_folder_is_warned_about_and_the_step_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, files: dict[str, bytes]
) -> None:
    with caplog.at_level(logging.WARNING):
        metadata = _model_metadata(pytorch_job(), written(tmp_path, files), RESULT)  # type: ignore[arg-type]
    assert metadata["framework"] == "" and CONTRACT_WARNING in caplog.text
