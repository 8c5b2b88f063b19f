"""Instruction examples: a chat rendered as one example, a record normalized (each missing or mistyped field named
with its place), duplicates dropped and prompts kept on one side of a seeded split, and the published layout read
back checked against its marker, from a folder and from an object store."""

from __future__ import annotations

import json

import pytest

from kftrain import storage
from kftrain.data.dataset import DataValidationError
from kftrain.llm.instructions import (
    FORMAT,
    Example,
    Fields,
    example_of,
    problem,
    publish,
    read_manifest,
    read_split,
    render_messages,
    split,
)

WHERE = "data.jsonl: line 7"


def turns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": role, "content": content} for role, content in pairs]


@pytest.mark.parametrize(
    ("messages", "prompt", "response"),
    [
        (turns(("user", "Hi?"), ("assistant", "Hello.")), "Hi?", "Hello."),
        (
            turns(("system", "Be brief."), ("user", "Hi?"), ("assistant", "Hello.")),
            "System: Be brief.\n\nUser: Hi?",
            "Hello.",
        ),
        (
            turns(("user", "2+2?"), ("assistant", "4"), ("user", "and 3+3?"), ("assistant", "6")),
            "User: 2+2?\n\nAssistant: 4\n\nUser: and 3+3?",
            "6",
        ),
    ],
    ids=["one-user-turn-as-written", "system-and-user", "multi-turn"],
)
def test_a_chat_is_the_turns_before_the_last_answer_and_that_answer(messages, prompt, response):
    assert render_messages(messages, WHERE) == Example(prompt, response)


@pytest.mark.parametrize(
    ("messages", "said"),
    [
        ([], "'messages' must be a non-empty list"),
        ("hi", "'messages' must be a non-empty list"),
        (["hi"], "messages[0] is not an object"),
        ([{"role": "user"}], "messages[0]: no 'content' field"),
        ([{"content": "x"}], "messages[0]: no 'role' field"),
        ([{"role": "user", "content": 3}], "messages[0].content is a int, not a string"),
        (turns(("robot", "x"), ("assistant", "y")), "messages[0].role 'robot' is not one of system, user, assistant"),
        (turns(("user", "x"), ("assistant", "y"), ("user", "z")), "the last turn of 'messages' is the user's"),
        (turns(("assistant", "y")), "holds only the assistant's turn"),
    ],
)
def test_a_malformed_chat_is_refused_naming_the_turn_and_the_line(messages, said):
    with pytest.raises(DataValidationError, match=r"^data\.jsonl: line 7") as raised:
        render_messages(messages, WHERE)
    assert said in str(raised.value)


def test_a_record_is_a_prompt_and_a_response_or_a_chat_other_fields_aside():
    assert example_of({"prompt": "p", "response": "r", "id": 3}, WHERE) == Example("p", "r")
    chat = {"messages": turns(("user", "p"), ("assistant", "r")), "prompt": None}
    assert example_of(chat, WHERE) == Example("p", "r")
    mapped = Fields(prompt="instruction", response="output", messages="conversation")
    assert example_of({"instruction": "p", "output": "r"}, WHERE, mapped) == Example("p", "r")


@pytest.mark.parametrize(
    ("record", "fields", "said"),
    [
        ({"response": "r"}, Fields(), "no 'prompt' field (give 'prompt' and 'response', or 'messages')"),
        ({"prompt": "p"}, Fields(), "no 'response' field"),
        ({"prompt": "p", "answer": "r"}, Fields(response="output"), "no 'output' field"),
        ({"prompt": "p", "response": 4}, Fields(), "'response' is a int, not a string"),
        ({"prompt": ["p"], "response": "r"}, Fields(), "'prompt' is a list, not a string"),
        (["p", "r"], Fields(), "a list, not an object of fields"),
        (
            {"prompt": "p", "messages": turns(("user", "p"), ("assistant", "r"))},
            Fields(),
            "both 'messages' and 'prompt': give one form",
        ),
    ],
    ids=["no-prompt", "no-response", "renamed-field", "number", "list", "not-an-object", "two-forms"],
)
def test_a_missing_or_mistyped_field_is_named_with_its_file_and_line(record, fields, said):
    with pytest.raises(DataValidationError) as raised:
        example_of(record, WHERE, fields)
    assert str(raised.value).startswith(f"{WHERE}: {said}")


@pytest.mark.parametrize(
    ("example", "max_chars", "kind"),
    [
        (Example("p", "r"), 2, ""),
        (Example("  ", "r"), 0, "empty"),
        (Example("p", "\n"), 0, "empty"),
        (Example("pp", "r"), 2, "too_long"),
        (Example("p" * 10_000, "r"), 0, ""),
    ],
)
def test_an_example_is_empty_too_long_or_fine(example, max_chars, kind):
    assert problem(example, max_chars) == kind


