"""Publishing an artifact never costs what was there: an output never replaces what kftrain did not write (a
user's folder, a file, a link, someone else's objects), a re-publication replaces the previous version whole and
only once the new one is complete, staging of dead writers is cleaned (a live writer's never), and on object
storage a writer killed or stopped mid-publication leaves a version readers can read whole.

Local cases run on tmp folders; object-store cases on the session's moto S3 server (testbed/s3_server.py)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kftrain import storage
from kftrain.storage import errors as storage_errors
from testbed.needs import require
from testbed.s3_server import FaultProxy, MotoServer, short_client_backoff
from testbed.storage_harness import publish_local, put_object, snapshot


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
    require("torch")
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


def test_s3_output_over_foreign_objects_is_refused(s3_env: str, moto: MotoServer) -> None:
    put_object(s3_env, moto, "shared/readme.md", b"someone else's")
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


def test_s3_promotion_interrupted_leaves_the_new_version_readable(
    s3_env: str, moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = storage.join(s3_env, "model")
    with storage.ArtifactWriter(uri) as writer:
        writer.write_bytes("a.bin", b"a1")
        writer.write_bytes("old-only.bin", b"o")
    # From here the store answers through a proxy that fails the promotion's second server-side copy (b.bin to its
    # plain path) for good: what a writer stopped in step 2 leaves.
    proxy = FaultProxy(moto.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    short_client_backoff(monkeypatch)
    monkeypatch.setattr(
        storage_errors, "RETRY_POLICY", dataclasses.replace(storage_errors.RETRY_POLICY, attempts=2, initial_s=0.01)
    )
    try:
        second_copy = proxy.inject("PUT", "/model/b.bin", "500", times=1000)
        with pytest.raises(storage.StorageError, match=r"model/b\.bin"), storage.ArtifactWriter(uri) as writer:
            writer.write_bytes("a.bin", b"a2")
            writer.write_bytes("b.bin", b"b2")
        assert second_copy.hits >= 1 and any(r.startswith("PUT") and "/model/a.bin" in r for r in proxy.requests)
        second_copy.times = 0
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
    finally:
        proxy.close()


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
