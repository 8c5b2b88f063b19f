"""Where data prep reads from: a file, folder, glob or object-store prefix of Parquet, CSV or JSON Lines files (hive
``key=value`` folders become columns), or a bundled dataset (:mod:`~kftrain.steps.prep.samples`).

Files are checked one by one before any is read, then read as one pyarrow dataset (schemas unified: int and float
promote). CSV is read twice: first as text to infer each column's type from every value, then with those types. Each
file's version is checked again after each pass (:func:`check_unchanged`): a file changed in between is refused.
Every error names the file (and row); none quotes its content; a link leading out of the source is refused.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kftrain.extras import requires

with requires("data", "data prep"):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
    import pyarrow.fs as pafs

from kftrain import storage
from kftrain.data.dataset import DataValidationError
from kftrain.errors import KftrainError
from kftrain.storage.paths import local_target
from kftrain.storage.uri import is_local

PARQUET, CSV, JSONL = "parquet", "csv", "jsonl"
FORMATS = (PARQUET, CSV, JSONL)
SUFFIXES = {PARQUET: (".parquet", ".pq", ".parq"), CSV: (".csv",), JSONL: (".jsonl", ".ndjson", ".json")}
COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")
BUILTIN = "builtin:"
PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"


# What identifies a version of a file in fsspec's ``info``: local files, S3 (s3fs), GCS (gcsfs).
VERSION_FIELDS = ("size", "mtime", "ino", "ETag", "VersionId", "LastModified", "generation", "md5Hash", "updated")


@dataclass(frozen=True)
class SourceFile:
    uri: str  # as the user would write it
    path: str  # in the filesystem, for pyarrow
    size: int
    version: tuple[Any, ...] = ()  # VERSION_FIELDS of its info when it was listed


def version_of(info: dict[str, Any]) -> tuple[Any, ...]:
    """The fields of a file's ``info`` that change when the file does."""
    return tuple(str(info.get(key, "")) for key in VERSION_FIELDS)


@dataclass
class Source:
    """What a source names: its files (or a bundled table), their format, and the folder partitions start at."""

    text: str
    format: str
    root: str = ""  # the filesystem path hive partitions are relative to
    files: list[SourceFile] = field(default_factory=list)
    filesystem: Any = None  # a pyarrow FileSystem over the fsspec one storage uses
    table: pa.Table | None = None  # a bundled dataset
    by_path: dict[str, str] = field(default_factory=dict)  # filesystem path -> uri
    listed_from: str = ""  # the folder (or glob) whose listing gives the files' versions (check_unchanged)

    def name_of(self, path: str) -> str:
        return self.by_path.get(path, path)


def format_of(name: str) -> str:
    """The format a file's name says (``""`` when it says none)."""
    lower = name.lower()
    for suffix in COMPRESSED:
        lower = lower.removesuffix(suffix)
    return next((fmt for fmt, suffixes in SUFFIXES.items() if lower.endswith(suffixes)), "")


