"""Data prep's pass-through mode: for data a trainer reads itself (images, text, audio), only the list of files is
prepared: checked, labelled, split and written as Parquet, the files themselves left where they are.

The files are every file under a folder, prefix or glob (``label_column="folder"``: the ImageFolder layout), or those
a manifest table lists (``path_column``, relative to its folder). Each must exist under that root, be non-empty and
listed once; a path leaving the root is refused. Every split holds ``path``, ``uri`` and, when labelled, ``label``.
"""

from __future__ import annotations

import posixpath
from dataclasses import asdict

from kftrain.extras import requires

with requires("data", "data prep"):
    import numpy as np
    import pyarrow as pa

from kftrain import storage
from kftrain.data.dataset import (
    CLASSIFICATION,
    DATASET_INFO,
    FILES,
    LABEL,
    SPLITS,
    DatasetInfo,
    DataValidationError,
)
from kftrain.errors import KftrainError
from kftrain.steps.prep import sources
from kftrain.steps.prep.shards import ShardWriter
from kftrain.steps.prep.split import SplitCodes

FOLDER_LABEL = "folder"


def _listing(fs: object, root: str) -> dict[str, int]:
    """Every file under ``root``: relative path -> size (writers' markers and hidden files left out)."""
    found = fs.find(root, detail=True)  # type: ignore[attr-defined]
    out = {}
    for path, entry in found.items():
        rel = path[len(root) :].lstrip("/")
        if entry.get("type") == "file" and not any(p.startswith((".", "_")) for p in rel.split("/")):
            try:  # an object key such as "a/../../b" is named, never listed for a trainer to join to the root
                storage.confine(rel, f"{root} (listing)")
            except KftrainError as exc:
                raise DataValidationError(str(exc)) from None
            out[rel] = int(entry.get("size") or 0)
    return out


def _manifest_rows(source: str, path_column: str, label_column: str) -> tuple[list[str], list[object] | None, str]:
    """The paths (and labels) a manifest lists, and the manifest's own URI."""
    src = sources.resolve(source)
    if len(src.files) != 1:
        raise DataValidationError(f"source {source!r}: a manifest is one file; this names {len(src.files)}")
    data = sources.dataset(src, {} if src.format == sources.CSV else None)
    names = data.schema.names
    if path_column not in names:
        raise DataValidationError(f"{src.files[0].uri}: no path column {path_column!r} (columns: {', '.join(names)})")
    wanted = [path_column] + ([label_column] if label_column and label_column in names else [])
    if label_column and label_column not in names:
        raise DataValidationError(f"{src.files[0].uri}: no label column {label_column!r} (columns: {', '.join(names)})")
    table = pa.Table.from_batches([b for _, _, b in sources.batches(src, data, 65536, wanted)])
    paths = table.column(path_column).to_pylist()
    labels = table.column(label_column).to_pylist() if len(wanted) == 2 else None
    return paths, labels, src.files[0].uri


def _inside(path: object, row: int, where: str, root: str) -> str:
    """``path`` normalised, relative to the root; an error when it is not a relative path that stays inside."""
    if not isinstance(path, str) or not path.strip():
        raise DataValidationError(f"{where}: row {row}: empty path")
    normal = posixpath.normpath(path.strip())
    if "://" in path or normal.startswith("/") or normal == ".." or normal.startswith("../"):
        raise DataValidationError(f"{where}: row {row}: path {path!r} is outside {root} (paths are relative to it)")
    return normal


