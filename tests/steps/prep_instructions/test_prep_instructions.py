"""Instruction prep end to end: each validation rule, as a refusal naming the field, file and line (nothing written) or
as a counted warning; duplicates never on both sides of the split; the forms (prompt/response, chat messages, fields
renamed) and the sources (JSON Lines, Parquet, a folder, gzip, s3://, hf:// through Trainer's dataset initializer,
builtin:) all published alike."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kftrain import storage
from kftrain.data.dataset import DataValidationError
from kftrain.llm import synthetic
from kftrain.llm.instructions import Example, read_manifest, read_split
from kftrain.steps.prep_instructions import prepare_instructions
from testbed.fake_hub import hub_dataset


def pairs(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"prompt": f"Question {i}?", "response": f"Answer {i}."} for i in range(start, start + n)]


def jsonl(path: Path, records: list[Any]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def chat(prompt: str, response: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]}


def everything(uri: str) -> list[Example]:
    return read_split(uri, "train") + read_split(uri, "test")


# A rule, the bad record placed at line 5 of data.jsonl, and what the refusal says after "data.jsonl: line 5: ".
RULES = [
    ("empty-prompt", {"prompt": " ", "response": "r"}, {}, "an empty prompt"),
    ("empty-response", {"prompt": "p", "response": ""}, {}, "an empty response"),
    ("over-long", {"prompt": "p" * 60, "response": "r" * 50}, {"max_chars": 100}, "110 characters, over max_chars=100"),
    ("missing-field", {"prompt": "p"}, {}, "no 'response' field"),
    ("missing-renamed-field", {"prompt": "p", "response": "r"}, {"response_field": "output"}, "no 'output' field"),
    ("chat-without-answer", {"messages": [{"role": "user", "content": "p"}]}, {}, "the last turn of 'messages'"),
]


@pytest.mark.parametrize(("record", "options", "said"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_each_rule_refuses_naming_the_file_and_line_and_writes_nothing(tmp_path, record, options, said):
    records = [*pairs(4), record, *pairs(20, 4)]
    if "response_field" in options:
        records = [{"prompt": r["prompt"], "output": r["response"]} for r in records[:4]] + records[4:]
    source = jsonl(tmp_path / "data.jsonl", records)
    with pytest.raises(DataValidationError) as raised:
        prepare_instructions(str(tmp_path / "out"), source=source, **options)
    assert str(raised.value).startswith(f"{source}: line 5: {said}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b'{"prompt": "p", "response": "r"', "malformed JSON (column 32): one JSON object a line"),
        (b"\xff\xfe{}", "not UTF-8 text"),
        (b"[1, 2]", "a list, not an object of fields"),
    ],
    ids=["truncated", "not-utf8", "not-an-object"],
)
def test_a_line_that_is_not_a_record_is_refused_naming_its_line(tmp_path, line, said):
    good = [json.dumps(r).encode() for r in pairs(10)]
    (tmp_path / "data.jsonl").write_bytes(b"\n".join([*good[:2], b"", line, *good[2:]]) + b"\n")
    with pytest.raises(DataValidationError, match=r"data\.jsonl: line 4: ") as raised:
        prepare_instructions(str(tmp_path / "out"), source=str(tmp_path / "data.jsonl"))
    assert said in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_a_json_array_document_is_told_apart_from_json_lines(tmp_path):
    (tmp_path / "data.json").write_text(json.dumps(pairs(5), indent=2))
    with pytest.raises(DataValidationError, match=r"line 1: a JSON array, not JSON Lines"):
        prepare_instructions(str(tmp_path / "out"), source=str(tmp_path / "data.json"))


@pytest.mark.parametrize(
    ("record", "options", "kind"),
    [
        ({"prompt": "", "response": "r"}, {}, "empty"),
        ({"prompt": "p" * 200, "response": "r"}, {"max_chars": 100}, "too_long"),
    ],
    ids=["empty", "over-long"],
)
def test_with_invalid_drop_each_is_dropped_and_counted(tmp_path, record, options, kind):
    source = jsonl(tmp_path / "data.jsonl", [*pairs(10), record, record, *pairs(10, 10)])
    manifest = prepare_instructions(str(tmp_path / "out"), source=source, invalid="drop", **options)
    assert manifest["warnings"] == {"empty": 0, "too_long": 0, "duplicates": 0, kind: 2}
    assert sum(manifest["rows"].values()) == 20 == len(everything(str(tmp_path / "out")))
    assert read_manifest(str(tmp_path / "out"))["warnings"][kind] == 2


def test_the_same_example_is_never_in_train_and_test(tmp_path):
    # Every example three times (once with other spacing): without deduplication a third of them straddle the split.
    records = pairs(30) + pairs(30) + [{"prompt": f" Question  {i}?", "response": f"Answer {i}. "} for i in range(30)]
    manifest = prepare_instructions(str(tmp_path / "out"), source=jsonl(tmp_path / "d.jsonl", records), seed=5)
    assert manifest["warnings"]["duplicates"] == 60 and manifest["rows"] == {"train": 27, "test": 3}
    train, test = read_split(str(tmp_path / "out"), "train"), read_split(str(tmp_path / "out"), "test")
    assert {e.key() for e in train}.isdisjoint({e.key() for e in test})


def test_the_split_is_seeded(tmp_path):
    source = jsonl(tmp_path / "d.jsonl", pairs(50))
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        prepare_instructions(str(tmp_path / name), source=source, seed=seed, test_fraction=0.2)
    a, b, c = (read_split(str(tmp_path / n), "test") for n in "abc")
    assert a == b and len(a) == 10 and a != c


def test_chats_and_renamed_fields_become_prompt_and_response(tmp_path):
    records = [chat(f"Q{i}", f"A{i}") for i in range(10)] + [
        {"instruction": f"Q{i}", "output": f"A{i}"} for i in range(10, 20)
    ]
    source = jsonl(tmp_path / "d.jsonl", records)
    manifest = prepare_instructions(
        str(tmp_path / "out"), source=source, prompt_field="instruction", response_field="output"
    )
    assert manifest["forms"] == {"messages": 10, "prompt_response": 10}
    assert sorted(everything(str(tmp_path / "out")), key=lambda e: int(e.prompt[1:])) == [
        Example(f"Q{i}", f"A{i}") for i in range(20)
    ]


def test_a_parquet_folder_with_chats_and_a_gzipped_jsonl(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    messages = [chat(f"Q{i}", f"A{i}")["messages"] for i in range(12)]
    pq.write_table(pa.table({"messages": messages, "id": list(range(12))}), folder / "part-0.parquet")
    pq.write_table(pa.table({"prompt": ["Q12", "Q13"], "response": ["A12", "A13"]}), folder / "part-1.parquet")
    (folder / "_SUCCESS").write_text("")
    manifest = prepare_instructions(str(tmp_path / "out"), source=str(folder))
    assert sum(manifest["rows"].values()) == 14 and manifest["forms"] == {"messages": 12, "prompt_response": 2}
    (tmp_path / "z").mkdir()
    with gzip.open(tmp_path / "z" / "d.jsonl.gz", "wt") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in pairs(10)))
    manifest = prepare_instructions(str(tmp_path / "out-gz"), source=str(tmp_path / "z"))
    assert sum(manifest["rows"].values()) == 10


def test_a_parquet_row_without_a_field_is_named_by_its_row(tmp_path):
    table = pa.table({"prompt": [f"Q{i}" for i in range(10)], "response": [f"A{i}" for i in range(9)] + [None]})
    pq.write_table(table, tmp_path / "d.parquet")
    with pytest.raises(DataValidationError, match=r"d\.parquet: row 10: no 'response' field"):
        prepare_instructions(str(tmp_path / "out"), source=str(tmp_path / "d.parquet"))


def test_an_object_store_source_and_output(s3_env, tmp_path):
    storage.upload(jsonl(tmp_path / "d.jsonl", pairs(20)), f"{s3_env}/raw/d.jsonl")
    manifest = prepare_instructions(f"{s3_env}/prepared", source=f"{s3_env}/raw/")
    assert manifest["rows"] == {"train": 18, "test": 2} and manifest["source"] == f"{s3_env}/raw/"
    assert len(everything(f"{s3_env}/prepared")) == 20
    bad = jsonl(tmp_path / "bad.jsonl", [*pairs(3), {"prompt": "p"}])
    storage.upload(bad, f"{s3_env}/bad/d.jsonl")
    with pytest.raises(DataValidationError, match=rf"^{s3_env}/bad/d\.jsonl: line 4: no 'response' field"):
        prepare_instructions(f"{s3_env}/refused", source=f"{s3_env}/bad")
    assert not storage.exists(f"{s3_env}/refused")


def test_a_hub_dataset_through_trainers_dataset_initializer(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    files = {
        "README.md": b"# a dataset card",
        "data/train.jsonl": "".join(json.dumps(r) + "\n" for r in pairs(20)).encode(),
    }
    with hub_dataset("someone/tasks", files) as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        manifest = prepare_instructions(str(tmp_path / "out"), source="hf://someone/tasks")
        assert sum(manifest["rows"].values()) == 20 and manifest["source"] == "hf://someone/tasks"
        files["data/train.jsonl"] += b"{broken\n"
    with hub_dataset("someone/tasks", files) as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        with pytest.raises(DataValidationError, match=r"^hf://someone/tasks/data/train\.jsonl: line 21: malformed"):
            prepare_instructions(str(tmp_path / "refused"), source="hf://someone/tasks")
    assert not (tmp_path / "refused").exists()
    assert list((tmp_path / "tmp").iterdir()) == []  # the download is gone, used or refused


def test_a_builtin_task_is_read_like_a_file(tmp_path):
    manifest = prepare_instructions(str(tmp_path / "out"), source=f"builtin:{synthetic.DEFAULT_TASK}")
    assert sum(manifest["rows"].values()) == synthetic.DEFAULT_ROWS
    assert set(everything(str(tmp_path / "out"))) == {
        Example(r["prompt"], r["response"]) for r in synthetic.rows(synthetic.DEFAULT_TASK)
    }
    with pytest.raises(synthetic.UnknownTask, match="builtin:nope"):
        prepare_instructions(str(tmp_path / "refused"), source="builtin:nope")


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"invalid": "skip"}, "invalid: 'skip' is not one of refuse, drop"),
        ({"max_chars": -1}, "max_chars must be >= 0"),
        ({"test_fraction": 1.0}, "test_fraction must be in (0, 1)"),
        ({"prompt_field": ""}, "prompt_field: empty"),
        ({"response_field": "prompt"}, "must differ"),
        ({"format": "csv"}, "format: 'csv' is not one of auto, jsonl, parquet"),
        ({"source": "s3://AKIAKEY:s3cr3t-value@bucket/d.jsonl"}, "source: a URI with credentials"),
        ({"source": "hf://hf_t0ken-value@owner/name"}, "source: a URI with credentials"),
    ],
)
def test_an_input_of_the_step_is_refused_by_name(tmp_path, options, said):
    source = jsonl(tmp_path / "d.jsonl", pairs(10))
    options = {"source": source, **options}
    with pytest.raises(DataValidationError) as raised:
        prepare_instructions(str(tmp_path / "out"), **options)
    assert said in str(raised.value) and "s3cr3t" not in str(raised.value) and "t0ken" not in str(raised.value)
    assert not (tmp_path / "out").exists()
