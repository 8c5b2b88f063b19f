"""A loopback server (the local S3 of testbed/s3_server.py) reached from the node's pods: a TCP relay listening on
the node's bridge address, the host address pods reach (never 192.0.2.1, the VM's gateway), forwarding each
connection to the server's loopback port. Stopped with its connections on exit."""

from __future__ import annotations

import contextlib
import selectors
import socket
import socketserver
import threading
from collections.abc import Iterator

CHUNK = 1 << 16


def _pump(left: socket.socket, right: socket.socket) -> None:
    """Copy both ways until either side closes."""
    with selectors.DefaultSelector() as selector:
        selector.register(left, selectors.EVENT_READ, right)
        selector.register(right, selectors.EVENT_READ, left)
        while True:
            for key, _ in selector.select(timeout=1.0):
                data = key.fileobj.recv(CHUNK)  # type: ignore[union-attr]
                if not data:
                    return
                key.data.sendall(data)


@contextlib.contextmanager
def relay(address: str, upstream_port: int) -> Iterator[int]:
    """Listen on ``address`` (a free port) and relay to ``127.0.0.1:upstream_port``; yields the port."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", upstream_port)) as upstream:
                _pump(self.request, upstream)

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server((address, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
