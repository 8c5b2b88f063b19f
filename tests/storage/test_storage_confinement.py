"""Nothing is written or read outside an artifact's folder, and nothing read that its marker does not vouch for:
relative paths and links confined, a marker's own paths and fields checked, a dataset read only as listed, and
copies and downloads checked file by file, claiming nothing when one is damaged. Every refusal names the file (or
key) and leaves the destination as it was.

Local cases run on tmp folders; object-store cases on the session's moto S3 server (testbed/s3_server.py)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kftrain import storage
from kftrain.data import dataset as datasets
from testbed.s3_server import MotoServer, boto3_client
from testbed.storage_harness import publish_local, put_object, rewrite_marker, snapshot


@pytest.mark.parametrize(
    "relpath",
    ["../escaped.bin", "/tmp/absolute.bin", "a/../../escaped.bin", "a//b", "./a", "a/.", "", "x\0y", "_COMPLETE.json"],
)
def test_writer_relpaths_stay_inside(relpath: str, tmp_path: Path) -> None:
    out = tmp_path / "sub" / "artifact"
    before = snapshot(tmp_path)
    with pytest.raises(storage.StorageError) as exc, storage.ArtifactWriter(str(out)) as writer:
        writer.write_bytes(relpath, b"payload")
    assert repr(relpath)[1:-1] in str(exc.value) or relpath == "_COMPLETE.json"
    assert snapshot(tmp_path) == before
    assert not Path("/tmp/absolute.bin").exists()


def test_writer_relpath_through_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with (
        pytest.raises(storage.StorageError, match="through a symbolic link"),
        storage.ArtifactWriter(str(tmp_path / "artifact")) as writer,
    ):
        os.symlink(outside, writer.path_for("lib"))  # a library made a link inside the staging folder
        writer.write_bytes("lib/payload.bin", b"x")
    assert list(outside.iterdir()) == []


MARKER_EDITS = {
    "parent path": (lambda d: d["files"].update({"../../etc/hostname": d["files"].pop("a.bin")}), "'..' part"),
    "absolute path": (lambda d: d["files"].update({"/etc/hostname": d["files"].pop("a.bin")}), "is absolute"),
    "not a marker": (lambda d: d.clear(), "not a completion marker kftrain wrote"),
    "bad checksum field": (lambda d: d["files"]["a.bin"].update(sha256="xyz"), "needs a size"),
    "negative size": (lambda d: d["files"]["a.bin"].update(size=-1), "needs a size"),
    "staged elsewhere": (lambda d: d.update(staged="../other"), "'staged' must name a sibling"),
}


@pytest.mark.parametrize("case", list(MARKER_EDITS))
def test_marker_paths_and_fields_are_checked(case: str, tmp_path: Path) -> None:
    edit, fragment = MARKER_EDITS[case]
    art = tmp_path / "art"
    publish_local(art, {"a.bin": b"a"})
    rewrite_marker(art, edit)
    for read in (
        lambda: storage.require_complete(str(art), verify=True),
        lambda: storage.ArtifactReader(str(art)),
        lambda: storage.download(str(art), tmp_path / "copy"),
    ):
        with pytest.raises(storage.StorageError, match=fragment):
            read()
    assert not (tmp_path / "copy").exists()


def test_a_listed_symbolic_link_out_of_the_artifact_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"host secret\n")
    art = tmp_path / "art"
    publish_local(art, {"a.bin": b"a"})
    (art / "leak").symlink_to(secret)
    rewrite_marker(
        art, lambda d: d["files"].update(leak={"size": 12, "sha256": hashlib.sha256(b"host secret\n").hexdigest()})
    )
    with pytest.raises(storage.StorageError, match="leads outside"):
        storage.ArtifactReader(str(art)).read_bytes("leak")


def _dataset(tmp_path: Path) -> Path:
    out = tmp_path / "dataset"
    table = pa.table({"f0": np.arange(4, dtype=np.float32), "label": np.array([0, 1, 0, 1], dtype=np.int64)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    info = {
        "source": "test",
        "num_features": 1,
        "num_classes": 2,
        "feature_names": ["f0"],
        "classes": [0, 1],
        "rows": {"train": 4},
        "shards": {"train": ["train/part-00000-of-00001.parquet"]},
        "seed": 0,
    }
    with storage.ArtifactWriter(str(out)) as writer:
        writer.write_bytes("train/part-00000-of-00001.parquet", sink.getvalue().to_pybytes())
        writer.write_json(datasets.DATASET_INFO, info)
    return out


def _edit_dataset_info(out: Path, edit: Callable[[dict], None]) -> None:
    """Rewrite dataset.json and its marker entry (as an attacker who can write the marker would)."""
    path = out / datasets.DATASET_INFO
    info = json.loads(path.read_text())
    edit(info)
    data = json.dumps(info).encode()
    path.write_bytes(data)
    rewrite_marker(
        out,
        lambda d: d["files"].update(
            {datasets.DATASET_INFO: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}
        ),
    )


DATASET_FAULTS = {
    "shard path with ..": (
        lambda out: _edit_dataset_info(out, lambda i: i["shards"].update(train=["../../secret.parquet"])),
        "'..' part",
    ),
    "shard not in the marker": (
        lambda out: _edit_dataset_info(out, lambda i: i["shards"].update(train=["train/other.parquet"])),
        "is not a file of this artifact",
    ),
    "tampered shard, same size": (
        lambda out: (out / "train/part-00000-of-00001.parquet").write_bytes(
            bytes(b ^ 1 for b in (out / "train/part-00000-of-00001.parquet").read_bytes())
        ),
        r"part-00000-of-00001.parquet: checksum mismatch \(expected sha256",
    ),
    "truncated shard": (
        lambda out: (out / "train/part-00000-of-00001.parquet").write_bytes(b"PAR1"),
        r"part-00000-of-00001.parquet: checksum mismatch \(4 bytes",
    ),
    "dataset.json not a description": (
        lambda out: _edit_dataset_info(out, lambda i: i.update(unexpected=1)),
        "not a dataset description",
    ),
}


# Both ways a split is read: whole (trainers), or streamed in batches (evaluation, export).
DATASET_READERS: dict[str, Callable[[str], Any]] = {
    "load_split": lambda uri: datasets.load_split(uri, "train")[0],
    "iter_batches": lambda uri: np.concatenate([x for x, _ in datasets.iter_batches(uri, "train", batch_rows=3)]),
}


@pytest.mark.parametrize("reader", list(DATASET_READERS))
@pytest.mark.parametrize("case", list(DATASET_FAULTS))
def test_dataset_reader_reads_only_what_the_marker_vouches_for(case: str, reader: str, tmp_path: Path) -> None:
    out = _dataset(tmp_path)
    read = DATASET_READERS[reader]
    assert read(str(out)).shape == (4, 1)
    fault, fragment = DATASET_FAULTS[case]
    fault(out)
    with pytest.raises((storage.StorageError, datasets.DataValidationError), match=fragment):
        read(str(out))


COPY_FAULTS = {
    "listed file deleted": (lambda art: (art / "b.bin").unlink(), "b.bin: listed in its _COMPLETE.json but missing"),
    "file changed, same size": (lambda art: (art / "b.bin").write_bytes(b"B" * 100), r"b.bin: checksum mismatch"),
    "file truncated": (lambda art: (art / "b.bin").write_bytes(b"b"), r"b.bin: checksum mismatch \(1 bytes"),
}


@pytest.mark.parametrize("case", list(COPY_FAULTS))
def test_download_of_a_damaged_artifact_fails_and_claims_nothing(case: str, tmp_path: Path) -> None:
    fault, fragment = COPY_FAULTS[case]
    art = tmp_path / "art"
    publish_local(art, {"a.bin": b"a" * 100, "b.bin": b"b" * 100})
    fault(art)
    dst = tmp_path / "downloaded"
    with pytest.raises(storage.StorageError, match=fragment):
        storage.download(str(art), dst)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]  # no copy, no marker, no staging


def test_copy_takes_only_the_listed_files(tmp_path: Path) -> None:
    art = tmp_path / "art"
    publish_local(art, {"a.bin": b"a"})
    (art / "stray.tmp").write_bytes(b"not part of it")
    copied = storage.copy(str(art), str(tmp_path / "copy"))
    assert sorted(copied) == ["_COMPLETE.json", "a.bin"]
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["_COMPLETE.json", "a.bin"]


def test_zip_slip_key_is_refused_and_nothing_is_written(s3_env: str, moto: MotoServer, tmp_path: Path) -> None:
    put_object(s3_env, moto, "tree/ok.txt", b"ok")
    put_object(s3_env, moto, "tree/x/../../NAME", b"evil")
    dst = tmp_path / "deep" / "dst"
    before = snapshot(tmp_path)
    with pytest.raises(storage.StorageError, match=r"'x/\.\./\.\./NAME' has an empty, '\.' or '\.\.' part"):
        storage.download(storage.join(s3_env, "tree"), dst)
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "NAME").exists() and not (tmp_path / "deep" / "NAME").exists()


def test_s3_marker_with_a_path_outside_is_refused(s3_env: str, tmp_path: Path) -> None:
    art = tmp_path / "art"
    publish_local(art, {"a.bin": b"a"})
    rewrite_marker(art, lambda d: d["files"].update({"../secret": d["files"].pop("a.bin")}))
    remote = storage.join(s3_env, "art")
    storage.upload(str(art / "a.bin"), storage.join(remote, "a.bin"))
    storage.upload(str(art / storage.COMPLETE_MARKER), storage.join(remote, storage.COMPLETE_MARKER))
    with pytest.raises(storage.StorageError, match=r"'\.\.' part"):
        storage.require_complete(remote, verify=True)


def test_s3_download_of_a_damaged_artifact_claims_nothing(s3_env: str, moto: MotoServer, tmp_path: Path) -> None:
    uri = storage.join(s3_env, "art")
    with storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("a.bin", b"a")
        writer.write_bytes("b.bin", b"b")
    boto3_client(moto.endpoint).delete_object(Bucket=s3_env.removeprefix("s3://"), Key="art/b.bin")
    with pytest.raises(storage.StorageError, match=r"b\.bin: listed in its _COMPLETE\.json but missing"):
        storage.download(uri, tmp_path / "copy")
    assert list(tmp_path.iterdir()) == []
    put_object(s3_env, moto, "art/b.bin", b"B")  # same size, other bytes
    with pytest.raises(storage.StorageError, match=r"b\.bin: checksum mismatch"):
        storage.download(uri, tmp_path / "copy")
    assert list(tmp_path.iterdir()) == []
