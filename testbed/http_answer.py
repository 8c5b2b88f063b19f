"""An answer as the fake servers (the Kubernetes API, the KFP API, a hub) write it: its length given, so that a
kept-alive connection reads exactly one body; a fake server on 127.0.0.1 for a block; and one that answers every
request one fixed way."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def send_body(
    handler: BaseHTTPRequestHandler, code: int, content_type: str, body: bytes, headers: Mapping[str, str] | None = None
) -> None:
    """Answer ``handler``'s request with status ``code`` and ``body`` (no Content-Type where ``content_type`` is
    empty), with the extra ``headers``."""
    handler.send_response(code)
    if content_type:
        handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(body)


def send_json(handler: BaseHTTPRequestHandler, code: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
    """Answer ``handler``'s request with status ``code`` and ``obj`` as JSON, with the extra ``headers``."""
    send_body(handler, code, "application/json", json.dumps(obj).encode(), headers)


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A server on 127.0.0.1 answering with ``handler``; its URL, while the block runs (stopped after it)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@contextlib.contextmanager
def answering(code: int, content_type: str, body: bytes) -> Iterator[str]:
    """A server on 127.0.0.1 answering every request with ``code``, ``content_type`` and ``body`` (a proxy's HTML
    sign-in page, a bare 401 or 500); its URL, while the block runs."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            send_body(self, code, content_type, body)

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _answer

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url