def prepare_files(
    output_uri: str,
    *,
    source: str,
    label_column: str,
    path_column: str,
    seed: int,
    validation_fraction: float,
    test_fraction: float,
    shard_bytes: int,
) -> DatasetInfo:
    """Check, label, split and publish the list of files ``source`` names (see the module's docstring)."""
    is_manifest = sources.format_of(source) != "" and "*" not in source
    try:
        fs, _ = storage.filesystem(source)
    except KftrainError as exc:
        raise DataValidationError(f"source {source!r}: not a URI data prep reads ({exc})") from None
    labels: list[object] | None
    if is_manifest:
        paths, labels, where = _manifest_rows(source, path_column, "" if label_column == FOLDER_LABEL else label_column)
        root_uri = where.rsplit("/", 1)[0] if "/" in where else "."
        _, root = storage.filesystem(root_uri)
        available = _listing(fs, root.rstrip("/"))
        rels = [_inside(p, i, where, root_uri) for i, p in enumerate(paths)]
    else:
        _, path = storage.filesystem(source)
        wildcard = any(c in path for c in "*?[")
        root = path[: min(path.find(c) for c in "*?[" if c in path)].rsplit("/", 1)[0] if wildcard else path.rstrip("/")
        if not fs.exists(root):
            raise DataValidationError(f"source {source!r}: not found")
        root_uri = source if not wildcard else source[: len(source) - len(path) + len(root)]
        available = _listing(fs, root)
        if wildcard:
            matched = {p[len(root) :].lstrip("/") for p in fs.glob(path)}
            available = {k: v for k, v in available.items() if k in matched}
        rels, where = sorted(available), source
        labels = None
        if label_column == FOLDER_LABEL:
            flat = [r for r in rels if "/" not in r]
            if flat:
                raise DataValidationError(f"{root_uri}: {flat[0]} is not in a class folder (label_column=folder)")
            labels = [r.split("/", 1)[0] for r in rels]
    if not rels:
        raise DataValidationError(f"source {source!r}: no files")
    seen: set[str] = set()
    for row, rel in enumerate(rels):
        if rel not in available:
            raise DataValidationError(f"{where}: row {row}: {rel} not found under {root_uri}")
        if available[rel] == 0:
            raise DataValidationError(f"{storage.join(root_uri, rel)}: empty file (0 bytes)")
        if rel in seen:
            raise DataValidationError(f"{where}: row {row}: {rel} is listed twice")
        seen.add(rel)
    classes: list[object] = []
    ids = None
    if labels is not None:
        missing = [i for i, v in enumerate(labels) if v is None or v == ""]
        if missing:
            raise DataValidationError(f"{where}: row {missing[0]}: no label")
        classes = sorted(set(labels), key=lambda v: (isinstance(v, str), str(v) if isinstance(v, str) else v))
        if len(classes) < 2:
            raise DataValidationError(f"{where}: a single class ({classes[0]!r}): a classifier needs at least two")
        index = {c: i for i, c in enumerate(classes)}
        ids = np.array([index[v] for v in labels], dtype=np.int64)
    groups = [int((ids == i).sum()) for i in range(len(classes))] if ids is not None else [len(rels)]
    codes = SplitCodes(groups, seed, validation_fraction, test_fraction).take(ids, len(rels))
    columns = {"path": pa.array(rels), "uri": pa.array([storage.join(root_uri, r) for r in rels])}
    if ids is not None:
        columns[LABEL] = pa.array(ids)
    table = pa.table(columns)
    with storage.ArtifactWriter(output_uri) as writer:
        shards, rows = {}, {}
        for code, split in enumerate(SPLITS):
            shard_writer = ShardWriter(writer, split, max_rows=len(rels), max_bytes=shard_bytes)
            shard_writer.write(table.filter(pa.array(codes == code)))
            shards[split], rows[split] = shard_writer.close(), shard_writer.rows
        info = DatasetInfo(
            source=source,
            num_features=0,
            num_classes=len(classes),
            feature_names=[],
            classes=classes,
            rows=rows,
            shards=shards,
            seed=seed,
            schema={n: str(t) for n, t in zip(table.schema.names, table.schema.types, strict=True)},
            kind=FILES,
            task=CLASSIFICATION if ids is not None else "",
            label_column=label_column if ids is not None else "",
            root=root_uri,
        )
        writer.metadata = info.to_metadata()
        writer.write_json(DATASET_INFO, asdict(info))
    return info
