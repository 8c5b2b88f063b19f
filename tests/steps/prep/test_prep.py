"""Data prep: every kind of source, encodings, missing values, splits, shards, pass-through; and every corrupt input
refused by name before anything is published."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from kftrain import storage
from kftrain.data.dataset import DataValidationError, iter_batches, load_split, read_info
from kftrain.steps.prep import prepare_dataset


def breast_cancer_table() -> pa.Table:
    """scikit-learn's breast cancer data with a string feature, string labels and a clinic to partition by."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    radius = data.data[:, 0]
    size = np.array(["small", "medium", "large"])[np.digitize(radius, np.quantile(radius, [1 / 3, 2 / 3]))]
    columns = {name.replace(" ", "_"): data.data[:, i] for i, name in enumerate(data.feature_names)}
    return pa.table(
        {
            **columns,
            "size": size,
            "diagnosis": np.array(["malignant", "benign"])[data.target],
            "clinic": np.where(np.arange(len(data.target)) % 3 == 0, "north", "south"),
        }
    )


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("src") / "cancer"
    pq.write_to_dataset(breast_cancer_table(), str(root), partition_cols=["clinic"])
    (root / "_SUCCESS").write_text("")  # a writer's marker, not data
    return root


def test_a_partitioned_parquet_folder_with_a_string_column(tmp_path, partitioned):
    info = prepare_dataset(str(tmp_path / "ds"), source=str(partitioned), label_column="diagnosis")
    storage.require_complete(str(tmp_path / "ds"), verify=True)
    assert info.task == "classification" and info.classes == ["benign", "malignant"]
    assert info.feature_names[-2:] == ["size", "clinic"] and info.num_features == 32
    assert info.vocabularies == {"size": ["large", "medium", "small"], "clinic": ["north", "south"]}
    assert sum(info.rows.values()) == 569
    assert info.statistics["diagnosis"]["count"] == 569
    assert info.statistics["mean_radius"]["min"] == pytest.approx(6.981, abs=1e-3)
    assert info.statistics["size"]["distinct"] == 3 and info.statistics["clinic"]["top"][0] == ["south", 379]
    x, y = load_split(str(tmp_path / "ds"), "train")
    assert x.dtype == np.float32 and set(np.unique(x[:, -1])) == {0.0, 1.0} and set(np.unique(y)) == {0, 1}
    # Stratified: every split keeps the share of malignant (212 of 569: 37.3%).
    for split in ("train", "validation", "test"):
        _, labels = load_split(str(tmp_path / "ds"), split)
        assert abs((labels == 1).mean() - 212 / 569) < 0.01, split
    meta = json.loads((tmp_path / "ds" / "_COMPLETE.json").read_text())["metadata"]
    assert meta["classes"] == ["benign", "malignant"] and meta["vocabulary_sizes"] == {"size": 3, "clinic": 2}


def test_the_split_depends_only_on_the_seed(tmp_path, partitioned):
    a = prepare_dataset(str(tmp_path / "a"), source=str(partitioned), label_column="diagnosis", seed=3)
    b = prepare_dataset(str(tmp_path / "b"), source=str(partitioned), label_column="diagnosis", seed=3)
    assert a.rows == b.rows
    np.testing.assert_array_equal(
        load_split(str(tmp_path / "a"), "test")[0], load_split(str(tmp_path / "b"), "test")[0]
    )


