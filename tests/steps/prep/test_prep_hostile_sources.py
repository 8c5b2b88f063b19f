"""Data prep under hostile sources: nothing half-true is ever published.

Columns that are not each one distinct column of the source, a source that changes between (or during) prep's
two passes, a symbolic link out of a source folder and numbers the float32 dataset cannot hold are refused by
name before anything is published; no error quotes a file's content.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kftrain.data.dataset import DataValidationError
from kftrain.steps.prep import prepare_dataset, profile
from kftrain.steps.prep.profile import Profile
from kftrain.steps.prep.shards import ShardWriter

ROWS = 40
SECRET = "TOPSECRET-7d1f"


def write_csv(path: Path, rows: int = ROWS) -> Path:
    """``x`` (0.5, 1.5, ...), ``c`` (red/blue), ``y`` (0/1): every value the same width, so edits keep the size."""
    lines = ["x,c,y"] + [f"{i % 9}.5,{'red' if i % 3 else 'tan'},{i % 2}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def nothing_published(tmp_path: Path) -> None:
    assert not (tmp_path / "out").exists()
    assert not [p.name for p in tmp_path.iterdir() if ".partial-" in p.name]


# --------------------------------------------------------------------------------------------------
# Every column of the dataset is one distinct column of the source


def _duplicate_header(tmp_path: Path) -> tuple[str, list[str]]:
    (tmp_path / "dup.csv").write_text("a,a,y\n" + "".join(f"{i},{i},{i % 2}\n" for i in range(ROWS)))
    return str(tmp_path / "dup.csv"), []


def _duplicate_parquet_column(tmp_path: Path) -> tuple[str, list[str]]:
    values = pa.array(np.arange(ROWS, dtype=float))
    table = pa.Table.from_arrays([values, values, pa.array(np.arange(ROWS) % 2)], names=["a", "a", "y"])
    pq.write_table(table, tmp_path / "dup.parquet")
    return str(tmp_path / "dup.parquet"), ["a"]


def _partition_shadows_a_column(tmp_path: Path) -> tuple[str, list[str]]:
    table = pa.table({"a": np.arange(ROWS, dtype=float) + 0.5, "y": np.arange(ROWS) % 2})
    for part in ("a=1", "a=2"):
        (tmp_path / "hive" / part).mkdir(parents=True)
        pq.write_table(table, tmp_path / "hive" / part / "p.parquet")
    return str(tmp_path / "hive"), []


def _csv(features: list[str]) -> Callable[[Path], tuple[str, list[str]]]:
    return lambda tmp_path: (str(write_csv(tmp_path / "s.csv")), features)


def _beyond_float32(tmp_path: Path) -> tuple[str, list[str]]:
    x = np.arange(ROWS, dtype=float)
    x[7] = 1e39
    pq.write_table(pa.table({"x": x, "y": np.arange(ROWS) % 2}), tmp_path / "big.parquet")
    return str(tmp_path / "big.parquet"), []


def _header_repeated(header: str | None = None) -> Callable[[Path], tuple[str, list[str]]]:
    """Two CSV files concatenated with their headers: the second header (``header``: written so; None: as the
    first) is a data row (its label would be a class named ``y``)."""

    def make(tmp_path: Path) -> tuple[str, list[str]]:
        lines = write_csv(tmp_path / "s.csv").read_text().splitlines()
        (tmp_path / "s.csv").write_text("\n".join([*lines[:21], header or lines[0], *lines[21:]]) + "\n")
        return str(tmp_path / "s.csv"), []

    return make


REPEATED = r"s\.csv: line 22 repeats the header \(every value"
COLUMN_CASES = {
    "a CSV header repeated as a data row": (_header_repeated(), REPEATED),
    # The CSV reader keeps the spaces around a value: " c" is still the column c's name.
    "a CSV header repeated with spaces after the commas": (_header_repeated("x, c, y"), REPEATED),
    "a CSV header repeated with spaces and tabs around": (_header_repeated(" x\t,  c ,y  "), REPEATED),
    "a CSV header repeated, quoted and spaced": (_header_repeated('"x"," c ","y"'), REPEATED),
    "a feature given twice": (_csv(["x", "x"]), "'x' is given 2 times"),
    "the label as a feature": (_csv(["x", "y"]), "'y' is the label column"),
    "a CSV header naming a column twice": (_duplicate_header, "multiple columns named a"),
    "a Parquet file with two columns of one name": (_duplicate_parquet_column, "2 columns are named 'a'"),
    "a partition folder named as a file's column": (_partition_shadows_a_column, "column 'a' is both in the file"),
    "a number float32 cannot hold": (_beyond_float32, "column 'x' has a value beyond float32's range at row 7"),
}


@pytest.mark.parametrize("case", COLUMN_CASES)
def test_columns_that_are_not_one_distinct_source_column_are_refused(case: str, tmp_path: Path) -> None:
    make, expected = COLUMN_CASES[case]
    source, features = make(tmp_path)
    with pytest.raises(DataValidationError, match=expected):
        prepare_dataset(str(tmp_path / "out"), source=source, label_column="y", features=features)
    nothing_published(tmp_path)


def test_columns_are_bounded_naming_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile, "MAX_COLUMNS", 50)
    wide = tmp_path / "wide.csv"
    header = ",".join(f"c{i}" for i in range(100))
    wide.write_text(header + ",y\n" + "".join(",".join(["1"] * 100) + f",{i % 2}\n" for i in range(ROWS)))
    with pytest.raises(DataValidationError, match=r"wide\.csv: 100 feature columns, more than data prep takes \(49\)"):
        prepare_dataset(str(tmp_path / "out"), source=str(wide), label_column="y")
    nothing_published(tmp_path)


# --------------------------------------------------------------------------------------------------
# A source that changes while prep reads it


def _edit_in_place(path: Path, old: bytes, new: bytes, count: int = 1) -> None:
    """Replace ``old`` by ``new`` (same length) keeping the file's size, inode and modification time: a change
    only the values themselves can reveal."""
    assert len(old) == len(new)
    before = path.stat()
    data = path.read_bytes()
    assert data.count(old) >= count
    with path.open("r+b") as handle:
        handle.write(data.replace(old, new, count))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _append_rows(path: Path) -> None:
    with path.open("a") as handle:
        handle.write("3.5,red,1\n")


CHANGE_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "rows appended": (_append_rows, "the file's size, time or version differ"),
    "the file removed": (lambda path: path.unlink(), "the file was removed"),
    "a new category, same size and time": (
        lambda path: _edit_in_place(path, b",tan,", b",sky,"),
        "column 'c' holds a value the first pass did not see",
    ),
    "a missing number, same size and time": (
        lambda path: _edit_in_place(path, b"\n4.5,", b"\nNaN,"),
        "column 'x' holds a value the first pass did not see",
    ),
    "a new class, same size and time": (
        lambda path: _edit_in_place(path, b",1\n", b",7\n"),
        "label column 'y' holds a class the first pass did not see",
    ),
    "a row moved to the other class, same size and time": (
        lambda path: _edit_in_place(path, b",0\n", b",1\n"),
        "more rows than the first pass counted",
    ),
}


@pytest.mark.parametrize("case", CHANGE_CASES)
def test_a_source_that_changes_between_the_passes_is_refused(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    change, expected = CHANGE_CASES[case]
    source = write_csv(tmp_path / "s.csv")
    plan = Profile.plan

    def plan_then_change(self: Profile) -> object:
        result = plan(self)
        change(source)
        return result

    monkeypatch.setattr(Profile, "plan", plan_then_change)
    with pytest.raises(DataValidationError, match="the source changed while data prep read it") as caught:
        prepare_dataset(str(tmp_path / "out"), source=str(source), label_column="y", missing="refuse")
    assert expected in str(caught.value)
    nothing_published(tmp_path)


def test_a_source_that_changes_during_the_second_pass_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_csv(tmp_path / "s.csv")
    write = ShardWriter.write

    def write_then_change(self: ShardWriter, table: pa.Table) -> None:
        write(self, table)
        if source.stat().st_size < 10_000:
            _append_rows(source)

    monkeypatch.setattr(ShardWriter, "write", write_then_change)
    with pytest.raises(DataValidationError, match=r"s\.csv: the file's size, time or version differ: the source"):
        prepare_dataset(str(tmp_path / "out"), source=str(source), label_column="y")
    nothing_published(tmp_path)


# --------------------------------------------------------------------------------------------------
# Only the source's own files are read, and no error quotes one


def _secret_file(tmp_path: Path) -> Path:
    secret = tmp_path / "elsewhere" / "credentials.csv"
    secret.parent.mkdir()
    secret.write_text(f"password\n{SECRET}\n")
    return secret


def _linked_file(tmp_path: Path) -> tuple[str, str]:
    folder = tmp_path / "src"
    folder.mkdir()
    write_csv(folder / "a.csv")
    (folder / "b.csv").symlink_to(_secret_file(tmp_path))
    return str(folder), "b.csv: a symbolic link that leads out of the source folder"


def _linked_file_in_a_glob(tmp_path: Path) -> tuple[str, str]:
    folder, _ = _linked_file(tmp_path)
    return f"{folder}/*.csv", "b.csv: a symbolic link that leads out of the source folder"


def _row_of_another_width(tmp_path: Path) -> tuple[str, str]:
    path = write_csv(tmp_path / "s.csv")
    with path.open("a") as handle:
        handle.write(f"{SECRET}\n")
    return str(path), "Expected 3 columns, got 1"


SECRET_CASES = {
    "a link to a file outside the folder": _linked_file,
    "a glob matching a link out of its folder": _linked_file_in_a_glob,
    "a row that does not parse": _row_of_another_width,
}


@pytest.mark.parametrize("case", SECRET_CASES)
def test_no_file_outside_the_source_is_read_and_no_error_quotes_a_file(case: str, tmp_path: Path) -> None:
    source, expected = SECRET_CASES[case](tmp_path)
    with pytest.raises(DataValidationError) as caught:
        prepare_dataset(str(tmp_path / "out"), source=source, label_column="y")
    assert expected in str(caught.value)
    assert SECRET not in str(caught.value)
    nothing_published(tmp_path)


def test_a_link_inside_the_source_folder_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    (folder / "real").mkdir(parents=True)
    write_csv(folder / "real" / "a.csv")
    (folder / "alias.csv").symlink_to(folder / "real" / "a.csv")
    info = prepare_dataset(str(tmp_path / "out"), source=str(folder), label_column="y")
    assert sum(info.rows.values()) == 2 * ROWS


def test_a_linked_folder_out_of_the_source_is_not_followed(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    write_csv(folder / "a.csv")
    (folder / "more").symlink_to(_secret_file(tmp_path).parent)
    info = prepare_dataset(str(tmp_path / "out"), source=str(folder), label_column="y")
    assert sum(info.rows.values()) == ROWS and info.feature_names == ["x", "c"]
