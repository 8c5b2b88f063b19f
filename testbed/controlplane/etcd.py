"""The control plane's etcd: one member on free loopback ports, its data under the host's folder, and the calls
the tests make to it directly (its revision, a write, a compaction) through its JSON gateway."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from testbed.controlplane.host import Host, Part, Spec, http_ok
from testbed.ports import free_port


class Etcd(Part):
    name = "etcd"
    processes = ("etcd",)

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self.url = ""  # its client URL, once started

    def start(self, host: Host, deadline: float) -> None:
        self.url, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        command = [
            str(self.binary),
            "--name=controlplane",
            f"--data-dir={host.root / 'etcd'}",
            f"--listen-client-urls={self.url}",
            f"--advertise-client-urls={self.url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=controlplane={peer}",
            "--initial-cluster-state=new",
            "--log-level=warn",
            # A throwaway store: no fsync makes each write a memory copy (go.etcd.io/etcd/server/v3@v3.6.8:
            # embed/config.go, UnsafeNoFsync, "Disables fsync, unsafe, will cause data loss").
            "--unsafe-no-fsync=true",
        ]
        host.spawn(Spec(self.name, command, host.log(self.name)))

    def wait_ready(self, host: Host, deadline: float) -> None:
        host.wait_until(deadline, lambda: http_ok(f"{self.url}/health", expect='"health":"true"'), self.name)


def post(etcd_url: str, path: str, body: Mapping[str, Any]) -> Any:
    """A call to etcd's gRPC gateway (JSON over HTTP, on its client URL)."""
    request = urllib.request.Request(
        etcd_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def revision(etcd_url: str) -> int:
    """etcd's current revision (the resourceVersion of the newest write)."""
    answer = post(etcd_url, "/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
    return int(answer["header"]["revision"])


def put(etcd_url: str, key: str, value: str) -> int:
    """Put ``key`` straight into etcd; the revision it made."""
    body = {"key": base64.b64encode(key.encode()).decode(), "value": base64.b64encode(value.encode()).decode()}
    return int(post(etcd_url, "/v3/kv/put", body)["header"]["revision"])


def compact(etcd_url: str, revision: int) -> None:
    """Compact etcd's history up to ``revision``."""
    post(etcd_url, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