def resolve(text: str, fmt: str = "auto") -> Source:
    """The files ``text`` names, each checked for what it is; an error naming the source or the file."""
    if fmt not in ("auto", *FORMATS):
        raise DataValidationError(f"format: {fmt!r} is not one of auto, {', '.join(FORMATS)}")
    if text.startswith(BUILTIN):
        # Imported here, so `python -m kftrain.steps.prep.samples` (the data image's build) runs it unimported.
        from kftrain.steps.prep.samples import sample_table

        return Source(text, "builtin", table=sample_table(text[len(BUILTIN) :]))
    try:
        fs, path = storage.filesystem(text)
    except KftrainError as exc:
        raise DataValidationError(f"source {text!r}: not a URI data prep reads ({exc})") from None
    scheme = "" if "://" not in text else text.split("://", 1)[0] + "://"
    wildcard = any(c in path for c in "*?[")
    try:
        if wildcard:
            root = path[: min(path.find(c) for c in "*?[" if c in path)].rsplit("/", 1)[0] or "/"
            found = sorted(p for p in fs.glob(path) if fs.isfile(p))
        elif fs.isdir(path):
            root = path.rstrip("/")
            found = sorted(p for p in fs.find(root) if fs.isfile(p))
        elif fs.isfile(path):
            root, found = posixpath.dirname(path), [path]
        else:
            raise DataValidationError(f"source {text!r}: not found")
    except (OSError, KftrainError) as exc:
        if isinstance(exc, DataValidationError):
            raise
        raise DataValidationError(f"source {text!r}: cannot be listed ({exc})") from None
    data = [p for p in found if not _hidden(p, root)]
    if is_local(text) and (wildcard or len(found) != 1 or found[0] != path):  # a folder or a glob, not one file
        for p in data:
            _inside(p, root, scheme)
    if not data:
        raise DataValidationError(f"source {text!r}: no files there")

    def uri(p: str) -> str:
        return p if not scheme else f"{scheme}{p}"

    if fmt == "auto":
        formats = {format_of(p) for p in data} - {""}
        if len(formats) > 1:
            raise DataValidationError(f"source {text!r}: mixes {' and '.join(sorted(formats))} files; give one format")
        if not formats:
            listing = ", ".join(posixpath.basename(p) for p in data[:5])
            raise DataValidationError(
                f"source {text!r}: no .parquet, .csv or .jsonl file among {listing}; set format to read them"
            )
        fmt = formats.pop()
        data = [p for p in data if format_of(p) == fmt]  # other files (READMEs...) beside the data are left
    listed_from = path if wildcard else root
    infos = _infos(fs, listed_from, data)
    files = [SourceFile(uri(p), p, int(infos[p].get("size") or 0), version_of(infos[p])) for p in data if p in infos]
    if len(files) != len(data):
        raise DataValidationError(f"source {text!r}: files were removed while it was listed")
    for f in files:
        check_file(f, fmt, fs)
    # Local files through Arrow's own filesystem: through fsspec, a Parquet file's bytes pass as Python objects
    # outside Arrow's memory pool, and a 250 MB file took 500 MB more of memory to scan.
    arrow_fs = pafs.LocalFileSystem() if is_local(text) else pafs.PyFileSystem(pafs.FSSpecHandler(fs))
    source = Source(text, fmt, root=root, files=files, filesystem=arrow_fs, listed_from=listed_from)
    source.by_path = {f.path: f.uri for f in files}
    return source


def _inside(path: str, root: str, scheme: str) -> None:
    """A local file found in a source folder must be in it, not reached through a symbolic link out of it."""
    rel = posixpath.relpath(path, root)
    try:
        local_target(root, rel)
    except KftrainError:
        # Named, never read: the link's target may be anything (a key, a password file).
        raise DataValidationError(
            f"{scheme}{path}: a symbolic link that leads out of the source folder {root}; data prep reads only the "
            "files inside it"
        ) from None


def changed(where: str, what: str) -> DataValidationError:
    """The error for data the second pass reads that the first pass did not see: the source changed meanwhile."""
    return DataValidationError(
        f"{where}: {what}: the source changed while data prep read it (between its passes); nothing was published: "
        "prepare a source that is not being written"
    )


def _infos(fs: Any, listed_from: str, paths: list[str]) -> dict[str, dict[str, Any]]:
    """fsspec's ``info`` of each of ``paths`` (those still there): one file's own, else from one listing of the
    folder or glob ``listed_from`` (one request per thousand objects, not one per file)."""
    if len(paths) == 1:
        try:
            return {paths[0]: fs.info(paths[0])}
        except FileNotFoundError:
            return {}
    wildcard = any(c in listed_from for c in "*?[")
    listing = fs.glob(listed_from, detail=True) if wildcard else fs.find(listed_from, detail=True)
    return {p: listing[p] for p in paths if p in listing}


def check_unchanged(source: Source) -> None:
    """Every file is still the version :func:`resolve` listed: the passes over a source must read the same data."""
    if source.table is not None:
        return
    fs, _ = storage.filesystem(source.text)
    try:
        infos = _infos(fs, source.listed_from, [f.path for f in source.files])
    except OSError as exc:
        raise DataValidationError(
            f"source {source.text!r}: cannot be checked for changes ({type(exc).__name__})"
        ) from None
    for f in source.files:
        now = version_of(infos[f.path]) if f.path in infos else ()
        if now != f.version:
            raise changed(f.uri, "the file was removed" if not now else "the file's size, time or version differ")


def _hidden(path: str, root: str) -> bool:
    """Markers and side files of data writers (``_SUCCESS``, ``.crc``, ``_COMPLETE.json``), at any depth."""
    rel = path[len(root) :].lstrip("/") if path.startswith(root) else posixpath.basename(path)
    return any(part.startswith(("_", ".")) and "=" not in part for part in rel.split("/"))


