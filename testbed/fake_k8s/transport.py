"""The fake API server's HTTP plumbing: JSON and chunked answers, injected faults, and routing a request by path.

:class:`Transport` is the base of the request handler (:mod:`testbed.fake_k8s.routes` assembles it): it counts each
request (:class:`~testbed.fake_k8s.accounting.Stats`), answers the faults injected, and calls the handler whose
pattern in ``routes`` matches the path, with the path's groups as arguments.
"""

from __future__ import annotations

import json
import re
import socket
import struct
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testbed.fake_k8s.accounting import verb_of
from testbed.fake_k8s.api import status_body
from testbed.fake_k8s.rules import unsupported_field
from testbed.fake_k8s.selectors import parse_selector
from testbed.fake_k8s.state import KubeState
from testbed.http_answer import send_body, send_json


class Transport(BaseHTTPRequestHandler):
    kube: KubeState
    # (path pattern, handler) in the order tried: the first whose pattern matches the whole path answers.
    routes: Sequence[tuple[str, Callable[..., None]]] = ()
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as the real API server
    # An answer's headers and body go out as separate small writes: on a kept-alive connection Nagle's algorithm
    # holds the body back until the client's delayed ACK (40 ms), which made every request take 40 ms.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures anyway
        pass

    # -- plumbing --------------------------------------------------------------------------------

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def _send_json(self, code: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        send_json(self, code, obj, headers)

    def _status(self, code: int, reason: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        self._send_json(code, status_body(code, reason, message), headers)

    def _start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _reset(self) -> None:
        # SO_LINGER 0: closing sends RST, so the client sees a connection reset, not an answer.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        kube = self.kube
        with kube.cond:
            kube.requests.append((method, self.path))
            kube.stats.request(verb_of(method, parts.path, query), self.path)
            # Every fault counts every request it matches, whichever of them answers it.
            hits = [f for f in kube.faults if f.hit(method, parts.path, parts.query)]
            fired = hits[0] if hits else None
        body = self._body() if method in ("POST", "PATCH", "PUT", "DELETE") else None
        if fired is not None and fired.action == "hold":
            fired.released.wait(30)
            fired = None
        if fired is not None:
            if fired.action == "reset":
                self._reset()
                return
            if fired.action == "html":  # a proxy's sign-in page, where the API's answer was expected
                page = b"<!doctype html><html><head><title>Sign in</title></head><body>Please sign in</body></html>"
                send_body(self, 200, "text/html", page)
                return
            code = int(fired.action)
            self._status(
                code,
                "TooManyRequests" if code == 429 else "InternalError",
                "injected fault",
                {"Retry-After": fired.retry_after},
            )
            return
        for pattern, handler in self.routes:
            match = re.fullmatch(pattern, parts.path)
            if match:
                try:
                    handler(self, method, query, body, *match.groups())
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                return
        self._status(404, "NotFound", f"the server could not find the requested resource ({parts.path})")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _selected(self, plural: str, query: dict[str, str]) -> tuple[dict[str, str], dict[str, str]] | None:
        """The label and field selectors of a list or watch; None (having answered 400) when a field cannot be
        selected on."""
        labels, fields = parse_selector(query.get("labelSelector")), parse_selector(query.get("fieldSelector"))
        bad = unsupported_field(plural, fields)
        if bad is not None:
            self._status(400, "BadRequest", f'Unable to find "{plural}" that match label selector '
                         f'"{query.get("labelSelector", "")}", field selector "{query.get("fieldSelector")}": field '
                         f"label not supported: {bad}")  # fmt: skip
            return None
        return labels, fields
