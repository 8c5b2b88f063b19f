"""What instruction prep reads: each record with its file and line (or row), under the name the user gave (a
downloaded or generated source's temporary folder never shows); what is not JSON Lines or Parquet, or cannot be
read, refused by name."""

from __future__ import annotations

import bz2
import gzip
import json
from pathlib import Path

import pytest

from kftrain.data.dataset import DataValidationError
from kftrain.errors import KftrainError
from kftrain.steps.prep_instructions.sources import opened, records
from testbed.fake_hub import hub_dataset

RECORD = {"prompt": "p", "response": "r"}


def _corrupt_gzip() -> bytes:
    """A gzip stream whose compressed bytes are flipped past its header."""
    data = bytearray(gzip.compress(b'{"prompt": "p", "response": "r"}\n' * 50))
    for i in range(12, len(data) - 8):
        data[i] ^= 0x5A
    return bytes(data)


def read(text: str, fmt: str = "auto") -> list[tuple[str, object]]:
    with opened(text, fmt) as source:
        return list(records(source))


def test_records_come_with_their_file_and_line_blank_lines_skipped(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps(RECORD) + "\n\n  \n" + json.dumps(RECORD) + "\r\n")
    assert [where for where, _ in read(str(tmp_path / "a.jsonl"))] == [
        f"{tmp_path}/a.jsonl: line 1",
        f"{tmp_path}/a.jsonl: line 4",
    ]


def test_a_builtin_source_is_named_as_written(tmp_path):
    found = read("builtin:upper")
    assert found[0][0] == "builtin:upper/upper.jsonl: line 1" and len(found) > 100


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("d.csv", b"prompt,response\np,r\n", "csv files: instruction data is JSON Lines (.jsonl) or Parquet"),
        ("d.jsonl", b"\n\n", "d.jsonl: no records (blank lines only)"),
        ("d.jsonl", b"", "d.jsonl: empty file (0 bytes)"),
        ("d.jsonl.gz", gzip.compress(b'{"prompt": "p", "response": "r"}\n' * 50)[:40], "d.jsonl.gz: cannot be read"),
        ("d.jsonl.gz", _corrupt_gzip(), "d.jsonl.gz: cannot be read"),
        ("d.jsonl.bz2", bz2.compress(b'{"prompt": "p", "response": "r"}\n'), "only gzip (.gz) is read"),
        ("d.parquet", b"PAR1 not really", "d.parquet: not a valid parquet file"),
        ("d.jsonl", b"PAR1", "a Parquet file named as jsonl"),
    ],
    ids=["csv", "blank-lines", "empty", "truncated-gzip", "corrupt-gzip", "bzip2", "bad-parquet", "parquet-as-jsonl"],
)
def test_a_file_that_cannot_be_read_is_refused_by_name(tmp_path, name, content, said):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DataValidationError) as raised:
        read(str(tmp_path / name))
    assert said in str(raised.value)


def test_an_explicit_format_and_a_missing_source(tmp_path):
    (tmp_path / "records.txt").write_text(json.dumps(RECORD) + "\n")
    assert len(read(str(tmp_path / "records.txt"), "jsonl")) == 1
    with pytest.raises(DataValidationError, match="not found"):
        read(str(tmp_path / "nothing.jsonl"))


def test_a_hub_repository_that_is_not_there_is_the_initializers_error(tmp_path, monkeypatch):
    with hub_dataset("someone/other", {"d.jsonl": b"{}\n"}) as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        with pytest.raises(KftrainError, match="answered 404"):
            read("hf://someone/missing")


def test_the_data_of_a_hub_repository_its_card_aside(tmp_path: Path, monkeypatch):
    files = {"README.md": b"card", "train.jsonl": (json.dumps(RECORD) + "\n").encode()}
    with hub_dataset("o/n", files) as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        assert read("hf://o/n") == [("hf://o/n/train.jsonl: line 1", RECORD)]