def check_file(f: SourceFile, fmt: str, fs: Any) -> None:
    """An empty file, or one whose first bytes contradict its format, is refused naming it."""
    if f.size == 0:
        raise DataValidationError(f"{f.uri}: empty file (0 bytes)")
    with fs.open(f.path, "rb") as handle:
        head = handle.read(4)
    compressed = f.path.lower().endswith(COMPRESSED)
    if fmt == PARQUET and head != PARQUET_MAGIC:
        raise DataValidationError(f"{f.uri}: not a Parquet file (it does not start with {PARQUET_MAGIC!r})")
    if fmt != PARQUET and head == PARQUET_MAGIC:
        raise DataValidationError(f"{f.uri}: a Parquet file named as {fmt}: rename it .parquet or set format=parquet")
    if head[:2] == GZIP_MAGIC and not compressed:
        raise DataValidationError(
            f"{f.uri}: gzip-compressed but not named .gz: rename it {posixpath.basename(f.path)}.gz"
        )


def _ds() -> Any:
    """pyarrow.dataset, imported when a source is read: it imports pandas (about a second), which importing this
    module (the prep step's package, every test of it) does not need."""
    with requires("data", "data prep"):
        import pyarrow.dataset as ds
    return ds


def file_format(fmt: str, csv_types: dict[str, pa.DataType] | None, names: list[str] | None = None) -> Any:
    """The pyarrow file format: CSV columns all text (``csv_types`` None: the first pass) or with the given types."""
    ds = _ds()
    if fmt == PARQUET:
        # No pre-buffering: it keeps a whole file's column chunks in memory while it is scanned.
        return ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False))
    if fmt == JSONL:
        return ds.JsonFileFormat()
    types = csv_types if csv_types is not None else {n: pa.string() for n in names or []}
    convert = pacsv.ConvertOptions(column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=True)
    return ds.CsvFileFormat(convert_options=convert)


# pyarrow's messages quote the file: a row's text, a value. Those parts are cut (the file may hold anything,
# a password file named .csv among them); the row number stays.
_CONTENT = (re.compile(r"(Expected \d+ columns, got \d+): .*"), re.compile(r"(invalid value) .*"))


def short(exc: BaseException) -> str:
    """pyarrow's message without the path it repeats (we name the file ourselves), nor the file's content."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "input source" in text and "': " in text:
        text = text.split("': ", 1)[1]
    for pattern in _CONTENT:
        text = pattern.sub(r"\1", text)
    return text.removeprefix("Invalid: ")


def dataset(source: Source, csv_types: dict[str, pa.DataType] | None) -> Any:
    """The source's files as one pyarrow dataset: hive partitions discovered, schemas unified (or an error)."""
    ds = _ds()
    names = None
    if source.format == CSV and csv_types is None:
        columns: dict[str, None] = {}  # ordered, and linear in the number of columns
        for f in source.files:  # every file's header: the columns to read as text
            columns.update(dict.fromkeys(_physical(source, f, file_format(CSV, {})).names))
        names = list(columns)
    fmt = file_format(source.format, csv_types, names)
    if source.format != CSV:
        for f in source.files:
            _physical(source, f, fmt)  # a corrupt file fails here, by name, before any is read
    options = ds.FileSystemFactoryOptions(partition_base_dir=source.root)
    options.partitioning_factory = ds.HivePartitioning.discover(infer_dictionary=False)
    factory = ds.FileSystemDatasetFactory(source.filesystem, [f.path for f in source.files], fmt, options)
    try:
        schema = factory.inspect(promote_options="permissive", fragments=None)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DataValidationError(_merge_error(source, fmt, exc)) from None
    data = factory.finish(schema)
    _check_partitions(source, data)
    return data


def _check_partitions(source: Source, data: Any) -> None:
    """A folder ``a=1`` over files that have a column ``a`` too: the folder's value would replace the file's."""
    ds = _ds()
    for fragment in data.get_fragments():
        keys = ds.get_partition_keys(fragment.partition_expression)
        if not keys:
            continue
        columns = set(fragment.physical_schema.names)
        clash = [k for k in keys if k in columns]
        if clash:
            folder = next(p for p in fragment.path.split("/") if p.startswith(f"{clash[0]}="))
            raise DataValidationError(
                f"{source.name_of(fragment.path)}: column {clash[0]!r} is both in the file and in its folder's name "
                f"({folder}); rename the column or the folder"
            )