@pytest.mark.parametrize("layout", ["csv-file", "csv-glob", "jsonl-folder"])
def test_csv_and_json_lines_sources(tmp_path, layout):
    table = breast_cancer_table()
    if layout.startswith("csv"):
        for i, part in enumerate((table.slice(0, 300), table.slice(300))):
            pacsv.write_csv(part, tmp_path / f"part-{i}.csv")
        source = str(tmp_path / "part-0.csv") if layout == "csv-file" else str(tmp_path / "part-*.csv")
    else:
        (tmp_path / "json").mkdir()
        for i, rows in enumerate((table.slice(0, 300).to_pylist(), table.slice(300).to_pylist())):
            (tmp_path / "json" / f"part-{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        source = str(tmp_path / "json")
    info = prepare_dataset(str(tmp_path / "ds"), source=source, label_column="diagnosis")
    assert sum(info.rows.values()) == (300 if layout == "csv-file" else 569)
    assert info.vocabularies["size"] == ["large", "medium", "small"] and info.classes == ["benign", "malignant"]


def test_csv_types_are_inferred_from_every_row_not_the_first_block(tmp_path):
    # 150,000 integers, then decimals: past pyarrow's first 1 MiB block, where its own inference stops looking.
    rows = ["x,y"] + [f"{i % 97},{i % 2}" for i in range(150_000)] + [f"{1000 + i}.5,{i % 2}" for i in range(10)]
    (tmp_path / "big.csv").write_text("\n".join(rows) + "\n")
    info = prepare_dataset(str(tmp_path / "ds"), source=str(tmp_path / "big.csv"), label_column="y")
    assert info.statistics["x"]["type"] == "float (inferred from text)" and info.statistics["x"]["max"] == 1009.5
    assert info.classes == [0, 1]


def test_an_object_store_prefix(tmp_path, s3_env, partitioned):
    storage.upload(str(partitioned), f"{s3_env}/raw/cancer")
    info = prepare_dataset(f"{s3_env}/prepared", source=f"{s3_env}/raw/cancer", label_column="diagnosis")
    assert sum(info.rows.values()) == 569 and info.vocabularies["clinic"] == ["north", "south"]
    x, _ = load_split(f"{s3_env}/prepared", "test")
    assert x.shape[1] == 32


def test_labels_of_any_value_become_contiguous_ids(tmp_path):
    rng = np.random.default_rng(0)
    labels = np.where(rng.random(200) < 0.5, 0, 10**12)  # "2 classes" the trainers used to index with 10**12
    pq.write_table(pa.table({"a": rng.normal(size=200), "y": labels}), tmp_path / "t.parquet")
    info = prepare_dataset(str(tmp_path / "ds"), source=str(tmp_path / "t.parquet"), label_column="y")
    assert info.classes == [0, 10**12] and info.num_classes == 2
    _, y = load_split(str(tmp_path / "ds"), "train")
    assert set(np.unique(y)) == {0, 1}


def test_regression(tmp_path):
    info = prepare_dataset(str(tmp_path / "ds"), source="builtin:diabetes", task="regression")
    assert info.task == "regression" and info.classes == [] and info.num_classes == 0
    _, y = load_split(str(tmp_path / "ds"), "train")
    assert y.dtype == np.float32 and y.min() >= 25 and y.max() <= 346
    assert info.schema["label"] == "float32"


def holes() -> pa.Table:
    return pa.table(
        {
            "a": [1.0, None, 3.0, float("nan")] + [float(i) for i in range(16)],
            "c": ["x", "y", None, "x"] + ["y"] * 16,
            "n": pa.array([1, 2] * 9 + [None, 2], type=pa.int64()),
            "y": [0, 1] * 10,
        }
    )


def test_missing_values_dropped(tmp_path):
    pq.write_table(holes(), tmp_path / "t.parquet")
    info = prepare_dataset(str(tmp_path / "ds"), source=str(tmp_path / "t.parquet"), label_column="y", missing="drop")
    assert sum(info.rows.values()) == 16 and info.missing == {"policy": "drop", "dropped_rows": 4, "filled": {}}


def test_missing_values_filled(tmp_path):
    pq.write_table(holes(), tmp_path / "t.parquet")
    info = prepare_dataset(str(tmp_path / "ds"), source=str(tmp_path / "t.parquet"), label_column="y", missing="fill")
    assert sum(info.rows.values()) == 20
    mean = (1 + 3 + sum(range(16))) / 18
    assert info.missing["filled"] == {"a": pytest.approx(mean), "c": "y", "n": pytest.approx(29 / 19)}
    x = np.concatenate(
        [b[0] for split in ("train", "validation", "test") for b in iter_batches(str(tmp_path / "ds"), split)]
    )
    assert np.isfinite(x).all() and sorted(set(x[:, 1].tolist())) == [0.0, 1.0]


def test_shards_are_cut_by_bytes(tmp_path):
    rng = np.random.default_rng(0)
    n = 60_000
    pq.write_table(pa.table({**{f"f{i}": rng.normal(size=n) for i in range(16)}, "y": rng.integers(0, 3, n)}),
                   tmp_path / "t.parquet")  # fmt: skip
    info = prepare_dataset(str(tmp_path / "ds"), source=str(tmp_path / "t.parquet"), label_column="y",
                           shard_bytes=1024 * 1024, train_shards=1, batch_rows=4096)  # fmt: skip
    sizes = [(tmp_path / "ds" / rel).stat().st_size for rel in info.shards["train"]]
    assert len(sizes) >= 3, sizes  # ~2.7 MiB of train data at 1 MiB a shard
    assert max(sizes) < 1.5 * 1024 * 1024
    assert sum(pq.read_metadata(tmp_path / "ds" / rel).num_rows for rel in info.shards["train"]) == info.rows["train"]


def test_the_builtin_digits_keep_their_split(tmp_path):
    info = prepare_dataset(str(tmp_path / "ds"))
    assert info.rows == {"train": 1259, "validation": 179, "test": 359} and len(info.shards["train"]) == 2
    assert read_info(str(tmp_path / "ds")).classes == list(range(10))


# --- pass-through: files a trainer reads itself ---------------------------------------------------


def test_a_folder_of_files_labelled_by_their_folder(tmp_path):
    for label in ("cats", "dogs"):
        (tmp_path / "img" / label).mkdir(parents=True)
        for i in range(10):
            (tmp_path / "img" / label / f"{i}.jpg").write_bytes(b"\xff\xd8" + bytes([i]))
    info = prepare_dataset(str(tmp_path / "ds"), source=str(tmp_path / "img"), mode="files", label_column="folder")
    assert info.kind == "files" and info.classes == ["cats", "dogs"] and sum(info.rows.values()) == 20
    assert info.root == str(tmp_path / "img") and info.num_features == 0
    listed = pq.read_table(tmp_path / "ds" / info.shards["train"][0]).to_pylist()
    assert listed[0]["uri"] == str(tmp_path / "img" / listed[0]["path"]) and listed[0]["label"] in (0, 1)


def test_a_manifest_of_files(tmp_path):
    (tmp_path / "docs").mkdir()
    rows = ["path,topic"]
    for i in range(12):
        (tmp_path / "docs" / f"{i}.txt").write_text(f"text {i}")
        rows.append(f"docs/{i}.txt,{'a' if i % 2 else 'b'}")
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    info = prepare_dataset(
        str(tmp_path / "ds"), source=str(tmp_path / "manifest.csv"), mode="files", label_column="topic"
    )
    assert info.classes == ["a", "b"] and info.root == str(tmp_path)


# --- corrupt inputs: one table, every case refused by name, nothing published -----------------------


def _parquet(path: Path, **columns) -> None:
    pq.write_table(pa.table(columns), path)


def _rows(n: int = 20, **overrides):
    base = {"a": [float(i) for i in range(n)], "y": [i % 2 for i in range(n)]}
    return {**base, **overrides}


def case(name, build, error, **options):
    return pytest.param(build, error, options, id=name)


CORRUPT = [
    case("missing label column", lambda d: _parquet(d / "t.parquet", **_rows()), r"t.parquet: no label column 'label'",
         label_column="label"),
    case("NaN in a feature", lambda d: _parquet(d / "t.parquet", **_rows(a=[0.0, 1.0, float("nan")] + [1.0] * 17)),
         r"t.parquet: feature column 'a' has a missing value \(null or NaN\) at row 2"),
    case("inf in a feature", lambda d: _parquet(d / "t.parquet", **_rows(a=[0.0] * 5 + [float("inf")] + [1.0] * 14)),
         r"t.parquet: column 'a' has an infinite value at row 5"),
    case("null label", lambda d: _parquet(d / "t.parquet", **_rows(y=[0, 1, None] + [0, 1] * 8 + [1])),
         r"t.parquet: the label column 'y' has a missing value"),
    case("ragged CSV", lambda d: (d / "t.csv").write_text("a,y\n1,0\n2,1,7\n"),
         r"t.csv: not a valid csv file: CSV parse error: Row #3: Expected 2 columns, got 3"),
    case("empty file", lambda d: (d / "t.csv").write_bytes(b""), r"t.csv: empty file \(0 bytes\)"),
    case("header-only CSV", lambda d: (d / "t.csv").write_text("a,y\n"), r"t.csv: no rows \(a header or blank"),
    case("garbage named .parquet", lambda d: (d / "t.parquet").write_bytes(b"\x00garbage" * 50),
         r"t.parquet: not a Parquet file"),
    case("Parquet named .csv", lambda d: _parquet(d / "t.csv", **_rows()),
         r"t.csv: a Parquet file named as csv: rename it .parquet or set format=parquet"),
    case("single class", lambda d: _parquet(d / "t.parquet", **_rows(y=[3] * 20)),
         r"label column 'y' has a single class \(3\): a classifier needs at least two"),
    case("fractional class labels", lambda d: _parquet(d / "t.parquet", **_rows(y=[0.5, 1.0] * 10)),
         r"label column 'y' holds fractional numbers \(0.5\): set task=regression"),
    case("string target for regression", lambda d: _parquet(d / "t.parquet", **_rows(y=["a", "b"] * 10)),
         r"label column 'y' holds string: regression needs numbers", task="regression"),
    case("an identifier as a feature",
         lambda d: _parquet(d / "t.parquet", **_rows(n=40, a=[f"id-{i}" for i in range(40)])),
         r"column 'a' has more than 10 distinct values: an identifier", max_categories=10),
    case("types that disagree across files",
         lambda d: (_parquet(d / "p1.parquet", **_rows()), _parquet(d / "p2.parquet", **_rows(a=["x"] * 20))),
         r"column 'a' is double in .*p1.parquet but string in .*p2.parquet", source="."),
    case("a file without a used column",
         lambda d: (_parquet(d / "p1.parquet", **_rows()), _parquet(d / "p2.parquet", y=[0, 1] * 10)),
         r"p2.parquet: no column 'a' \(other files have it\)", source="."),
    case("JSON whose types change", lambda d: (d / "t.jsonl").write_text('{"a": 1, "y": 0}\n{"a": "x", "y": 1}\n'),
         r"t.jsonl: not a valid jsonl file: JSON parse error: Column\(/a\) changed from number to string"),
    case("unknown URI scheme", lambda d: None, r"source 'nosuch://bucket/t.parquet': not a URI data prep reads",
         source="nosuch://bucket/t.parquet"),
    case("a path that is not there", lambda d: None, r"source '.*/absent.parquet': not found", source="absent.parquet"),
    case("unknown builtin", lambda d: None, r"source builtin:iris: unknown \(bundled: builtin:digits",
         source="builtin:iris"),
    case("a manifest path outside the root",
         lambda d: ((d / "ok.txt").write_text("x"), (d / "m.csv").write_text("path,y\nok.txt,a\n../../etc/passwd,b\n")),
         r"m.csv: row 1: path '../../etc/passwd' is outside", source="m.csv", mode="files", label_column="y"),
    case("a manifest path that does not exist",
         lambda d: ((d / "ok.txt").write_text("x"), (d / "m.csv").write_text("path,y\nok.txt,a\ngone.txt,b\n")),
         r"m.csv: row 1: gone.txt not found under", source="m.csv", mode="files", label_column="y"),
]  # fmt: skip


@pytest.mark.parametrize(("build", "error", "options"), CORRUPT)
def test_corrupt_input_is_refused_naming_it_and_nothing_is_published(tmp_path, build, error, options):
    src = tmp_path / "src"
    src.mkdir()
    build(src)
    options = dict(options)
    source = options.pop("source", None)
    if source is None:
        (only,) = [p for p in src.iterdir()]
        source = str(only)
    elif "://" not in source and not source.startswith("builtin:"):
        source = str(src / source) if source != "." else str(src)
    options.setdefault("label_column", "y")
    with pytest.raises(DataValidationError, match=error):
        prepare_dataset(str(tmp_path / "out"), source=source, **options)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("out.partial-*"))
