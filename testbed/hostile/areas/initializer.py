"""Trainer's dataset and model initializers as kftrain runs them (kftrain/programs/initializer.py): an hf:// redirect to
another host (the token must not follow), file://otherhost/, /dev/zero or a FIFO as the source, the source equal to
the destination, objects a and a/b, a malformed hub listing, a 300 MiB file (streamed: memory bounded), a single S3
object, and the initializer's command line.

Setups from tests/programs/test_initializer.py (``_Server`` the fake hub, ``_listing``, ``LOCAL_CASES``,
``HUB_CASES``), taken by name when the case runs.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import threading
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from testbed.hostile.case import CLEAR, ESCAPE, FINE, LEAK, WRONG, Case, Observed, Sandbox

AREA = "initializer"
TOKEN = "hf_HOSTILE_token_9c41"
BIG = 300 << 20
MEMORY_BOUND = 32 << 20  # what the initializer may hold at once to download BIG


def _tests() -> Any:
    from tests.programs import test_initializer

    return test_initializer


@contextlib.contextmanager
def _hubs(count: int = 1) -> Iterator[list[Any]]:
    started = []
    for _ in range(count):
        server = _tests()._Server({})
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        thread.start()
        started.append((server, thread))
    try:
        yield [server for server, _ in started]
    finally:
        for server, thread in started:
            server.shutdown()
            server.server_close()
            thread.join(5)


def _env(sb: Sandbox, uri: str, **more: str) -> dict[str, str]:
    return {"STORAGE_URI": uri, "KFTRAIN_WORKSPACE": str(sb.work / "ws"), **more}


def _nothing_at_the_destination(sb: Sandbox) -> None:
    dest = sb.work / "ws" / "dataset"
    left = sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) if dest.exists() else []
    if left:
        raise Observed(WRONG, f"a failed download left {', '.join(left[:3])} at the destination")


def _refused_cleanly(sb: Sandbox, call: Callable[[], Any]) -> None:
    """``call()``, which must refuse: then nothing of it may be at the destination."""
    from kftrain.errors import KftrainError

    try:
        call()
    except KftrainError:
        _nothing_at_the_destination(sb)
        raise


def _local(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        from kftrain.programs.initializer import initialize

        make, _ = _tests().LOCAL_CASES[key]
        uri = make(sb.work)
        sb.ready()
        initialize("dataset", _env(sb, uri))

    return run


def _hub_listing(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        from kftrain.programs.initializer import initialize

        body, _ = _tests().HUB_CASES[key]
        with _hubs() as (hub,):
            hub.routes["/api/datasets/o/n"] = (200, {}, body)
            hub.routes.update({f"/datasets/o/n/resolve/main/{n}": (200, {}, b"data") for n in ("a", "a/b", "x.csv")})
            sb.ready()
            _refused_cleanly(sb, lambda: initialize("dataset", _env(sb, "hf://o/n", HF_ENDPOINT=hub_url(hub))))

    return run


def hub_url(hub: Any) -> str:
    return f"http://127.0.0.1:{hub.port}"


def _listing_of(*names: str) -> Callable[[Sandbox], None]:
    """A hub whose listing names ``names`` (each served): they must stay in the destination."""

    def run(sb: Sandbox) -> None:
        from kftrain.programs.initializer import initialize

        with _hubs() as (hub,):
            hub.routes["/api/datasets/o/n"] = (200, {}, _tests()._listing(*names))
            hub.routes.update({f"/datasets/o/n/resolve/main/{n}": (200, {}, b"data") for n in names})
            sb.ready()
            _refused_cleanly(sb, lambda: initialize("dataset", _env(sb, "hf://o/n", HF_ENDPOINT=hub_url(hub))))

    return run


def _redirect(where: str) -> Callable[[Sandbox], None]:
    """The Hub sends a file to another host (its CDN; ``localhost`` is not ``127.0.0.1`` by name), or to itself:
    the token reaches the Hub's host only."""

    def run(sb: Sandbox) -> None:
        from kftrain.programs.initializer import initialize

        with _hubs(2) as (hub, cdn):
            cdn.routes["/blob"] = (200, {}, b"a,b\n1,2\n")
            target = {
                "another host": f"http://localhost:{cdn.port}/blob",
                "another port": f"http://127.0.0.1:{cdn.port}/blob",
                "the same host": "/same-host",
            }[where]
            hub.routes.update(
                {
                    "/api/datasets/o/n": (200, {}, _tests()._listing("data.csv")),
                    "/datasets/o/n/resolve/main/data.csv": (302, {"Location": target}, b""),
                    "/same-host": (200, {}, b"a,b\n1,2\n"),
                }
            )
            sb.ready()
            initialize("dataset", _env(sb, "hf://o/n", HF_ENDPOINT=hub_url(hub), ACCESS_TOKEN=TOKEN))
            sent = [h.get("Authorization") for _, h in cdn.seen]
            if any(sent):
                raise Observed(LEAK, f"the token was sent to {target} (another host than the Hub)")
            if where == "the same host" and not all(h.get("Authorization") for _, h in hub.seen):
                raise Observed(WRONG, "the token was dropped on a redirect to the Hub itself")

    return run


