"""Trainer's dataset and model initializers as kftrain runs them, under a careless user and a hostile hub or store.

Every source a user can get wrong is one ``InitializerError`` naming it; a token never leaves the hub's host; a
file is streamed, never held whole; a failed download leaves nothing at the destination; an ``s3://`` URI naming
one object downloads it, as kubeflow/trainer@v2.3.0:pkg/initializers/utils/opendal.py:90-106 does.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kftrain.programs import initializer
from kftrain.programs.initializer import InitializerError, initialize

TOKEN = "hf_SECRET_token_1234"


class _Server(http.server.ThreadingHTTPServer):
    """Answers each path from ``routes``: (status, headers, body); records every request's headers."""

    daemon_threads = True

    def __init__(self, routes: dict[str, tuple[int, dict[str, str], bytes]]) -> None:
        self.routes = routes
        self.seen: list[tuple[str, dict[str, str]]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.seen.append((self.path, dict(self.headers)))
                status, headers, body = outer.routes.get(self.path, (404, {}, b"no"))
                self.send_response(status)
                for name, value in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@pytest.fixture
def serve() -> Iterator[Callable[[dict[str, tuple[int, dict[str, str], bytes]]], _Server]]:
    started: list[tuple[_Server, threading.Thread]] = []

    def start(routes: dict[str, tuple[int, dict[str, str], bytes]]) -> _Server:
        server = _Server(routes)
        # A short poll: shutdown() below waits up to serve_forever's poll interval (half a second by default).
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _listing(*names: str) -> bytes:
    return json.dumps({"siblings": [{"rfilename": n} for n in names]}).encode()


def _env(tmp_path: Path, uri: str, **more: str) -> dict[str, str]:
    return {"STORAGE_URI": uri, "KFTRAIN_WORKSPACE": str(tmp_path / "ws"), **more}


# -- credentials never cross hosts -----------------------------------------------------------------------------


def test_the_token_is_dropped_on_a_redirect_to_another_host_and_kept_on_the_same(
    tmp_path: Path, serve: Callable[..., _Server]
) -> None:
    cdn = serve({"/blob": (200, {}, b"a,b\n1,2\n")})
    hub = serve({})
    hub.routes.update(
        {
            "/api/datasets/o/n": (200, {}, _listing("data.csv", "more.csv")),
            # the Hub sends large files to its CDN (another host: ``localhost`` is not ``127.0.0.1`` by name)
            "/datasets/o/n/resolve/main/data.csv": (302, {"Location": f"http://localhost:{cdn.port}/blob"}, b""),
            "/datasets/o/n/resolve/main/more.csv": (302, {"Location": "/same-host"}, b""),
            "/same-host": (200, {}, b"x\n"),
        }
    )
    env = _env(tmp_path, "hf://o/n", HF_ENDPOINT=f"http://127.0.0.1:{hub.port}", ACCESS_TOKEN=TOKEN)
    initialize("dataset", env)
    assert (tmp_path / "ws" / "dataset" / "data.csv").read_bytes() == b"a,b\n1,2\n"
    assert [h.get("Authorization") for _, h in cdn.seen] == [None]
    assert all(h.get("Authorization") == f"Bearer {TOKEN}" for _, h in hub.seen)


# -- every source a user can get wrong is one line naming it -------------------------------------------------


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "pipe")
    return f"file://{tmp_path / 'pipe'}"


def _fifo_in_folder(tmp_path: Path) -> str:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.csv").write_text("x\n")
    os.mkfifo(tmp_path / "src" / "pipe")
    return f"file://{tmp_path / 'src'}"


def _the_destination(tmp_path: Path) -> str:
    (tmp_path / "ws" / "dataset").mkdir(parents=True)
    (tmp_path / "ws" / "dataset" / "a.csv").write_text("x\n")
    return f"file://{tmp_path / 'ws' / 'dataset'}"


def _above_the_destination(tmp_path: Path) -> str:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.csv").write_text("x\n")
    return f"file://{tmp_path / 'ws'}"


LOCAL_CASES: dict[str, tuple[Callable[[Path], str], str]] = {
    "another machine's file://": (lambda _: "file://otherhost/data", r"file://otherhost/data: .*host 'otherhost'"),
    "a character device": (lambda _: "file:///dev/zero", r"/dev/zero is not a regular file or a folder"),
    "a FIFO": (_fifo, r"pipe is not a regular file or a folder"),
    "a FIFO inside the folder": (_fifo_in_folder, r"src/pipe is not a regular file or a folder"),
    "the destination itself": (_the_destination, r"is the destination .*dataset or holds it"),
    "a folder holding the destination": (_above_the_destination, r"is the destination .*dataset or holds it"),
    "no such file": (lambda p: f"file://{p / 'nothing'}", r"nothing does not exist"),
}


