"""Rows of validation and test that are also training rows: counted exactly under the cap, estimated past it, and
reported by prep as a counted warning."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kftrain.steps.prep import prepare_dataset
from kftrain.steps.prep.overlap import OverlapCounter, row_hashes


def table(rows: list[tuple[float, int]]) -> pa.Table:
    return pa.table(
        {
            "x": pa.array([r[0] for r in rows], type=pa.float32()),
            "label": pa.array([r[1] for r in rows], type=pa.int64()),
        }
    )


@pytest.mark.parametrize(
    ("train", "test", "in_train"),
    [
        ([(1.0, 0), (2.0, 1)], [(3.0, 0), (4.0, 1)], 0),  # distinct
        ([(1.0, 0), (2.0, 1)], [(1.0, 0), (1.0, 0), (5.0, 1)], 2),  # one row twice: both counted
        ([(1.0, 0)], [(1.0, 1)], 0),  # same features, another label: not the same row
        ([(0.0, 0)], [(-0.0, 0)], 0),  # -0.0 and 0.0 differ in the prepared bytes
        ([(float(i), i % 2) for i in range(10)], [(float(i), i % 2) for i in range(10)] * 4, 40),
    ],
)
def test_rows_of_a_split_that_are_training_rows_are_counted(train, test, in_train) -> None:
    counter = OverlapCounter()
    counter.add("train", table(train))
    counter.add("test", table(test))
    (found,) = counter.overlaps()
    assert (found.split, found.rows, found.in_train, found.exact) == ("test", len(test), in_train, True)


def test_identical_rows_hash_alike_whatever_the_batch() -> None:
    rows = table([(float(i % 7), i % 3) for i in range(100)])
    whole = row_hashes(rows)
    assert np.array_equal(np.concatenate([row_hashes(rows.slice(0, 33)), row_hashes(rows.slice(33))]), whole)
    assert len(np.unique(whole)) == 21


def test_past_the_cap_the_count_is_a_bounded_estimate(monkeypatch) -> None:
    monkeypatch.setattr(OverlapCounter, "CAP", 2_000)
    rng = np.random.default_rng(0)
    train = rng.normal(size=20_000).astype(np.float32)
    test = np.concatenate([train[:3_000], rng.normal(size=7_000).astype(np.float32)])  # 30% are training rows
    counter = OverlapCounter()
    for split, x in (("train", train), ("test", test)):
        for chunk in np.array_split(x, 10):
            counter.add(split, pa.table({"x": chunk, "label": np.zeros(len(chunk), dtype=np.int64)}))
    assert all(len(h) <= 2_000 for h, _ in counter.kept.values())
    (found,) = counter.overlaps()
    assert not found.exact and found.line().startswith("about ")
    assert abs(found.in_train - 3_000) < 600, found


@pytest.mark.parametrize(
    ("distinct", "warned"),
    [
        (10, True),  # 200 rows that are 10 rows repeated: every test row is a training row
        (200, False),
    ],
)
def test_prep_warns_with_the_count_of_test_rows_that_are_training_rows(tmp_path, caplog, distinct, warned) -> None:
    base = np.arange(distinct, dtype=np.float64)
    x = np.resize(base, 200)
    source = tmp_path / "src.parquet"
    pq.write_table(pa.table({"x": x, "y": (x % 2).astype(np.int64)}), source)
    with caplog.at_level(logging.WARNING, logger="kftrain.steps.prep"):
        info = prepare_dataset(str(tmp_path / "ds"), source=str(source), label_column="y")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if warned:
        assert f"{info.rows['test']} of {info.rows['test']} test rows are also training rows" in " ".join(warnings)
        assert f"{info.rows['validation']} of {info.rows['validation']} validation rows" in " ".join(warnings)
    else:
        assert not [w for w in warnings if "training rows" in w]
