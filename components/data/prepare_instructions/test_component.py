"""prepare_instructions turns instruction data into a Dataset artifact (train.jsonl, test.jsonl, manifest.json)
described in its metadata, and outputs its URI; a bad record fails the step naming its file and line, writing
nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kfp import dsl

from kftrain import storage
from kftrain.llm import synthetic
from kftrain.llm.instructions import FORMAT, read_split
from kftrain_components.data.prepare_instructions.component import prepare_instructions


@pytest.fixture
def records(tmp_path: Path) -> str:
    """30 instruction examples as JSON Lines, one of them given twice."""
    path = tmp_path / "tasks.jsonl"
    rows = [{"prompt": f"Add 1 to {i}.", "response": str(i + 1)} for i in range(30)]
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, rows[0]]))
    return str(path)


def test_instruction_data_becomes_a_dataset_described_in_its_metadata(tmp_path, records):
    dataset = dsl.Dataset(name="dataset", uri=str(tmp_path / "dataset"), metadata={})
    (uri,) = prepare_instructions.python_func(dataset=dataset, source=records, test_fraction=0.2)
    assert uri == dataset.uri
    storage.require_complete(uri, verify=True)
    assert sorted(p.name for p in Path(uri).iterdir()) == [
        "_COMPLETE.json",
        "manifest.json",
        "test.jsonl",
        "train.jsonl",
    ]
    meta = dataset.metadata
    assert (meta["format"], meta["rows"], meta["warnings"]["duplicates"]) == (FORMAT, {"train": 24, "test": 6}, 1)
    assert len(read_split(uri, "test")) == 6


def test_a_record_without_a_response_fails_the_step_naming_it_and_writes_nothing(tmp_path, capsys):
    source = tmp_path / "tasks.jsonl"
    source.write_text('{"prompt": "a", "response": "b"}\n{"prompt": "c", "answer": "d"}\n')
    dataset = dsl.Dataset(name="dataset", uri=str(tmp_path / "dataset"), metadata={})
    with pytest.raises(SystemExit) as ended:
        prepare_instructions.python_func(dataset=dataset, source=str(source))
    assert ended.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ERROR: ") and f"{source}: line 2: no 'response' field" in line
    assert not Path(dataset.uri).exists()


def test_the_default_source_is_the_synthetic_default_task():
    default = prepare_instructions.component_spec.inputs["source"].default
    assert default == f"builtin:{synthetic.DEFAULT_TASK}"
    described = prepare_instructions.component_spec.inputs["source"].description
    assert f"builtin:{'|'.join(synthetic.BUILTIN)}" in described


def test_a_local_run_outputs_the_dataset_and_its_uri(kfp_local, records):
    task = prepare_instructions(source=records)
    dataset = task.outputs["dataset"]
    assert task.outputs["dataset_uri"] == dataset.uri
    storage.require_complete(dataset.uri, verify=True)
    assert dataset.metadata["rows"] == {"train": 27, "test": 3}
