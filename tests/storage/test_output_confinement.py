"""Every output stays where its URI says, whole or not at all: object keys an object store's tools would read
as patterns, a query or a fragment are refused before anything is written (and other unusual keys round-trip
exactly), a URI with no path of its own has no sibling outputs (logs, TensorBoard files, checkpoints), and a
write the file system has no room for is a clear error that leaves nothing at the output."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kftrain import storage
from kftrain.launch.observe import logs_uri, tensorboard_uri
from testbed.s3_server import MotoServer, boto3_client


def keys(moto: MotoServer, bucket_uri: str) -> list[str]:
    bucket = bucket_uri.removeprefix("s3://")
    listing = boto3_client(moto.endpoint).list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in listing.get("Contents", []))


# --------------------------------------------------------------------------------------------------
# Object keys: written and read back exactly, or refused before anything is written


def _artifact(uri: str, tmp_path: Path) -> None:
    with storage.ArtifactWriter(uri) as writer:
        writer.write_json("dataset.json", {"rows": 3})


def _file_inside(uri: str, tmp_path: Path) -> None:
    with storage.ArtifactWriter(uri.rsplit("/", 1)[0] + "/plain") as writer:
        writer.write_bytes(uri.rsplit("/", 1)[1] + ".bin", b"data")


def _upload(uri: str, tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("data")
    storage.upload(tmp_path / "f.txt", uri)


def _checked(uri: str, tmp_path: Path) -> None:
    storage.check_output(uri)


WRITES = {"artifact": _artifact, "a file inside an artifact": _file_inside, "upload": _upload, "check": _checked}
REFUSED = {"qm?/ds": "?", "st*/ds": "*", "ha#/ds": "#", "br[1]/ds": "[", "new\nline/ds": "\n", "v?versionId=1": "?"}


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("name", REFUSED)
def test_object_keys_a_store_tool_would_misread_are_refused_before_writing(
    name: str, write: str, s3_env: str, moto: MotoServer, tmp_path: Path
) -> None:
    uri = f"{s3_env}/{name}"
    with pytest.raises(storage.StorageError, match=re.escape(f"an output's object key cannot hold {REFUSED[name]!r}")):
        WRITES[write](uri, tmp_path)
    assert keys(moto, s3_env) == []


@pytest.mark.parametrize("name", ["sp ace/ds", "pc%41/ds", "plus+/ds", "ütf-8/ds", "semi;colon/ds"])
def test_other_object_keys_round_trip_exactly(name: str, s3_env: str, moto: MotoServer, tmp_path: Path) -> None:
    uri = f"{s3_env}/{name}"
    _artifact(uri, tmp_path)
    assert storage.ArtifactReader(uri).read_json("dataset.json") == {"rows": 3}
    assert keys(moto, s3_env) == [f"{name}/_COMPLETE.json", f"{name}/dataset.json"]


# --------------------------------------------------------------------------------------------------
# What is kept beside an output: only for a URI with a path of its own


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("s3://bkt/", r"'s3://bkt/': names a bucket, not a path inside it: its logs would be written to another "
                      r"bucket \(s3://bkt-logs\)"),
        ("s3://bkt", "names a bucket"),
        ("minio://bkt//", "names a bucket"),
        ("s3://", "names a bucket"),
        ("/", "'/': the root folder has no sibling to keep its logs in"),
        ("//", "the root folder"),
        ("file:///", "the root folder"),
        ("", "no URI"),
        ("s3://bkt/run?1/model", r"cannot hold '\?'"),
    ],
)  # fmt: skip
def test_a_uri_without_a_path_of_its_own_has_no_siblings(uri: str, message: str) -> None:
    with pytest.raises(storage.StorageError, match=message):
        logs_uri(uri)
    with pytest.raises(storage.StorageError):
        tensorboard_uri(uri)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://bkt/runs/model/", "s3://bkt/runs/model-checkpoints"),
        ("minio://bkt/m", "minio://bkt/m-checkpoints"),
        ("models/run1/", "models/run1-checkpoints"),
        ("/tmp/m", "/tmp/m-checkpoints"),
        ("file:///tmp/m/", "file:///tmp/m-checkpoints"),
        (".", os.getcwd() + "-checkpoints"),
        ("/tmp/a/..", "/tmp-checkpoints"),
    ],
)
def test_siblings_are_named_after_their_output(uri: str, expected: str) -> None:
    assert storage.derived_uri(uri, "checkpoints") == expected


# --------------------------------------------------------------------------------------------------
# No room to write: a clear error, and nothing half-written at the output

FULL = textwrap.dedent(
    """
    import os, resource, sys
    from kftrain import storage
    from kftrain.errors import KftrainError
    case, out, source = sys.argv[1:]
    if case == "a prepared dataset's shard":
        import numpy as np, pyarrow as pa, pyarrow.parquet as pq
        from kftrain.steps.prep import prepare_dataset
        rng = np.random.default_rng(0)
        features = {f"f{i}": rng.random(400_000) for i in range(4)}
        pq.write_table(pa.table({**features, "y": np.arange(400_000) % 2}), source)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))  # no file may pass 1 MiB now
    try:
        if case == "a file written whole":
            with storage.ArtifactWriter(out) as writer:
                writer.write_bytes("weights.bin", os.urandom(3 << 20))
        elif case == "a file streamed":
            with storage.ArtifactWriter(out) as writer, writer.open("weights.bin") as handle:
                for _ in range(3):
                    handle.write(os.urandom(1 << 20))
        else:
            prepare_dataset(out, source=source, label_column="y", train_shards=1, shard_bytes=8 << 20)
    except KftrainError as exc:
        print(f"ERROR: {exc}")
        sys.exit(2)
    """
)


@pytest.mark.parametrize("case", ["a file written whole", "a file streamed", "a prepared dataset's shard"])
def test_a_write_with_no_room_fails_clearly_and_publishes_nothing(case: str, tmp_path: Path) -> None:
    script = tmp_path / "full.py"
    script.write_text(FULL)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(script), case, str(out), str(tmp_path / "src.parquet")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"ERROR: {out}: nothing was published: the file is larger than the file system" in done.stdout
    assert "Traceback" not in done.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_a_full_file_system_under_a_library_writing_into_an_artifact_is_said(tmp_path: Path) -> None:
    out = tmp_path / "out"
    full = pytest.raises(storage.StorageError, match=r"out: nothing was published: the file system is full")
    with full, storage.ArtifactWriter(str(out)) as writer:
        writer.write_bytes("config.json", b"{}")
        raise OSError(errno.ENOSPC, "No space left on device")  # as torch.save or a Parquet writer raises it
    assert not out.exists() and not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
