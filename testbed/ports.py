"""Loopback ports for the test servers: one free now, and one that refuses connections for as long as it is held."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


def free_port() -> int:
    """A port free now. Another process may take it before ours binds it: a server's start then fails naming the
    port, and a new start picks another."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def refusing_url() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` where nothing listens while the block runs: the port stays bound and never listens,
    so a connection is refused (Linux answers RST) and no other test's server can take the port meanwhile, as one
    did when a "down" server was a port merely free a moment before."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"
