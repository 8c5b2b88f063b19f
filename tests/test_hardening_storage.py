"""Storage under bad inputs and faults: nothing lost, nothing written or read outside its folder, nothing
read that its marker does not vouch for, and a re-publication that never costs the previous version.

Local cases run on tmp folders; object-store cases on the session's moto S3 server (tests/s3_server.py).
Every refusal must name the file (or key) and leave the destination as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kftrain import storage
from kftrain.data import dataset as datasets
from kftrain.storage import publish

try:
    from s3_server import MotoServer, boto3_client, moto, s3_env
except ImportError:  # tests/ imported as a package
    from tests.s3_server import MotoServer, boto3_client, moto, s3_env  # noqa: F401  # fixtures


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (and beside it) by path, with the SHA-256 of its content."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def publish_local(out: Path, files: dict[str, bytes], metadata: dict | None = None) -> None:
    with storage.ArtifactWriter(str(out), metadata=metadata or {}) as writer:
        for rel, data in files.items():
            writer.write_bytes(rel, data)


def rewrite_marker(artifact: Path, edit: Callable[[dict], None]) -> None:
    marker = artifact / storage.COMPLETE_MARKER
    doc = json.loads(marker.read_text())
    edit(doc)
    marker.write_text(json.dumps(doc))


# --------------------------------------------------------------------------------------------------
# Outputs never delete what they did not write


def _user_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "train.py").write_text("print('my code')\n")
    (folder / "src" / "model.py").write_text("# mine\n")
    return folder


def _previous_artifact_plus_user_file(tmp_path: Path) -> Path:
    out = tmp_path / "model"
    publish_local(out, {"weights.bin": b"v1"})
    (out / "notes.txt").write_text("my notes, next to the model\n")
    return out


def _a_file(tmp_path: Path) -> Path:
    path = tmp_path / "results.csv"
    path.write_text("a,b\n1,2\n")
    return path


def _a_link(tmp_path: Path) -> Path:
    target = _user_folder(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(target)
    return link


REFUSED_OUTPUTS = {
    "model-dir-dot (a user's project folder)": (_user_folder, "not empty and not a kftrain artifact"),
    "previous artifact plus a user's file": (_previous_artifact_plus_user_file, "holds 'notes.txt', which is not part"),
    "an existing file": (_a_file, "exists and is not a folder"),
    "a symbolic link to a folder": (_a_link, "is a symbolic link"),
}


@pytest.mark.parametrize("case", list(REFUSED_OUTPUTS))
def test_output_never_replaces_what_it_did_not_write(case: str, tmp_path: Path, monkeypatch) -> None:
    make, fragment = REFUSED_OUTPUTS[case]
    src = tmp_path / "src"
    publish_local(src, {"x.bin": b"x"})
    target = make(tmp_path)
    before = snapshot(tmp_path)
    monkeypatch.chdir(target if target.is_dir() and not target.is_symlink() else tmp_path)
    uri = "." if target.is_dir() and not target.is_symlink() else str(target)  # `--model-dir .`
    with pytest.raises(storage.StorageError, match=fragment):  # checked up front, reading only
        storage.check_output(uri)
    with pytest.raises(storage.StorageError, match=fragment) as exc:
        storage.ArtifactWriter(uri)
    assert "\n" not in str(exc.value)
    assert snapshot(tmp_path) == before  # nothing lost, nothing created (no staging left beside it)
    with pytest.raises(storage.StorageError, match=fragment):  # a copy to it is refused the same way
        storage.copy(str(src), uri)
    assert snapshot(tmp_path) == before


def test_trainer_model_dir_dot_keeps_the_project(tmp_path: Path, monkeypatch) -> None:
    """The reported case end to end: a model written with ``--model-dir .`` from a project folder."""
    pytest.importorskip("torch")
    from kftrain.models import pytorch as torch_models

    project = _user_folder(tmp_path)
    before = snapshot(tmp_path)
    monkeypatch.chdir(project)
    config = torch_models.MLPConfig(num_features=4, num_classes=2, hidden=[3])
    with pytest.raises(storage.StorageError, match="not empty and not a kftrain artifact"):
        torch_models.write_model(".", torch_models.MLP(config), config, [0, 1], list("abcd"), {})
    assert snapshot(tmp_path) == before


def test_every_trainer_refuses_model_dir_dot_before_it_trains(tmp_path: Path, monkeypatch, capsys) -> None:
    """The shared parser checks the output at start: no training is spent on a model it cannot publish."""
    from kftrain.programs.common import trainer_parser

    project = _user_folder(tmp_path)
    monkeypatch.chdir(project)
    parser = trainer_parser(None, epochs=1, lr=0.1)
    with pytest.raises(SystemExit) as ended:
        parser.parse_args(["--dataset", "d", "--model-dir", "."])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "argument --model-dir: " in err and "not empty and not a kftrain artifact (it holds 'src/model.py'" in err
    assert parser.parse_args(["--dataset", "d", "--model-dir", str(tmp_path / "new")]).model_dir == str(
        tmp_path / "new"
    )


def test_previous_artifact_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "model"
    publish_local(out, {"old-only.bin": b"1", "shared.bin": b"v1"})
    publish_local(out, {"shared.bin": b"v2", "new.bin": b"n"})
    assert sorted(p.name for p in out.iterdir()) == ["_COMPLETE.json", "new.bin", "shared.bin"]
    assert (out / "shared.bin").read_bytes() == b"v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging or old copy left beside it
    storage.require_complete(str(out), verify=True)


def test_empty_folder_and_empty_placeholder_file_are_fine(tmp_path: Path) -> None:
    (tmp_path / "kfp-made").mkdir()  # KFP creates an output's folder empty
    publish_local(tmp_path / "kfp-made", {"a": b"a"})
    (tmp_path / "placeholder").write_bytes(b"")
    publish_local(tmp_path / "placeholder", {"a": b"a"})
    storage.require_complete(str(tmp_path / "placeholder"), verify=True)


# --------------------------------------------------------------------------------------------------
# Nothing escapes its folder


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


# --------------------------------------------------------------------------------------------------
# Copies are checked, and a copy of an incomplete artifact claims nothing


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


# --------------------------------------------------------------------------------------------------
# Staging of dead writers is cleaned; a live writer's never is


_HOLD_WRITER = """
import sys, time
from kftrain import storage
writer = storage.ArtifactWriter(sys.argv[1])
writer.write_bytes("half.bin", b"x" * 1000)
print("writing", flush=True)
time.sleep(300)
"""


def _writer_process(out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_WRITER, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    return proc


def test_stale_staging_of_a_killed_writer_is_cleaned_and_a_live_one_kept(tmp_path: Path) -> None:
    out = tmp_path / "model"
    dead = _writer_process(out)
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    (stale,) = [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    live = _writer_process(out)
    try:
        (alive,) = [p for p in tmp_path.iterdir() if ".partial-" in p.name and p != stale]
        publish_local(out, {"a.bin": b"a"})
        assert not stale.exists()  # its writer is dead: removed
        assert (alive / "half.bin").exists()  # its writer still writes: kept
    finally:
        live.kill()
        live.wait()
    publish_local(out, {"a.bin": b"b"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


# --------------------------------------------------------------------------------------------------
# Object storage: keys from a listing, and the publish protocol


def _put(s3_env: str, moto: MotoServer, key: str, body: bytes) -> None:
    boto3_client(moto.endpoint).put_object(Bucket=s3_env.removeprefix("s3://"), Key=key, Body=body)


def test_zip_slip_key_is_refused_and_nothing_is_written(s3_env: str, moto: MotoServer, tmp_path: Path) -> None:
    _put(s3_env, moto, "tree/ok.txt", b"ok")
    _put(s3_env, moto, "tree/x/../../NAME", b"evil")
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


def test_s3_output_over_foreign_objects_is_refused(s3_env: str, moto: MotoServer) -> None:
    _put(s3_env, moto, "shared/readme.md", b"someone else's")
    with pytest.raises(storage.StorageError, match="not empty and not a kftrain artifact"):
        storage.ArtifactWriter(storage.join(s3_env, "shared"))
    assert storage.read_bytes(storage.join(s3_env, "shared", "readme.md")) == b"someone else's"


_KILLED_REPUBLISH = """
import sys
from kftrain import storage
def progress(n):
    print("uploading", flush=True)
