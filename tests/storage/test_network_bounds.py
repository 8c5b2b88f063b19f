"""Every network call is bounded: an object store or a KFP API server that accepts connections and never
answers is a clear error in seconds here (timeouts shortened to :data:`TIMEOUT_S`), not a silent hang; and a host
given with credentials (``https://user:pass@host``) is never printed with them."""

from __future__ import annotations

import argparse
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kfp
import pytest

from kftrain import storage
from kftrain.cli.kfp import add_commands, connection
from kftrain.errors import KftrainError, redact_urls
from kftrain.retry import RetryPolicy, call_with_retry
from kftrain.storage import uri
from kftrain.storage.errors import storage_error
from testbed.fake_kfp import FakeKFP
from testbed.s3_server import set_s3_env, short_client_backoff

SAFETY_S = 120  # only against a hang: every call here ends in a few seconds
# The connect and read timeouts here: a server that never answers outlasts any of them, so the shortest one the
# clients take keeps each case short (a connect that the busy machine delays past it is a timeout all the same).
TIMEOUT_S = 0.2


@contextmanager
def silent_server() -> Iterator[str]:
    """``http://127.0.0.1:PORT``: accepts every connection, reads nothing, never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    address = listener.getsockname()
    try:
        yield f"http://127.0.0.1:{address[1]}"
    finally:
        stop.set()
        # Closing the listener does not wake a thread blocked in its accept(): one more connection does, and the
        # thread then sees `stop` and ends at once (else the join below would wait its whole timeout).
        socket.create_connection(address, timeout=5).close()
        thread.join(5)
        assert not thread.is_alive(), "the silent server's accept thread did not end"
        listener.close()
        for conn in held:
            conn.close()


def bounded(call: Callable[[], Any]) -> BaseException:
    """The error ``call`` ends with, run in a thread so that a hang fails the test instead of blocking it."""
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # what the test inspects
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(SAFETY_S)
    assert not worker.is_alive(), f"still waiting after {SAFETY_S}s"
    assert outcome, "no error from a server that never answers"
    return outcome[0]


# --------------------------------------------------------------------------------------------------
# Object storage


@pytest.fixture
def silent_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with silent_server() as endpoint:
        set_s3_env(monkeypatch, endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # one attempt in all: botocore retries nothing
        short_client_backoff(monkeypatch)
        monkeypatch.setattr(uri, "CONNECT_TIMEOUT_S", TIMEOUT_S)
        monkeypatch.setattr(uri, "READ_TIMEOUT_S", TIMEOUT_S)
        yield "s3://bucket"


def _write_artifact(root: str, tmp_path: Path) -> None:
    with storage.ArtifactWriter(f"{root}/model") as writer:
        writer.write_bytes("weights.bin", b"w")


def _upload(root: str, tmp_path: Path) -> None:
    (tmp_path / "small.bin").write_bytes(b"x" * 1000)  # one PUT, sent with "Expect: 100-continue"
    storage.upload(tmp_path / "small.bin", f"{root}/small.bin")


STORE_CALLS: dict[str, Callable[[str, Path], Any]] = {
    "exists": lambda root, tmp_path: storage.exists(f"{root}/x"),
    "read": lambda root, tmp_path: storage.read_bytes(f"{root}/x"),
    "list": lambda root, tmp_path: storage.list_files(f"{root}/x"),
    "download": lambda root, tmp_path: storage.download(f"{root}/x", tmp_path / "x"),
    "publish": _write_artifact,
    "upload": _upload,
}


@pytest.mark.parametrize("call", STORE_CALLS)
def test_a_store_that_never_answers_is_an_error_in_seconds(call: str, silent_store: str, tmp_path: Path) -> None:
    error = bounded(lambda: STORE_CALLS[call](silent_store, tmp_path))
    assert isinstance(error, storage.StorageError), repr(error)
    assert "the store did not answer within its timeouts" in str(error) or "did not take it in" in str(error)
    assert not (tmp_path / "x").exists()


# --------------------------------------------------------------------------------------------------
# The KFP API server


@pytest.fixture
def kfp_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., int]:
    monkeypatch.setattr(kfp.client.client.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    for var in (connection.ENV_HOST, connection.ENV_NAMESPACE, connection.ENV_TOKEN):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(connection, "CONNECT_TIMEOUT_S", TIMEOUT_S)
    monkeypatch.setattr(connection, "REQUEST_DEADLINE_S", TIMEOUT_S)

    def run(*argv: str) -> int:
        parser = argparse.ArgumentParser(prog="kftrain")
        add_commands(parser.add_subparsers(dest="command_name", required=True))
        args = parser.parse_args(list(argv))
        return int(args.func(args))

    return run


@pytest.mark.parametrize("namespace", [[], ["--namespace", "team-a"]], ids=["healthz first", "straight to work"])
def test_a_kfp_server_that_never_answers_is_an_error_in_seconds(
    namespace: list[str], kfp_cli: Callable[..., int]
) -> None:
    with silent_server() as url:
        host = url.replace("http://", "http://alice:hunter2@")
        error = bounded(lambda: kfp_cli("submit", "pytorch-digits", "--host", host, *namespace))
    assert isinstance(error, KftrainError), repr(error)
    assert "cannot reach the KFP API server at http://***@127.0.0.1" in str(error)
    assert "did not answer in time" in str(error)
    assert "hunter2" not in str(error) and "alice" not in str(error)


def test_a_host_with_credentials_is_never_printed_with_them(
    kfp_cli: Callable[..., int], capsys: pytest.CaptureFixture[str]
) -> None:
    server = FakeKFP().start()
    try:
        host = server.url.replace("http://", "http://alice:hunter2@")
        assert kfp_cli("submit", "pytorch-digits", "--host", host, "--namespace", "ns") == 0
    finally:
        server.stop()
    printed = capsys.readouterr()
    assert "created run" in printed.out and "http://***@127.0.0.1" in printed.out
    assert "hunter2" not in printed.out + printed.err


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://alice:hunter2@kfp.example.com/#/runs", "https://***@kfp.example.com/#/runs"),
        ("at http://token@10.0.0.1:8888: refused", "at http://***@10.0.0.1:8888: refused"),
        ("s3://bucket/key@2", "s3://bucket/key@2"),  # an @ in a path is not userinfo
        ("no url here: a@b", "no url here: a@b"),
        ("two: http://a:b@x and https://c:d@y/", "two: http://***@x and https://***@y/"),
        ("https://alice:p@ss@store:9000/b", "https://***@store:9000/b"),  # the userinfo ends at the last @
        ("http://a:b@x/key@2", "http://***@x/key@2"),  # ...of the authority: not one in the path
    ],
)
def test_credentials_in_urls_are_redacted(text: str, shown: str) -> None:
    assert redact_urls(text) == shown


def test_errors_and_retry_warnings_never_print_a_urls_credentials(caplog: pytest.LogCaptureFixture) -> None:
    failure = ConnectionError("Could not connect to the endpoint URL: http://alice:hunter2@minio:9000/bkt/x")
    assert "hunter2" not in str(storage_error("s3://bkt/x", failure))
    attempts = iter([failure])

    def flaky() -> str:
        for exc in attempts:
            raise exc
        return "ok"

    policy = RetryPolicy(attempts=2, initial_s=0.0)
    assert call_with_retry(flaky, policy=policy, is_transient=lambda exc: True, what="read", sleep=lambda s: None)
    assert "http://***@minio:9000" in caplog.text and "hunter2" not in caplog.text
