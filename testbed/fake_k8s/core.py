"""The fake API server's core v1 objects: pods (list, get, watch, logs with follow), events, ConfigMaps and Secrets.

A log line wakes only the streams of its own pod, so a few hundred open streams stay cheap.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from testbed.fake_k8s.selectors import matches
from testbed.fake_k8s.state import KubeState
from testbed.fake_k8s.watch import Watches
from testbed.http_answer import send_body


class CoreObjects(Watches):
    """Pods, their logs, events, and ConfigMaps and Secrets read by name."""

    def pods(self, method: str, query: dict[str, str], body: Any, ns: str) -> None:
        if query.get("watch", "").lower() in ("true", "1"):
            self._watch("v1", ns, "pods", query)
            return
        selected = self._selected("pods", query)
        if selected is None:
            return
        labels, fields = selected
        with self.kube.cond:
            items = [copy.deepcopy(p) for (n, _), p in self.kube.pods.items() if n == ns]
            rv = str(self.kube.rv)
        items = [p for p in items if matches(p, labels, fields)]
        self._send_json(
            200, {"apiVersion": "v1", "kind": "PodList", "items": items, "metadata": {"resourceVersion": rv}}
        )

    def pod(self, method: str, query: dict[str, str], body: Any, ns: str, name: str) -> None:
        with self.kube.cond:
            pod = copy.deepcopy(self.kube.pods.get((ns, name)))
        if pod is None:
            self._status(404, "NotFound", f'pods "{name}" not found')
        else:
            self._send_json(200, pod)

    def pod_log(self, method: str, query: dict[str, str], body: Any, ns: str, name: str) -> None:
        kube = self.kube
        with kube.cond:
            pod = kube.pods.get((ns, name))
            if pod is None:
                self._status(404, "NotFound", f'pods "{name}" not found')
                return
            uid = pod["metadata"]["uid"]
            run = restart_count(pod) - (1 if query.get("previous", "").lower() == "true" else 0)
            if _waiting(pod) and query.get("previous", "").lower() != "true":
                reason = _waiting(pod)
                self._status(400, "BadRequest", f'container in pod "{name}" is waiting to start: {reason}')
                return
            lines = list(kube.logs.get(uid, {}).get(run, []))
        tail = query.get("tailLines")
        skipped = max(0, len(lines) - int(tail)) if tail is not None else 0  # tailLines: only the last lines
        if query.get("follow", "").lower() != "true":
            lines = lines[skipped:]
            send_body(self, 200, "text/plain", "".join(line + "\n" for line in lines).encode())
            return
        self._start_chunked("text/plain")
        with kube.cond:
            kube.stats.opened("log-follow")
        try:
            self._follow_log(kube, ns, name, uid, run, skipped)
        finally:
            with kube.cond:
                kube.stats.closed("log-follow")

    def _follow_log(self, kube: KubeState, ns: str, name: str, uid: str, run: int, sent: int) -> None:
        while True:
            with kube.cond:
                current = kube.pods.get((ns, name))
                lines = kube.logs.get(uid, {}).get(run, [])
                fresh = lines[sent:]
                sent = len(lines)
                alive = (
                    current is not None
                    and current["metadata"]["uid"] == uid
                    and restart_count(current) == run
                    and not _terminated(current)
                    and not kube.stopping
                )
                if not fresh and alive:
                    kube.log_cond(uid).wait(0.2)
                    continue
            if fresh:
                self._chunk("".join(line + "\n" for line in fresh).encode())
            if not alive:
                self._end_chunked()
                return

    def core_object(self, method: str, query: dict[str, str], body: Any, ns: str, plural: str, name: str) -> None:
        """GET of a ConfigMap or a Secret by name."""
        store = self.kube.configmaps if plural == "configmaps" else self.kube.secrets
        with self.kube.cond:
            obj = copy.deepcopy(store.get((ns, name)))
        if method != "GET":
            self._status(405, "MethodNotAllowed", method)
        elif obj is None:
            self._status(404, "NotFound", f'{plural} "{name}" not found')
        else:
            self._send_json(200, obj)

    def events(self, method: str, query: dict[str, str], body: Any, ns: str) -> None:
        selected = self._selected("events", query)
        if selected is None:
            return
        _, fields = selected
        with self.kube.cond:
            items = [copy.deepcopy(e) for e in self.kube.events if e["metadata"]["namespace"] == ns]
            rv = str(self.kube.rv)
        items = [e for e in items if matches(e, {}, fields)]
        self._send_json(
            200, {"apiVersion": "v1", "kind": "EventList", "items": items, "metadata": {"resourceVersion": rv}}
        )


def _main_status(pod: Mapping[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def restart_count(pod: Mapping[str, Any]) -> int:
    return int(_main_status(pod).get("restartCount") or 0)


def _terminated(pod: Mapping[str, Any]) -> bool:
    return "terminated" in (_main_status(pod).get("state") or {})


def _waiting(pod: Mapping[str, Any]) -> str | None:
    waiting = (_main_status(pod).get("state") or {}).get("waiting")
    return str(waiting.get("reason")) if waiting else None