@pytest.mark.parametrize("case", LOCAL_CASES)
def test_a_local_source_that_cannot_be_copied_is_named(case: str, tmp_path: Path) -> None:
    make, match = LOCAL_CASES[case]
    uri = make(tmp_path)
    with pytest.raises(InitializerError, match=match) as caught:
        initialize("dataset", _env(tmp_path, uri))
    assert "\n" not in str(caught.value)


HUB_CASES: dict[str, tuple[bytes, str]] = {
    "not JSON": (b"<html>rate limited</html>", r"the Hub's listing .* is not JSON"),
    "not an object": (b"[1, 2]", r"the Hub's listing .* is not an object"),
    "siblings not a list": (b'{"siblings": "all"}', r"the Hub's listing .*siblings is not a list"),
    "a name not a string": (b'{"siblings": [{"rfilename": 7}]}', r"the Hub's listing .*siblings\[0\]\.rfilename"),
    "a file and a folder of one name": (_listing("a", "a/b"), r"'a' is both a file and a folder \('a/b'\)"),
    "a name leaving the folder": (_listing("../x.csv"), r"'\.\./x\.csv' has an empty, '\.' or '\.\.' part"),
}


@pytest.mark.parametrize("case", HUB_CASES)
def test_a_malformed_hub_listing_is_named_and_nothing_is_written(
    case: str, tmp_path: Path, serve: Callable[..., _Server]
) -> None:
    body, match = HUB_CASES[case]
    hub = serve({"/api/datasets/o/n": (200, {}, body)})
    hub.routes.update({f"/datasets/o/n/resolve/main/{n}": (200, {}, b"data") for n in ("a", "a/b")})
    with pytest.raises(InitializerError, match=match) as caught:
        initialize("dataset", _env(tmp_path, "hf://o/n", HF_ENDPOINT=f"http://127.0.0.1:{hub.port}"))
    assert "\n" not in str(caught.value)
    assert not any((tmp_path / "ws" / "dataset").rglob("*"))


def test_a_file_is_streamed_and_a_failed_download_leaves_nothing(tmp_path: Path, serve: Callable[..., _Server]) -> None:
    big = os.urandom(1024) * (12 * 1024)  # 12 MiB
    hub = serve(
        {
            "/api/datasets/o/n": (200, {}, _listing("big.bin", "z-missing.bin")),
            "/datasets/o/n/resolve/main/big.bin": (200, {}, big),
        }
    )
    env = _env(tmp_path, "hf://o/n", HF_ENDPOINT=f"http://127.0.0.1:{hub.port}")
    tracemalloc.start()
    try:
        with pytest.raises(InitializerError, match=r"answered 404"):
            initialize("dataset", env)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"{peak} bytes held at once for a 12 MiB file"
    assert not list((tmp_path / "ws" / "dataset").iterdir())  # big.bin, complete, went with the failed run

    hub.routes["/api/datasets/o/n"] = (200, {}, _listing("big.bin"))
    initialize("dataset", env)
    assert (tmp_path / "ws" / "dataset" / "big.bin").read_bytes() == big


# -- S3 -----------------------------------------------------------------------------------------------------------


def _put(s3_env: str, key: str, body: bytes) -> None:
    from kftrain import storage

    with storage.open_uri(storage.join(s3_env, key), "wb") as handle:
        handle.write(body)


def test_an_s3_uri_naming_one_object_downloads_it(s3_env: str, tmp_path: Path) -> None:
    _put(s3_env, "data/train.csv", b"x,y\n1,0\n")
    _put(s3_env, "data/train.csv.bak", b"other")
    initialize("dataset", _env(tmp_path, f"{s3_env}/data/train.csv"))
    assert sorted(p.name for p in (tmp_path / "ws" / "dataset").iterdir()) == ["train.csv"]
    assert (tmp_path / "ws" / "dataset" / "train.csv").read_bytes() == b"x,y\n1,0\n"


def test_s3_objects_that_are_a_file_and_a_folder_are_named(s3_env: str, tmp_path: Path) -> None:
    _put(s3_env, "ds/a", b"1")
    _put(s3_env, "ds/a/b", b"2")
    with pytest.raises(InitializerError, match=r"'a' is both a file and a folder \('a/b'\)"):
        initialize("dataset", _env(tmp_path, f"{s3_env}/ds"))
    assert not any((tmp_path / "ws" / "dataset").rglob("*"))


def test_the_module_holds_no_reader_of_a_whole_response() -> None:
    assert not hasattr(initializer, "_fetch")  # one streaming path for every download
