"""Where instruction prep reads from, and each record of it with the file and line it came from.

A source is a JSON Lines or Parquet file, folder, glob or object-store prefix (listed and checked as tabular prep
lists them: :func:`kftrain.steps.prep.sources.resolve`), ``hf://owner/name`` (downloaded by Trainer's dataset
initializer, :mod:`kftrain.programs.initializer`, into a temporary folder), or ``builtin:<task>``
(:mod:`kftrain.llm.synthetic`, written to a temporary folder and read like a user's file). A line that is not
JSON, not UTF-8, or a JSON array written as one document is an error naming the file and the line; no error quotes
the data.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import posixpath
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from kftrain import storage
from kftrain.data.dataset import DataValidationError
from kftrain.steps.prep import sources as tabular

BUILTIN = "builtin:"
HUB = "hf://"
FORMATS = (tabular.JSONL, tabular.PARQUET)
BATCH_ROWS = 1024


@dataclass(frozen=True)
class Opened:
    """A resolved source: its files, and the name each file's errors give (the URI the user wrote)."""

    source: tabular.Source
    shown: dict[str, str]  # a file's filesystem path -> how errors name it

    def name(self, path: str) -> str:
        return self.shown.get(path, self.source.name_of(path))


@contextlib.contextmanager
def opened(text: str, fmt: str = "auto") -> Iterator[Opened]:
    """The files ``text`` names, ready to read while the block runs (a downloaded or generated source lives in a
    temporary folder until then); an error naming the source or the file."""
    if fmt not in ("auto", *FORMATS):
        raise DataValidationError(f"format: {fmt!r} is not one of auto, {', '.join(FORMATS)}")
    if not text.startswith((BUILTIN, HUB)):
        yield Opened(_resolve(text, fmt, text), {})
        return
    with tempfile.TemporaryDirectory(prefix="kftrain-instructions-") as tmp:
        folder = _builtin(text, tmp) if text.startswith(BUILTIN) else _hub(text, tmp)
        source = _resolve(folder, fmt, text)
        shown = {f.path: posixpath.join(text, posixpath.relpath(f.path, folder)) for f in source.files}
        yield Opened(source, shown)


def _builtin(text: str, tmp: str) -> str:
    from kftrain.llm import synthetic

    synthetic.write_task(tmp, text[len(BUILTIN) :])
    return tmp


def _hub(text: str, tmp: str) -> str:
    from kftrain.contract import WORKSPACE_ENV
    from kftrain.programs import initializer

    # As Trainer's dataset initializer would: the Hub's endpoint and token from the environment (HF_ENDPOINT,
    # HF_TOKEN or ACCESS_TOKEN), the files into <workspace>/dataset.
    env = {**os.environ, initializer.STORAGE_URI_ENV: text, WORKSPACE_ENV: tmp}
    return str(initializer.initialize("dataset", env))


def _resolve(path: str, fmt: str, text: str) -> tabular.Source:
    source = tabular.resolve(path, fmt)
    if source.format not in FORMATS:
        raise DataValidationError(
            f"source {text!r}: {source.format} files: instruction data is JSON Lines (.jsonl) or Parquet, with "
            "prompt and response fields or chat messages"
        )
    return source


@contextlib.contextmanager
def _open(opened: Opened, f: tabular.SourceFile) -> Iterator[IO[bytes]]:
    path = f.path
    with storage.open_uri(f.uri, "rb") as raw:
        if path.lower().endswith(".gz"):
            with gzip.open(raw, "rb") as unzipped:
                yield unzipped
        elif path.lower().endswith(tabular.COMPRESSED):
            raise DataValidationError(f"{opened.name(path)}: only gzip (.gz) is read of compressed files")
        else:
            yield raw


def records(opened: Opened) -> Iterator[tuple[str, Any]]:
    """Every record of every file, in order, with where it is (``<file>: line N`` or ``<file>: row N``)."""
    for f in opened.source.files:
        name = opened.name(f.path)
        if opened.source.format == tabular.PARQUET:
            yield from _parquet(opened, f, name)
        else:
            yield from _jsonl(opened, f, name)


def _jsonl(opened: Opened, f: tabular.SourceFile, name: str) -> Iterator[tuple[str, Any]]:
    found = False
    with _open(opened, f) as handle:
        try:
            for number, raw in enumerate(handle, 1):
                yield from _line(raw, f"{name}: line {number}")
                found = found or bool(raw.strip())
        except (OSError, EOFError, zlib.error) as exc:  # a truncated or corrupt .gz
            raise DataValidationError(f"{name}: cannot be read ({type(exc).__name__})") from None
    if not found:
        raise DataValidationError(f"{name}: no records (blank lines only)")


def _line(raw: bytes, where: str) -> Iterator[tuple[str, Any]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataValidationError(f"{where}: not UTF-8 text") from None
    if not text.strip():
        return  # a blank line (the last newline, a gap) holds no record
    try:
        yield where, json.loads(text.rstrip())
    except ValueError as exc:
        if text.lstrip().startswith("[") and where.endswith(": line 1"):
            raise DataValidationError(
                f"{where}: a JSON array, not JSON Lines: write one object a line (jq -c '.[]' turns one into the other)"
            ) from None
        column = getattr(exc, "colno", None)
        at = f" (column {column})" if column else ""
        raise DataValidationError(f"{where}: malformed JSON{at}: one JSON object a line") from None


def _parquet(opened: Opened, f: tabular.SourceFile, name: str) -> Iterator[tuple[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with _open(opened, f) as handle:
        try:
            parquet = pq.ParquetFile(handle)
            offset = 0
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
                for i, row in enumerate(batch.to_pylist()):
                    yield f"{name}: row {offset + i + 1}", row
                offset += batch.num_rows
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
            raise DataValidationError(f"{name}: not a valid parquet file: {tabular.short(exc)}") from None