class _Streaming(http.server.ThreadingHTTPServer):
    """A hub whose one file is ``BIG`` bytes, written a MiB at a time (this server never holds it either)."""

    daemon_threads = True

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/api/datasets/o/n":
                    body = _tests()._listing("big.bin")
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(BIG))
                self.end_headers()
                block = bytes(range(256)) * 4096
                for _ in range(BIG // len(block)):
                    self.wfile.write(block)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def _big_file(sb: Sandbox) -> None:
    from kftrain.programs.initializer import initialize

    server = _Streaming()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        sb.ready()
        tracemalloc.start()
        try:
            initialize("dataset", _env(sb, "hf://o/n", HF_ENDPOINT=f"http://127.0.0.1:{server.server_address[1]}"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    size = (sb.work / "ws" / "dataset" / "big.bin").stat().st_size
    if size != BIG:
        raise Observed(WRONG, f"downloaded {size} bytes of {BIG}")
    if peak > MEMORY_BOUND:
        raise Observed("unbounded memory", f"{peak} bytes held at once for a {BIG}-byte file")
    print(f"{BIG} bytes downloaded, at most {peak} bytes held at once")


def _failed_download(sb: Sandbox) -> None:
    """The second file of the listing is missing (404): the first, complete, does not stay."""
    from kftrain.programs.initializer import initialize

    with _hubs() as (hub,):
        hub.routes.update(
            {
                "/api/datasets/o/n": (200, {}, _tests()._listing("a.bin", "z-missing.bin")),
                "/datasets/o/n/resolve/main/a.bin": (200, {}, b"x" * 1000),
            }
        )
        sb.ready()
        _refused_cleanly(sb, lambda: initialize("dataset", _env(sb, "hf://o/n", HF_ENDPOINT=hub_url(hub))))


def _hub_answers(status: int) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        from kftrain.programs.initializer import initialize

        with _hubs() as (hub,):
            hub.routes["/api/datasets/o/n"] = (status, {}, b"no")
            sb.ready()
            initialize("dataset", _env(sb, "hf://o/n", HF_ENDPOINT=hub_url(hub), ACCESS_TOKEN=TOKEN))

    return run


def _unreachable(sb: Sandbox) -> None:
    from kftrain.programs.initializer import initialize
    from testbed.ports import refusing_url

    sb.ready()
    with refusing_url() as endpoint:
        initialize("dataset", _env(sb, "hf://o/n", HF_ENDPOINT=endpoint, ACCESS_TOKEN=TOKEN))


def _put(sb: Sandbox, bucket: str, objects: dict[str, bytes]) -> str:
    from testbed.s3_server import boto3_client

    client = boto3_client(sb.s3_endpoint)
    client.create_bucket(Bucket=bucket)
    for key, body in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    os.environ.update(
        AWS_ENDPOINT_URL=sb.s3_endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    return f"s3://{bucket}"


def _s3(objects: dict[str, bytes], at: str, expect: list[str] | None = None, **more: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        from kftrain.programs.initializer import initialize

        bucket = _put(sb, f"hostile-{uuid.uuid4().hex[:12]}", objects)
        sb.ready()
        _refused_cleanly(sb, lambda: initialize("dataset", _env(sb, f"{bucket}/{at}", **more)))
        got = sorted(
            str(p.relative_to(sb.work / "ws" / "dataset"))
            for p in (sb.work / "ws" / "dataset").rglob("*")
            if p.is_file()
        )
        if expect is not None and got != expect:
            raise Observed(WRONG, f"downloaded {got}, not {expect}")

    return run


def _escaping_s3(sb: Sandbox) -> None:
    """An object key that leaves the prefix's folder (``ds/../../x``): refused, nothing written above the folder."""
    from kftrain.programs.initializer import initialize

    bucket = _put(sb, "hostile-escape", {"ds/ok.csv": b"1", "ds/../../outside/x": b"2"})
    sb.ready()
    try:
        _refused_cleanly(sb, lambda: initialize("dataset", _env(sb, f"{bucket}/ds")))
    finally:
        if any(Path(sb.work).parent.rglob("x")):
            raise Observed(ESCAPE, "the object was written above the destination")


def _cli(*args: str, env: dict[str, str] | None = None) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        from kftrain.programs.initializer import main

        os.environ.update({k: v.format(work=sb.work) for k, v in (env or {}).items()})
        sb.ready()
        return main(list(args))

    return run


LOCAL = {
    "another machine's file://": "host 'otherhost'",
    "a character device": "/dev/zero",
    "a FIFO": "pipe",
    "a FIFO inside the folder": "src/pipe",
    "the destination itself": "is the destination",
    "no such file": "does not exist",
}
HUB = {
    "not JSON": "not JSON",
    "a name not a string": "siblings[0].rfilename",
    "a file and a folder of one name": "'a' is both a file and a folder",
    "a name leaving the folder": "../x.csv",
}
SURFACE = "initializer.initialize('dataset', env)"
CASES: list[Case] = [
    *(
        Case(AREA, f"file:// {key}", CLEAR, SURFACE, _local(key), names=(said,), timeout_s=30)
        for key, said in LOCAL.items()
    ),
    *(Case(AREA, f"hub listing {key}", CLEAR, SURFACE, _hub_listing(key), names=(said,)) for key, said in HUB.items()),
    Case(AREA, "hub listing an absolute name", CLEAR, SURFACE, _listing_of("/etc/x.csv"), names=("/etc/x.csv",)),
    Case(
        AREA, "hf redirect to another host: the token stays", FINE, SURFACE, _redirect("another host"), secrets=(TOKEN,)
    ),
    Case(
        AREA,
        "hf redirect to the same host keeps the token",
        FINE,
        SURFACE,
        _redirect("the same host"),
        secrets=(TOKEN,),
    ),
    Case(
        AREA,
        "hf answers 401 (the token never shown)",
        CLEAR,
        SURFACE,
        _hub_answers(401),
        names=("401",),
        secrets=(TOKEN,),
    ),
    Case(AREA, "hf unreachable", CLEAR, SURFACE, _unreachable, names=("no network here?",), secrets=(TOKEN,)),
    Case(AREA, "a 300 MiB file, streamed", FINE, SURFACE, _big_file, timeout_s=240),
    Case(AREA, "a failed download leaves nothing", CLEAR, SURFACE, _failed_download, names=("404",)),
    Case(
        AREA,
        "a single S3 object",
        FINE,
        SURFACE,
        _s3({"data/train.csv": b"x,y\n1,0\n", "data/train.csv.bak": b"o"}, "data/train.csv", ["train.csv"]),
        needs=("s3",),
    ),
    Case(
        AREA,
        "S3 objects a and a/b",
        CLEAR,
        SURFACE,
        _s3({"ds/a": b"1", "ds/a/b": b"2"}, "ds"),
        names=("'a' is both a file and a folder",),
        needs=("s3",),
    ),
    Case(
        AREA,
        "an S3 prefix with IGNORE_PATTERNS",
        FINE,
        SURFACE,
        _s3(
            {"p/a.csv": b"1", "p/b.bin": b"2", "p/sub/c.csv": b"3"},
            "p",
            ["a.csv", "sub/c.csv"],
            IGNORE_PATTERNS="*.bin",
        ),
        needs=("s3",),
    ),
    Case(AREA, "an S3 key leaving the prefix's folder", CLEAR, SURFACE, _escaping_s3, needs=("s3",)),
    Case(
        AREA,
        "STORAGE_URI unset",
        CLEAR,
        "python -m kftrain.programs.initializer dataset",
        _cli("dataset"),
        names=("STORAGE_URI",),
    ),
    Case(
        AREA,
        "STORAGE_URI /dev/zero, from the command",
        CLEAR,
        "python -m kftrain.programs.initializer model",
        _cli("model", env={"STORAGE_URI": "file:///dev/zero", "KFTRAIN_WORKSPACE": "{work}/ws"}),
        names=("/dev/zero",),
        timeout_s=30,
    ),
    Case(
        AREA,
        "an initializer of something else",
        CLEAR,
        "python -m kftrain.programs.initializer",
        _cli("weights"),
        names=("dataset|model",),
    ),
]
