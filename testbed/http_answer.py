"""A JSON answer as the fake servers (the Kubernetes API, the KFP API) write it: its length given, so that a
kept-alive connection reads exactly one body."""

from __future__ import annotations

import json
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
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
