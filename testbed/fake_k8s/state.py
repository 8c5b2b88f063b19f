"""The cluster's state as the fake API server's request handlers use it: :class:`KubeState`, which
:class:`~testbed.fake_k8s.server.FakeKube` is. The handlers' modules name this, not the server that imports them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kftrain.job.manifest.schema import CRDSchemas
from testbed.fake_k8s.accounting import Fault, Stats

Objects = dict[tuple[str, str], dict[str, Any]]  # by (namespace, name)


@dataclass
class History:
    """One recorded change, as a watch reads it."""

    rv: int
    plural: str
    namespace: str
    type: str
    obj: dict[str, Any]


class KubeState(Protocol):
    """What the handlers read and change: one lock (``cond``) guards it all."""

    cond: threading.Condition
    stats: Stats
    stopping: bool
    schemas: CRDSchemas
    served: dict[str, list[str]]
    rv: int
    compacted_rv: int
    last_rv: dict[str, int]
    watch_generation: int
    jobs: dict[tuple[str, str, str], dict[str, Any]]
    pods: Objects
    logs: dict[str, dict[int, list[str]]]
    events: list[dict[str, Any]]
    configmaps: Objects
    secrets: Objects
    runtimes: dict[tuple[str, str, str], dict[str, Any]]
    namespaces: set[str]
    faults: list[Fault]
    requests: list[tuple[str, str]]
    created: list[dict[str, Any]]
    on_job_created: Callable[[str, dict[str, Any]], None] | None
    admission: list[Callable[[str, dict[str, Any]], None]]

    def bump(self) -> str: ...

    def record(self, plural: str, namespace: str, kind: str, obj: dict[str, Any]) -> None: ...

    def history_after(self, rv: int) -> list[History]: ...

    def log_cond(self, uid: str) -> threading.Condition: ...

    def delete_job(self, plural: str, namespace: str, name: str, policy: str | None = None) -> bool: ...

    def served_versions(self, group: str) -> list[str]: ...
