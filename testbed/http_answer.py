"""A JSON answer as the fake servers (the Kubernetes API, the KFP API) write it: its length given, so that a
kept-alive connection reads exactly one body; and a server that answers every request one fixed way."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def send_json(handler: BaseHTTPRequestHandler, code: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
    """Answer ``handler``'s request with status ``code`` and ``obj`` as JSON, with the extra ``headers``."""
    data = json.dumps(obj).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(data)


@contextlib.contextmanager
def answering(code: int, content_type: str, body: bytes) -> Iterator[str]:
    """A server on 127.0.0.1 answering every request with ``code``, ``content_type`` and ``body`` (a proxy's HTML
    sign-in page, a bare 401 or 500); its URL, while the block runs."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