def numbered(n: int, prompt: str = "q{}") -> list[Example]:
    return [Example(prompt.format(i), f"a{i}") for i in range(n)]


def test_duplicates_are_dropped_before_the_split_whitespace_aside():
    examples = [*numbered(20), Example("q3", "a3"), Example(" q4 ", "a4\n"), Example("q5", "a  5")]
    parts = split(examples, 0.25, seed=1)
    assert parts.duplicates == 2 and len(parts.train) + len(parts.test) == 21
    keys = [e.key() for e in parts.train + parts.test]
    assert len(keys) == len(set(keys))


def test_no_test_prompt_is_a_training_prompt():
    examples = [Example(f"q{i % 5}", f"a{i}") for i in range(40)]  # 5 prompts, 8 responses each
    parts = split(examples, 0.2, seed=3)
    assert {e.prompt for e in parts.train}.isdisjoint({e.prompt for e in parts.test})
    assert (len(parts.test), parts.shared_prompts) == (8, 40)


def test_the_split_depends_on_the_seed_alone():
    a, b, c = (split(numbered(100), 0.1, seed) for seed in (7, 7, 8))
    assert a.test == b.test and a.train == b.train and len(a.test) == 10
    assert a.test != c.test


@pytest.mark.parametrize(("count", "fraction"), [(3, 0.1), (5, 0.95), (1, 0.5)])
def test_a_split_left_empty_is_refused(count, fraction):
    with pytest.raises(DataValidationError, match="leaves an empty split"):
        split(numbered(count), fraction, seed=0)


def test_the_published_layout_reads_back(tmp_path):
    parts = split([*numbered(18), Example("Ünïcode ✓", '"quoted"\nnewline')], 0.2, seed=0)
    manifest = publish(str(tmp_path / "ds"), parts, {"source": "x", "warnings": {"empty": 0}})
    assert manifest["format"] == FORMAT and manifest["rows"] == {"train": 15, "test": 4}
    assert manifest["fields"] == ["prompt", "response"] and manifest["warnings"] == {"empty": 0}
    storage.require_complete(str(tmp_path / "ds"), verify=True)
    assert read_split(str(tmp_path / "ds"), "train") == parts.train
    assert read_split(str(tmp_path / "ds"), "test") == parts.test
    assert read_manifest(str(tmp_path / "ds")) == manifest
    lines = (tmp_path / "ds" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    assert all(set(json.loads(line)) == {"prompt", "response"} for line in lines)


def test_a_publication_that_fails_leaves_nothing(tmp_path, monkeypatch):
    def broken(self, relpath, data):
        if relpath == "test.jsonl":
            raise OSError("disk gone")
        return original(self, relpath, data)

    original = storage.ArtifactWriter.write_bytes
    monkeypatch.setattr(storage.ArtifactWriter, "write_bytes", broken)
    with pytest.raises(OSError, match="disk gone"):
        publish(str(tmp_path / "ds"), split(numbered(10), 0.2, 0), {})
    assert list(tmp_path.iterdir()) == []


def test_the_layout_reads_back_from_an_object_store(s3_env):
    parts = split(numbered(10), 0.2, seed=0)
    publish(f"{s3_env}/instructions", parts, {})
    assert read_split(f"{s3_env}/instructions", "test") == parts.test


def test_reading_what_is_not_an_instruction_dataset_says_so(tmp_path):
    with storage.ArtifactWriter(str(tmp_path / "other")) as writer:
        writer.write_json("dataset.json", {"format": "parquet"})
    with pytest.raises(DataValidationError, match=r"no manifest\.json: not an instruction dataset"):
        read_split(str(tmp_path / "other"), "train")
    with storage.ArtifactWriter(str(tmp_path / "v2")) as writer:
        writer.write_json("manifest.json", {"format": "kftrain-instructions/v2"})
    with pytest.raises(DataValidationError, match="format 'kftrain-instructions/v2', not 'kftrain-instructions/v1'"):
        read_manifest(str(tmp_path / "v2"))
    publish(str(tmp_path / "ds"), split(numbered(10), 0.2, 0), {})
    with pytest.raises(DataValidationError, match="split 'validation' is not one of train, test"):
        read_split(str(tmp_path / "ds"), "validation")


def test_an_unfinished_dataset_is_not_read(tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "train.jsonl").write_text('{"prompt": "p", "response": "r"}\n')
    with pytest.raises(storage.StorageError, match="incomplete artifact"):
        read_split(str(tmp_path / "ds"), "train")