def _physical(source: Source, f: SourceFile, fmt: Any) -> pa.Schema:
    try:
        return fmt.make_fragment(f.path, source.filesystem).physical_schema
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise DataValidationError(f"{f.uri}: not a valid {source.format} file: {short(exc)}") from None


def _merge_error(source: Source, fmt: Any, exc: Exception) -> str:
    """Which files disagree on which column's type."""
    seen: dict[str, tuple[pa.DataType, str]] = {}
    for f in source.files:
        names = Counter(_physical(source, f, fmt).names)
        twice = [n for n, count in names.items() if count > 1]
        if twice:
            return f"{f.uri}: {names[twice[0]]} columns are named {twice[0]!r}; give each column its own name"
        for column in _physical(source, f, fmt):
            first = seen.setdefault(column.name, (column.type, f.uri))
            if not _compatible(first[0], column.type):
                return f"column {column.name!r} is {first[0]} in {first[1]} but {column.type} in {f.uri}"
    return f"source {source.text!r}: the files' columns do not agree ({short(exc)})"


def _compatible(a: pa.DataType, b: pa.DataType) -> bool:
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_null)
    return (
        a == b
        or (any(t(a) for t in numeric) and any(t(b) for t in numeric))
        or pa.types.is_null(a)
        or pa.types.is_null(b)
    )


def batches(
    source: Source, schema: Any, batch_rows: int, columns: list[str]
) -> Iterator[tuple[str, int, pa.RecordBatch]]:
    """``(file, first row's index in the file, batch)`` of ``columns``, file by file, partition columns included."""
    if source.table is not None:
        offset = 0
        for batch in source.table.select(columns).to_batches(max_chunksize=batch_rows):
            yield source.text, offset, batch
            offset += batch.num_rows
        return
    for fragment in schema.get_fragments():
        name = source.name_of(fragment.path)
        offset = 0
        # Little read-ahead: memory holds a row group and a couple of batches, not sixteen.
        scanned = fragment.to_batches(
            schema=schema.schema, columns=columns, batch_size=batch_rows, batch_readahead=2, fragment_readahead=1
        )
        while True:
            try:
                batch = next(scanned)
            except StopIteration:
                break
            except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
                raise DataValidationError(f"{name}: {short(exc)} (after row {offset})") from None
            if batch.num_rows:
                if source.format == CSV:
                    _refuse_repeated_header(name, offset, batch, set(fragment.physical_schema.names))
                yield name, offset, batch
                offset += batch.num_rows
        if not offset and source.format != PARQUET:  # (a Parquet file with no rows is a writer's empty part)
            raise DataValidationError(f"{name}: no rows (a header or blank lines only)")


def _refuse_repeated_header(name: str, offset: int, batch: pa.RecordBatch, physical: set[str]) -> None:
    """A CSV data row whose every value read is its column's name is the header again (files concatenated with
    their headers): read as data it would make a class named after the label column. Refused, naming the line
    (the header is line 1). Only the columns read, of the file's own, as text (the first pass reads every CSV
    column as text; the second, typed, would refuse such a row as a value of the wrong type anyway).

    Compared without the whitespace around each value and name: the CSV reader keeps it in both (``x, c, y`` reads
    as ``x``, `` c``, `` y``), and a line whose values are the column names but for spacing is the header all the
    same, written by another hand."""
    checked = [
        (i, field.name)
        for i, field in enumerate(batch.schema)
        if field.name in physical and pa.types.is_string(field.type)
    ]
    if not checked:
        return
    same = None
    for i, column in checked:
        trimmed = pc.utf8_trim_whitespace(pa.scalar(column)).as_py()
        equal = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(batch.column(i)), trimmed), False)
        same = equal if same is None else pc.and_(same, equal)
    if pc.any(same).as_py():
        row = offset + pc.index(same, True).as_py()
        raise DataValidationError(
            f"{name}: line {row + 2} repeats the header (every value is its column's name): remove it (files joined "
            "with their headers?)"
        )


def missing_columns(source: Source, schema: Any) -> dict[str, list[str]]:
    """Columns of the dataset that a file does not have (read as nulls), by file."""
    ds = _ds()
    if source.table is not None:
        return {}
    out: dict[str, list[str]] = {}
    for fragment in schema.get_fragments():
        have = set(fragment.physical_schema.names) | set(ds.get_partition_keys(fragment.partition_expression))
        lacking = [n for n in schema.schema.names if n not in have]
        if lacking:
            out[source.name_of(fragment.path)] = lacking
    return out
