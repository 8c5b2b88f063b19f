"""Checkpoints published in the background (kftrain.programs.checkpoint.Checkpointer): training goes on while
they upload, at most ``max_in_flight`` at a time, upload errors reach the trainer, a process killed
mid-upload leaves the newest complete checkpoint to resume from, and to an object store (the S3 test server)
the upload runs in a child process from a local spool."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from kftrain import storage
from kftrain.programs import checkpoint
from kftrain.programs.checkpoint import SPOOL_ENV, Checkpointer, CheckpointError, latest_checkpoint
from kftrain.programs.global_batch import SamplerPosition
from testbed.polling import wait_until
from testbed.s3_server import set_s3_env


def gated(release: threading.Event, started: threading.Event | None = None, name: str = "state.bin"):
    def write(w: storage.ArtifactWriter) -> None:
        if started is not None:
            started.set()
        assert release.wait(30), "never released"
        w.write_bytes(name, b"weights")

    return write


def test_a_checkpoint_uploads_while_the_caller_goes_on(tmp_path):
    root = str(tmp_path / "ckpt")
    release = threading.Event()
    saver = Checkpointer(root, keep=3, max_in_flight=1)
    saver.save(10, gated(release))  # returns at once: the upload waits for `release`
    assert latest_checkpoint(root) is None
    release.set()
    saver.wait()
    assert latest_checkpoint(root) == (10, checkpoint.checkpoint_uri(root, 10))
    assert storage.read_json(storage.join(checkpoint.checkpoint_uri(root, 10), storage.COMPLETE_MARKER))


def test_at_most_max_in_flight_checkpoints_wait_or_upload(tmp_path):
    root = str(tmp_path / "ckpt")
    release, started = threading.Event(), threading.Event()
    saver = Checkpointer(root, keep=1, max_in_flight=1)
    saver.save(10, gated(release, started))
    assert started.wait(30)
    second_returned = threading.Event()

    def second() -> None:
        saver.save(20, gated(release))
        second_returned.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert not second_returned.wait(0.5)  # the second save waits for the first upload's slot
    release.set()
    thread.join(30)
    assert second_returned.is_set()
    saver.wait()
    assert [step for step, _ in checkpoint.complete_checkpoints(root)] == [20]  # published in order, pruned to 1
    assert saver.waited_s > 0


def test_an_upload_error_reaches_the_trainer(tmp_path):
    root = str(tmp_path / "ckpt")

    def broken(w: storage.ArtifactWriter) -> None:
        raise OSError("bucket is gone")

    saver = Checkpointer(root, keep=3, max_in_flight=2)
    saver.save(10, broken)
    with pytest.raises(CheckpointError, match=r"checkpoint upload to .*ckpt failed: bucket is gone"):
        saver.wait()
    with pytest.raises(CheckpointError, match="bucket is gone"):
        saver.save(20, gated(threading.Event()))
    assert latest_checkpoint(root) is None  # nothing half-written looks complete


def test_max_in_flight_zero_saves_synchronously(tmp_path):
    root = str(tmp_path / "ckpt")
    saver = Checkpointer(root, keep=3, max_in_flight=0)
    saver.save(5, lambda w: w.write_bytes("state.bin", b"x"))
    assert latest_checkpoint(root) == (5, checkpoint.checkpoint_uri(root, 5))


@pytest.mark.parametrize("store", ["local", "s3"])
def test_the_snapshot_is_taken_when_save_returns(tmp_path, store, request):
    """Training changes the weights right after save(): the checkpoint holds them as they were."""
    import torch

    from kftrain.programs.torch_common import latest_uri, restore, save_checkpoint

    root = str(tmp_path / "ckpt") if store == "local" else f"{request.getfixturevalue('s3_env')}/ckpt"
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with Checkpointer(root, keep=3, max_in_flight=1) as saver:
        save_checkpoint(saver, 7, SamplerPosition(1, 4), model, opt)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    fresh = torch.nn.Linear(3, 2)
    step, position = restore(latest_uri(root), fresh, torch.optim.SGD(fresh.parameters(), lr=0.1))
    assert (step, position) == (7, SamplerPosition(1, 4))
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, before[key]), key


CHILD = textwrap.dedent(
    """
    import sys, threading
    from kftrain.programs.checkpoint import Checkpointer
    root = sys.argv[1]
    saver = Checkpointer(root, keep=3, max_in_flight=1)
    saver.save(10, lambda w: w.write_bytes("state.bin", b"complete"))
    saver.wait()

    def stuck(w):
        w.write_bytes("state.bin", b"half")
        print("uploading 20", flush=True)
        threading.Event().wait()

    saver.save(20, stuck)
    saver.wait()
    """
)


def test_a_replica_killed_mid_upload_resumes_from_the_newest_complete_checkpoint(tmp_path):
    root = str(tmp_path / "ckpt")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, root], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "uploading 20\n"  # ckpt-20 is being written
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)
    assert latest_checkpoint(root) == (10, checkpoint.checkpoint_uri(root, 10))
    assert any("ckpt-0000000020" in p.name for p in Path(root).iterdir())  # its partial files are there, ignored


def test_to_an_object_store_the_checkpoint_is_spooled_locally_and_uploaded_by_a_child_process(
    tmp_path,
    s3_env,
    monkeypatch,
):
    monkeypatch.setenv(SPOOL_ENV, str(tmp_path / "spool"))
    (tmp_path / "spool").mkdir()
    root = f"{s3_env}/ckpt"
    written_to: list[str] = []

    def write(w: storage.ArtifactWriter) -> None:
        written_to.append(w.uri)
        w.write_bytes("state.bin", b"weights")

    with Checkpointer(root, keep=1, max_in_flight=1) as saver:
        saver.save(10, write)
        saver.save(20, write)
    # The trainer's thread wrote to the local spool; only the child process can have put them in the bucket.
    assert [Path(uri).parent.parent for uri in written_to] == [tmp_path / "spool"] * 2
    assert latest_checkpoint(root) == (20, checkpoint.checkpoint_uri(root, 20))
    assert [step for step, _ in checkpoint.complete_checkpoints(root)] == [20]  # pruned to keep=1
    uri = checkpoint.checkpoint_uri(root, 20)
    assert storage.read_bytes(storage.join(uri, "state.bin")) == b"weights"
    assert storage.require_complete(uri)["metadata"] == {"step": 20}
    assert list((tmp_path / "spool").iterdir()) == []  # spools removed


def test_a_child_upload_that_fails_reaches_the_trainer(tmp_path, s3_env):
    root = f"s3://no-such-bucket-{tmp_path.name[-8:].lower().replace('_', '-')}/ckpt"
    saver = Checkpointer(root, keep=3, max_in_flight=1)
    saver.save(10, lambda w: w.write_bytes("state.bin", b"x"))
    with pytest.raises(CheckpointError, match=rf"uploading {root}/ckpt-0000000010 failed: .+"):
        saver.wait()


TRAINER_THEN_STUCK_UPLOAD = textwrap.dedent(
    """
    import sys, threading
    from kftrain.programs.checkpoint import Checkpointer
    Checkpointer(sys.argv[1], keep=3, max_in_flight=1).save(10, lambda w: w.write_bytes("state.bin", b"x"))
    threading.Event().wait()
    """
)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie waiting for whoever adopted it to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel ends the child on Linux only")
def test_a_child_upload_ends_with_its_trainer_and_removes_the_spool(tmp_path, monkeypatch):
    """A trainer killed mid-upload: its child must not complete that checkpoint behind a restarted replica."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts connections, never answers
        set_s3_env(monkeypatch, f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setenv(SPOOL_ENV, str(tmp_path))
        trainer = subprocess.Popen([sys.executable, "-c", TRAINER_THEN_STUCK_UPLOAD, "s3://bucket/ckpt"])
        try:
            wait_until(lambda: bool(_children(trainer.pid)), 60, "the upload child to start")
            (uploader,) = _children(trainer.pid)
            assert "upload_from_spool" in Path(f"/proc/{uploader}/cmdline").read_text()
            assert len(list(tmp_path.iterdir())) == 1  # the spool
            silent.settimeout(60)
            connection, _ = silent.accept()  # the child is uploading
            trainer.kill()
            trainer.wait(30)
            # The kernel signals the child as the trainer ends; the bound is for a busy machine, not a timing.
            wait_until(lambda: _gone(uploader), 30, "the upload to end with its trainer")
            connection.close()
        finally:
            trainer.kill()
    assert list(tmp_path.iterdir()) == []