with storage.ArtifactWriter(sys.argv[1]) as writer:
    writer.write_bytes("info.json", b'{"version": 2}')
    writer.add(sys.argv[2], "weights.bin", progress=progress)
print("finished", flush=True)
"""


def test_s3_writer_killed_while_republishing_loses_nothing(s3_env: str, tmp_path: Path) -> None:
    uri = storage.join(s3_env, "model")
    with storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("info.json", b'{"version": 1}')
        writer.write_bytes("weights.bin", b"v1" * 1000)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(12 << 20))
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_REPUBLISH, uri, str(big)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "uploading"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    storage.require_complete(uri, verify=True)  # the previous version, whole
    reader = storage.ArtifactReader(uri)
    assert reader.read_json("info.json") == {"version": 1}
    assert reader.read_bytes("weights.bin") == b"v1" * 1000


def test_s3_promotion_interrupted_leaves_the_new_version_readable(s3_env: str, monkeypatch) -> None:
    uri = storage.join(s3_env, "model")
    with storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("a.bin", b"a1")
        writer.write_bytes("old-only.bin", b"o")
    real_copy = publish._ObjectDestination._server_copy
    copies: list[str] = []

    def die_after_one(src: str, dst: str) -> None:
        if copies:
            raise KeyboardInterrupt("killed between two copies")  # what a writer killed in step 2 leaves
        copies.append(dst)
        real_copy(src, dst)

    monkeypatch.setattr(publish._ObjectDestination, "_server_copy", staticmethod(die_after_one))
    with pytest.raises(KeyboardInterrupt), storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("a.bin", b"a2")
        writer.write_bytes("b.bin", b"b2")
    monkeypatch.setattr(publish._ObjectDestination, "_server_copy", staticmethod(real_copy))
    # The plain paths are half old, half new; the marker points readers at the whole new version.
    reader = storage.ArtifactReader(uri)
    assert reader.root != uri and ".partial-" in reader.root
    assert sorted(reader.files) == ["a.bin", "b.bin"]
    assert (reader.read_bytes("a.bin"), reader.read_bytes("b.bin")) == (b"a2", b"b2")
    storage.require_complete(uri, verify=True)
    # The next writer publishes over it and cleans up both the dead writer's staging and old-only.bin.
    with storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("a.bin", b"a3")
    assert storage.list_files(uri) == ["_COMPLETE.json", "a.bin"]
    assert [p for p in storage.list_files(s3_env) if ".partial-" in p] == []
    assert storage.ArtifactReader(uri).read_bytes("a.bin") == b"a3"


def test_s3_reader_never_mixes_two_versions(s3_env: str) -> None:
    uri = storage.join(s3_env, "model")
    with storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("config.json", b'{"v": 1}')
        writer.write_bytes("weights.bin", b"1" * 10)
    reader = storage.ArtifactReader(uri)
    assert reader.read_bytes("config.json") == b'{"v": 1}'
    with storage.ArtifactWriter(uri) as writer:  # re-published between two reads
        writer.write_bytes("config.json", b'{"v": 2}')
        writer.write_bytes("weights.bin", b"2" * 20)
    with pytest.raises(storage.StorageError, match="re-published while being read"):
        reader.read_bytes("weights.bin")
    fresh = storage.ArtifactReader(uri)
    assert (fresh.read_bytes("config.json"), fresh.read_bytes("weights.bin")) == (b'{"v": 2}', b"2" * 20)


def test_s3_republish_removes_the_old_versions_files(s3_env: str) -> None:
    uri = storage.join(s3_env, "export")
    with storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("digits/1/model.pt", b"v1")
        writer.write_bytes("digits/config.pbtxt", b"cfg")
    with storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("digits/1/model.onnx", b"v2")
    assert storage.list_files(uri) == ["_COMPLETE.json", "digits/1/model.onnx"]
    assert storage.read_bytes(storage.join(uri, "digits/1/model.onnx")) == b"v2"  # at its plain path
    storage.require_complete(uri, verify=True)


def test_s3_download_of_a_damaged_artifact_claims_nothing(s3_env: str, moto: MotoServer, tmp_path: Path) -> None:
    uri = storage.join(s3_env, "art")
    with storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("a.bin", b"a")
        writer.write_bytes("b.bin", b"b")
    boto3_client(moto.endpoint).delete_object(Bucket=s3_env.removeprefix("s3://"), Key="art/b.bin")
    with pytest.raises(storage.StorageError, match=r"b\.bin: listed in its _COMPLETE\.json but missing"):
        storage.download(uri, tmp_path / "copy")
    assert list(tmp_path.iterdir()) == []
    _put(s3_env, moto, "art/b.bin", b"B")  # same size, other bytes
    with pytest.raises(storage.StorageError, match=r"b\.bin: checksum mismatch"):
        storage.download(uri, tmp_path / "copy")
    assert list(tmp_path.iterdir()) == []
