"""prepare_dataset turns a table into a prepared Dataset artifact (splits as Parquet shards, schema, statistics) and
describes it in the artifact's metadata; a bad input fails the step by name before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from kfp import dsl

from kftrain import storage
from kftrain_components.data.prepare_dataset.component import prepare_dataset


@pytest.fixture
def table(tmp_path: Path) -> str:
    """A CSV of 40 rows: two numeric features and a binary label ``y``."""
    path = tmp_path / "table.csv"
    path.write_text("a,b,y\n" + "".join(f"{i},{i * 2 % 7},{i % 2}\n" for i in range(40)))
    return str(path)


def test_a_table_becomes_a_dataset_described_in_its_metadata(tmp_path, table):
    dataset = dsl.Dataset(name="dataset", uri=str(tmp_path / "dataset"), metadata={})
    prepare_dataset.python_func(dataset=dataset, source=table, label_column="y", train_shards=1)
    storage.require_complete(dataset.uri, verify=True)
    assert (Path(dataset.uri) / "dataset.json").is_file()
    meta = dataset.metadata
    assert meta["rows"] == {"train": 28, "validation": 4, "test": 8}  # 70/10/20, stratified
    assert (meta["format"], meta["task"], meta["num_features"], meta["num_classes"]) == (
        "parquet",
        "classification",
        2,
        2,
    )
    assert meta["schema"] == {"a": "float32", "b": "float32", "label": "int64"}


def test_a_missing_label_column_fails_the_step_naming_it_and_writes_nothing(tmp_path, table, capsys):
    dataset = dsl.Dataset(name="dataset", uri=str(tmp_path / "dataset"), metadata={})
    with pytest.raises(SystemExit) as ended:
        prepare_dataset.python_func(dataset=dataset, source=table, label_column="target")
    assert ended.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ERROR: ") and "target" in line
    assert not Path(dataset.uri).exists()


def test_a_local_run_outputs_the_dataset_artifact(kfp_local, table):
    dataset = prepare_dataset(source=table, label_column="y", train_shards=1).outputs["dataset"]
    storage.require_complete(dataset.uri, verify=True)
    assert dataset.metadata["rows"] == {"train": 28, "validation": 4, "test": 8}
