"""A Hugging Face Hub dataset repository served on 127.0.0.1: what Trainer's dataset initializer reads of the Hub
(the listing ``/api/datasets/<repo>`` and each file at ``/datasets/<repo>/resolve/main/<name>``), for tests of a
step that takes ``hf://`` data. Nothing leaves this machine."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler

from testbed.http_answer import send_body, serving


@contextlib.contextmanager
def hub_dataset(repo: str, files: Mapping[str, bytes]) -> Iterator[str]:
    """A hub holding the dataset ``repo`` (``owner/name``) with ``files`` (name -> content); its URL (for
    ``HF_ENDPOINT``) while the block runs. Any other path is a 404."""
    listing = json.dumps({"siblings": [{"rfilename": name} for name in files]}).encode()
    routes = {f"/api/datasets/{repo}": listing}
    routes.update({f"/datasets/{repo}/resolve/main/{name}": body for name, body in files.items()})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = routes.get(self.path)
            send_body(self, 404 if body is None else 200, "", b"not found" if body is None else body)

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url
