"""A fake Kubernetes API server, over real HTTP, for the real ``kubernetes`` client.

It serves just enough of the API for the Kubernetes backend: discovery, the custom resources of every
kind in :data:`kftrain.job.kinds.KINDS` (CRUD, merge patch, watch with resourceVersion and 410 Gone; each
kind's group, plural and versions are its own facts, so a kind added there is served here with no edit),
pods (list, get, watch, logs with follow) and events. It counts every request by verb, and the
watches and log streams open now and at most (:class:`Stats`, ``FakeKube.stats``), for tests and the
launcher-cost benchmark (P9, bench/bench_launcher.py); a log line wakes only the streams of its own pod,
so a few hundred open streams stay cheap. A custom resource created or patched is treated as kube-apiserver
treats it (:mod:`testbed.fake_k8s.rules`): refused outside a namespace that exists (404), pruned of the fields its
CRD does not know, defaulted, validated against the operators' real CRD schemas and its name (422 when invalid),
its status left to the status subresource, its generation counted; a field selector on a field the API server
cannot select on is refused (400); a watch that allows bookmarks gets them when kube-apiserver's watch cache sends
them. tests/controlplane/test_fake_api_server.py compares the two. Faults (an HTTP
status or a connection reset on the Nth matching request) can be injected. A simulated
operator (:mod:`testbed.fake_k8s.operator`) reacts to created jobs.
"""

from __future__ import annotations

import base64
import bisect
import collections
import copy
import itertools
import json
import re
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from kftrain.job.kinds import KINDS, Kind
from kftrain.job.kinds.trainjob.runtime import GROUP as RUNTIME_GROUP
from kftrain.job.manifest.schema import defaulted
from testbed.fake_k8s.rules import name_problem, prepared_for_create, prepared_for_update, unsupported_field
from testbed.reference import schemas_in

# The jobs served, by plural: every kind of the one list of kinds, with its kind name and API group.
KIND_NAMES: dict[str, str] = {k.spec.plural: k.spec.kind for k in KINDS}
GROUPS: dict[str, str] = {k.spec.plural: k.spec.group for k in KINDS}
# The versions each plural is served at unless a test says otherwise (FakeKube.served): its kind's preferred one.
DEFAULT_SERVED: dict[str, list[str]] = {k.spec.plural: [k.spec.version] for k in map(KINDS.get, KINDS.names())}


def _plurals_by_group() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for plural, group in GROUPS.items():
        out.setdefault(group, []).append(plural)
    return out


PLURALS_BY_GROUP = _plurals_by_group()


def group_of(plural: str) -> str:
    return GROUPS[plural]


def kind_at(plural: str, api_version: str | None = None) -> Kind:
    """The kind served as ``plural`` at ``api_version`` (None: its preferred version)."""
    return KINDS.get(KIND_NAMES[plural], api_version)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def parse_selector(text: str | None) -> dict[str, str]:
    """Equality-based selectors only (``a=b,c==d``): all the backend uses."""
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, _, value = part.replace("==", "=").partition("=")
        out[key.strip()] = value.strip()
    return out


def dotted(obj: Mapping[str, Any], path: str) -> Any:
    cur: Any = obj
    for key in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def matches(obj: Mapping[str, Any], labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    if any(have.get(k) != v for k, v in labels.items()):
        return False
    return all(str(dotted(obj, k)) == v for k, v in fields.items())


@dataclass
class Fault:
    """Answer the ``nth`` (1-based) request matching ``method`` and ``path`` (a regex) with ``action``.

    ``action`` is an HTTP status (``"500"``, ``"429"``), ``"reset"`` (drop the connection
    without answering) or ``"hold"`` (answer only once :attr:`released` is set, as a slow server
    would); ``times`` consecutive matching requests get it.
    """

    action: str
    path: str = ""
    method: str | None = None
    nth: int = 1
    times: int = 1
    query: str = ""
    seen: int = 0
    fired: int = 0
    released: threading.Event = field(default_factory=threading.Event)

    def hit(self, method: str, path: str, query: str) -> bool:
        if self.method and self.method != method:
            return False
        if not re.search(self.path, path) or (self.query and not re.search(self.query, query)):
            return False
        self.seen += 1
        if self.nth <= self.seen < self.nth + self.times:
            self.fired += 1
            return True
        return False


def verb_of(method: str, path: str, query: Mapping[str, str]) -> str:
    """The request's verb as the API server's metrics name it (get, list, watch, create, patch, delete), with
    pod logs apart: ``log`` for a read of the last lines, ``log-follow`` for a stream; ``discovery`` for the
    API's own description."""
    if path.endswith("/log"):
        return "log-follow" if query.get("follow", "").lower() == "true" else "log"
    if method == "POST":
        return "create"
    if method in ("PATCH", "DELETE", "PUT"):
        return method.lower()
    if query.get("watch", "").lower() in ("true", "1"):
        return "watch"
    if "/namespaces/" not in path and "/clustertrainingruntimes/" not in path:
        return "discovery"
    return "list" if _COLLECTION.search(path) else "get"


# The collections a GET lists: pods, events and every kind's jobs.
_COLLECTION = re.compile(rf"/(pods|events|{'|'.join(map(re.escape, KIND_NAMES))})$")


@dataclass
class Stats:
    """What the server has been asked: requests by verb, each request with when it came, and the watches
    (``watch``) and log streams (``log-follow``) open now and at most. Changed under the server's lock."""

    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    open: collections.Counter[str] = field(default_factory=collections.Counter)
    peak: collections.Counter[str] = field(default_factory=collections.Counter)
    # (time.monotonic(), verb, path) of every request, in the order they came.
    log: list[tuple[float, str, str]] = field(default_factory=list)

    def request(self, verb: str, path: str) -> None:
        self.requests[verb] += 1
        self.log.append((time.monotonic(), verb, path))

    def opened(self, what: str) -> None:
        self.open[what] += 1
        self.peak[what] = max(self.peak[what], self.open[what])

    def closed(self, what: str) -> None:
        self.open[what] -= 1

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {"requests": dict(self.requests), "open": dict(self.open), "peak": dict(self.peak)}


@dataclass
class _History:
    rv: int
    plural: str
    namespace: str
    type: str
    obj: dict[str, Any]


@dataclass
class FakeKube:
    """The cluster's state, the HTTP server that serves it, and the simulated operator."""

    crd_dir: Path
    served: dict[str, list[str]] = field(default_factory=lambda: copy.deepcopy(DEFAULT_SERVED))

    def __post_init__(self) -> None:
        self.schemas = schemas_in(self.crd_dir)  # the one loader of the CRD schemas, cached per process
        # One lock for all the state. Watches wait on `cond` (woken by every recorded change); the log streams
        # of a pod wait on that pod's own condition (woken by its new lines and its changes).
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self._log_conds: dict[str, threading.Condition] = {}
        self.stats = Stats()
        self._rv = itertools.count(1000)
        self.rv = next(self._rv)
        self.jobs: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        # pod uid -> container run (restart count) -> lines
        self.logs: dict[str, dict[int, list[str]]] = {}
        self.events: list[dict[str, Any]] = []
        # Core objects read by name only (GET): ConfigMaps, and Secrets (their data base64, as the API serves it).
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.history: list[_History] = []
        self._history_rvs: list[int] = []  # the rv of each history entry, ascending: watches bisect it
        self.compacted_rv = 0
        self.last_rv: dict[str, int] = {}  # by plural: the version of its last change (a watch's bookmarks carry it)
        self.watch_generation = 0
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        self.deletions: list[tuple[str, str, str, str | None]] = []
        self.created: list[dict[str, Any]] = []
        # Trainer v2 runtimes by (plural, namespace or "", name): those Trainer v2.3.0 installs, as a cluster
        # with Trainer has them (read from the reference data beside the CRDs).
        self.runtimes: dict[tuple[str, str, str], dict[str, Any]] = {}
        for path in sorted((self.crd_dir.parent / "trainer-v2.3.0-runtimes").glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "ClusterTrainingRuntime":
                    self.runtimes[("clustertrainingruntimes", "", doc["metadata"]["name"])] = doc
        # The namespaces that exist: a create elsewhere is refused, as the NamespaceLifecycle admission plugin
        # refuses it (k8s.io/apiserver@v0.36.3:pkg/admission/plugin/namespace/lifecycle/admission.go). A
        # kubeconfig written for a namespace adds it (write_kubeconfig); add_namespace adds another.
        self.namespaces: set[str] = {"default", "kube-system", "kube-public"}
        self.stopping = False
        self.on_job_created: Callable[[str, dict[str, Any]], None] | None = None
        # Mutating admission webhooks: each may change a custom resource being created, before it is validated.
        self.admission: list[Callable[[str, dict[str, Any]], None]] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeKube:
        fake = self

        class Handler(_Handler):
            kube = fake

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll: stop() (each test's teardown) waits for the serving loop to notice.
        httpd = self._httpd
        self._thread = threading.Thread(
            target=lambda: httpd.serve_forever(poll_interval=0.02), name="fake-k8s", daemon=True
        )
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def write_kubeconfig(self, path: Path, namespace: str = "default", user: str = "runner") -> Path:
        """A kubeconfig at ``path`` whose current context is this server (a token that is not a secret)."""
        self.add_namespace(namespace)
        context = {"cluster": "fake", "user": user, "namespace": namespace}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": user, "user": {"token": "not-a-secret"}}],
            "contexts": [{"name": "fake", "context": context}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
            for cond in self._log_conds.values():
                cond.notify_all()
            for fault in self.faults:
                fault.released.set()  # a held request is answered, so that its handler ends
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def add_namespace(self, name: str) -> None:
        with self.cond:
            self.namespaces.add(name)

    def add_configmap(self, namespace: str, name: str, data: dict[str, str]) -> None:
        meta = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())}
        with self.cond:
            self.configmaps[(namespace, name)] = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta,
                "data": data,
            }

    def add_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """A Secret whose ``data`` are given as plain text (served base64-encoded)."""
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        meta = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())}
        with self.cond:
            self.secrets[(namespace, name)] = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": meta,
                "data": encoded,
            }

    # -- state changes (all under self.cond) -----------------------------------------------------

    def bump(self) -> str:
        self.rv = next(self._rv)
        return str(self.rv)

    def record(self, plural: str, namespace: str, kind: str, obj: dict[str, Any]) -> None:
        """A change of a job (``plural``) or of a pod (``"pods"``), as watches see it."""
        obj["metadata"]["resourceVersion"] = self.bump()
        self.last_rv[plural] = self.rv
        self.history.append(_History(self.rv, plural, namespace, kind, copy.deepcopy(obj)))
        self._history_rvs.append(self.rv)
        self.cond.notify_all()
        if plural == "pods":
            self.pod_changed(obj["metadata"]["uid"])

    def history_after(self, rv: int) -> list[_History]:
        """The changes after resourceVersion ``rv`` (call with the lock held)."""
        return self.history[bisect.bisect_right(self._history_rvs, rv) :]

    def log_cond(self, uid: str) -> threading.Condition:
        """What the log streams of pod ``uid`` wait on (call with the lock held)."""
        return self._log_conds.setdefault(uid, threading.Condition(self.lock))

    def pod_changed(self, uid: str) -> None:
        """Wake the log streams of pod ``uid``: a new line, or the pod changed (call with the lock held)."""
        cond = self._log_conds.get(uid)
        if cond is not None:
            cond.notify_all()

    def add_log(self, namespace: str, name: str, *lines: str) -> None:
        """Lines the current run of pod ``name``'s main container writes."""
        with self.cond:
            pod = self.pods[(namespace, name)]
            uid = pod["metadata"]["uid"]
            self.logs.setdefault(uid, {}).setdefault(_restart_count(pod), []).extend(lines)
            self.pod_changed(uid)

    def modify_job(self, plural: str, namespace: str, name: str, change: Callable[[dict[str, Any]], None]) -> bool:
        with self.cond:
            obj = self.jobs.get((plural, namespace, name))
            if obj is None:
                return False
            change(obj)
            self.record(plural, namespace, "MODIFIED", obj)
            return True

    def delete_job(self, plural: str, namespace: str, name: str, policy: str | None = None) -> bool:
        """Delete the job and, like the garbage collector, its pods (those its controller labelled with its name)."""
        label = kind_at(plural).spec.pod_job_label
        with self.cond:
            obj = self.jobs.pop((plural, namespace, name), None)
            if obj is None:
                return False
            self.deletions.append((plural, namespace, name, policy))
            self.record(plural, namespace, "DELETED", obj)
            for (ns, pod_name), pod in list(self.pods.items()):
                if ns == namespace and (pod["metadata"].get("labels") or {}).get(label) == name:
                    self.delete_pod(ns, pod_name)
            self.cond.notify_all()
            return True

    # Pods change through these, so that their watch sees every change, as the API server's does.

    def add_pod(self, pod: dict[str, Any]) -> None:
        with self.cond:
            meta = pod["metadata"]
            self.pods[(meta["namespace"], meta["name"])] = pod
            self.record("pods", meta["namespace"], "ADDED", pod)

    def change_pod(self, namespace: str, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        with self.cond:
            pod = self.pods[(namespace, name)]
            change(pod)
            self.record("pods", namespace, "MODIFIED", pod)

    def delete_pod(self, namespace: str, name: str) -> bool:
        with self.cond:
            pod = self.pods.pop((namespace, name), None)
            if pod is None:
                return False
            self.record("pods", namespace, "DELETED", pod)
            return True

    def restart_with_compacted_history(self) -> None:
        """Compact history and end every open watch, as a kube-apiserver restarted while etcd was compacted does: a
        watch resumed from a version before the compaction is then answered 410 Gone. A compaction alone ends no open
        watch (the watch cache serves it); a stopping kube-apiserver ends its streams (tests/controlplane/
        test_launch_life.py shows both on the real one)."""
        with self.cond:
            self.bump()  # what other clients wrote meanwhile: history the compaction removes
            self.compacted_rv = int(self.bump())
            self.watch_generation += 1
            self.cond.notify_all()

    def add_event(
        self,
        namespace: str,
        kind: str,
        name: str,
        reason: str,
        message: str,
        type_: str = "Warning",
        *,
        uid: str | None = None,
        stamp: str | None = None,
    ) -> None:
        """Record an event about the object ``kind``/``name``: now, about the object of that name as it is, unless
        ``stamp`` and ``uid`` say it was recorded earlier, about an earlier object of the name."""
        with self.cond:
            stamp = stamp or now_iso()
            self.events.append(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {
                        "name": f"{name}.{uuid.uuid4().hex[:12]}",
                        "namespace": namespace,
                        "creationTimestamp": stamp,
                        "resourceVersion": self.bump(),
                    },
                    "involvedObject": self._reference(namespace, kind, name, uid),
                    "reason": reason,
                    "message": message,
                    "type": type_,
                    "count": 1,
                    "firstTimestamp": stamp,
                    "lastTimestamp": stamp,
                }
            )

    def _reference(self, namespace: str, kind: str, name: str, uid: str | None) -> dict[str, Any]:
        """An event's ``involvedObject``: with the uid of the object so named when it exists, as the recorder's
        reference carries it (k8s.io/client-go@v0.36.3:tools/reference/ref.go, GetReference); an object that was
        never created (a refused pod, a child Job this fake does not keep) has none here."""
        ref = {"kind": kind, "name": name, "namespace": namespace}
        if uid is not None:
            return {**ref, "uid": uid}
        if kind == "Pod":
            found = self.pods.get((namespace, name))
        else:
            found = next(
                (o for (_, ns, n), o in self.jobs.items() if ns == namespace and n == name and o.get("kind") == kind),
                None,
            )
        if found is not None:
            ref["uid"] = found["metadata"]["uid"]
        return ref

    def jobs_of(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self.cond:
            return [copy.deepcopy(o) for (p, ns, _), o in self.jobs.items() if p == plural and ns in (namespace, ns)]

    def fault(
        self, action: str, path: str = "", method: str | None = None, nth: int = 1, times: int = 1, query: str = ""
    ) -> Fault:
        fault = Fault(action=action, path=path, method=method, nth=nth, times=times, query=query)
        with self.cond:
            self.faults.append(fault)
        return fault

    # -- reads -----------------------------------------------------------------------------------

    def served_versions(self, group: str) -> list[str]:
        """The versions of ``group`` that serve a plural, v1 first (the preferred version, as discovery lists it)."""
        own = [vs for p, vs in self.served.items() if group_of(p) == group]
        return sorted({v for versions in own for v in versions}, key=lambda v: v != "v1")


class _Handler(BaseHTTPRequestHandler):
    kube: FakeKube
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
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

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
            code = int(fired.action)
            self._status(
                code, "TooManyRequests" if code == 429 else "InternalError", "injected fault", {"Retry-After": "0"}
            )
            return
        for pattern, handler in _ROUTES:
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

    # -- discovery -------------------------------------------------------------------------------

    def _group_versions(self, group: str) -> list[dict[str, str]]:
        return [{"groupVersion": f"{group}/{v}", "version": v} for v in self.kube.served_versions(group)]

    def api_groups(self, method: str, query: dict[str, str], body: Any) -> None:
        groups = []
        for group in PLURALS_BY_GROUP:
            versions = self._group_versions(group)
            if versions:
                groups.append({"name": group, "versions": versions, "preferredVersion": versions[0]})
        self._send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    def api_group(self, method: str, query: dict[str, str], body: Any, group: str) -> None:
        versions = self._group_versions(group)
        if not versions:
            self._status(404, "NotFound", "the server could not find the requested resource")
            return
        self._send_json(
            200,
            {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": group,
                "versions": versions,
                "preferredVersion": versions[0],
            },
        )

    def api_resources(self, method: str, query: dict[str, str], body: Any, group: str, version: str) -> None:
        plurals = [p for p, vs in self.kube.served.items() if version in vs and group_of(p) == group]
        if not plurals:
            self._status(404, "NotFound", "the server could not find the requested resource")
            return
        resources = [
            {
                "name": p,
                "singularName": KIND_NAMES[p].lower(),
                "namespaced": True,
                "kind": KIND_NAMES[p],
                "verbs": ["create", "delete", "get", "list", "patch", "watch"],
            }
            for p in plurals
        ]
        self._send_json(
            200,
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}",
                "resources": resources,
            },
        )

    def core_api(self, method: str, query: dict[str, str], body: Any) -> None:
        self._send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})

    def core_resources(self, method: str, query: dict[str, str], body: Any) -> None:
        resources = [
            {"name": n, "singularName": s, "namespaced": True, "kind": k, "verbs": ["get", "list", "watch"]}
            for n, s, k in (
                ("pods", "pod", "Pod"),
                ("pods/log", "", "Pod"),
                ("events", "event", "Event"),
                ("configmaps", "configmap", "ConfigMap"),
                ("secrets", "secret", "Secret"),
            )
        ]
        self._send_json(
            200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": resources}
        )

    # -- custom resources ------------------------------------------------------------------------

    def _served(self, version: str, plural: str) -> bool:
        if version not in self.kube.served.get(plural, []):
            self._status(404, "NotFound", f"the server could not find the requested resource ({plural}.{version})")
            return False
        return True

    def collection(self, method: str, query: dict[str, str], body: Any, version: str, ns: str, plural: str) -> None:
        if not self._served(version, plural):
            return
        if method == "POST":
            self._create(version, ns, plural, body)
        elif method == "GET" and query.get("watch", "").lower() in ("true", "1"):
            self._watch(version, ns, plural, query)
        elif method == "GET":
            self._list(version, ns, plural, query)
        else:
            self._status(405, "MethodNotAllowed", method)

    def _create(self, version: str, ns: str, plural: str, body: Any) -> None:
        kube = self.kube
        if not isinstance(body, dict):
            self._status(400, "BadRequest", "body must be an object")
            return
        group = group_of(plural)
        if body.get("apiVersion") != f"{group}/{version}" or body.get("kind") != KIND_NAMES[plural]:
            self._status(400, "BadRequest", f"expected {group}/{version} {KIND_NAMES[plural]}")
            return
        meta = body.setdefault("metadata", {})
        if meta.get("namespace", ns) != ns:
            self._status(400, "BadRequest", "the namespace of the object does not match the namespace of the request")
            return
        with kube.cond:
            known_namespace = ns in kube.namespaces
        if not known_namespace:
            self._status(404, "NotFound", f'namespaces "{ns}" not found')
            return
        # As the API server decodes it: its unknown fields pruned, then the CRD's defaults filled in.
        crd = kube.schemas.get(body["apiVersion"], body["kind"])
        if crd is not None:
            body = defaulted(prepared_for_create(body, crd), crd.schema)
            meta = body["metadata"]
        for webhook in kube.admission:
            webhook(plural, body)
        name = meta.get("name")
        if not name:
            self._status(422, "Invalid", "metadata.name: Required value")
            return
        if not self._valid(plural, body):
            return
        with kube.cond:
            if (plural, ns, name) in kube.jobs:
                self._status(409, "AlreadyExists", f'{plural}.{group} "{name}" already exists')
                return
            # Its generation (1) is prepared_for_create's: a job no CRD serves was refused above.
            meta.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now_iso())
            kube.jobs[(plural, ns, name)] = body
            kube.created.append(copy.deepcopy(body))
            kube.record(plural, ns, "ADDED", body)
            out = copy.deepcopy(body)
        # The operator learns of the job before its creator does: a test that waits for the operator
        # (OperatorSim.join) right after creating a job finds it at work.
        if kube.on_job_created is not None:
            kube.on_job_created(plural, copy.deepcopy(out))
        self._send_json(201, out)

    def _valid(self, plural: str, body: dict[str, Any]) -> bool:
        """Whether the job ``body`` passes the API server's validation (its name, its CRD's schema and rules);
        answers 422 Invalid when it does not."""
        name = body["metadata"]["name"]
        why = name_problem(name)
        errors = [f'metadata.name: Invalid value: "{name}": {why}'] if why else []
        errors += self.kube.schemas.errors(body)
        if not errors:
            return True
        causes = [{"field": e.partition(": ")[0], "message": e.partition(": ")[2]} for e in errors]
        status = status_body(
            422, "Invalid", f'{KIND_NAMES[plural]}.{group_of(plural)} "{name}" is invalid: ' + "; ".join(errors)
        )
        status["details"] = {"name": name, "group": group_of(plural), "kind": KIND_NAMES[plural], "causes": causes}
        self._send_json(422, status)
        return False

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

    def _list(self, version: str, ns: str, plural: str, query: dict[str, str]) -> None:
        selected = self._selected(plural, query)
        if selected is None:
            return
        labels, fields = selected
        with self.kube.cond:
            items = [copy.deepcopy(o) for (p, n, _), o in self.kube.jobs.items() if p == plural and n == ns]
            rv = str(self.kube.rv)
        items = [o for o in items if matches(o, labels, fields)]
        self._send_json(
            200,
            {
                "apiVersion": f"{group_of(plural)}/{version}",
                "kind": f"{KIND_NAMES[plural]}List",
                "items": items,
                "metadata": {"resourceVersion": rv},
            },
        )

    def _watch(self, version: str, ns: str, plural: str, query: dict[str, str]) -> None:
        kube = self.kube
        selected = self._selected(plural, query)
        if selected is None:
            return
        labels, fields = selected
        timeout = float(query.get("timeoutSeconds") or 1800)
        end = time.monotonic() + timeout
        start_rv = query.get("resourceVersion")
        self._start_chunked("application/json")
        with kube.cond:
            kube.stats.opened("watch")
        try:
            bookmarks = query.get("allowWatchBookmarks", "").lower() == "true"
            self._watch_events(kube, ns, plural, labels, fields, start_rv, end, bookmarks, version)
        finally:
            with kube.cond:
                kube.stats.closed("watch")

    def _watch_events(
        self,
        kube: FakeKube,
        ns: str,
        plural: str,
        labels: dict[str, str],
        fields: dict[str, str],
        start_rv: str | None,
        end: float,
        bookmarks: bool = False,
        version: str = "v1",
    ) -> None:
        """Send the watch's events until ``end``. With ``bookmarks``, a BOOKMARK carrying the version of the last
        change of ``plural`` (any object's, selected or not) 2 s before ``end`` and every minute, when it is newer
        than the version the watch started from (k8s.io/apiserver@v0.36.3:pkg/storage/cacher/cache_watcher.go,
        nextBookmarkTime and process: the cacher's bookmark carries its last processed version)."""
        bookmark = _Bookmarks(end) if bookmarks else None
        with kube.cond:
            generation = kube.watch_generation
            if start_rv and start_rv != "0" and int(start_rv) < kube.compacted_rv:
                self._send_event("ERROR", status_body(410, "Expired", f"too old resource version: {start_rv}"))
                self._end_chunked()
                return
            if start_rv in (None, "", "0"):
                # No version: the current state as ADDED events, then what follows.
                if plural == "pods":
                    initial = [o for (n, _), o in kube.pods.items() if n == ns]
                else:
                    initial = [o for (p, n, _), o in kube.jobs.items() if p == plural and n == ns]
                pending = [("ADDED", copy.deepcopy(o)) for o in initial if matches(o, labels, fields)]
                cursor = kube.rv
            else:
                pending, cursor = [], int(start_rv)
            started_at = cursor
        for kind, obj in pending:
            self._send_event(kind, obj)
        while True:
            events: list[tuple[str, dict[str, Any]]] = []
            with kube.cond:
                while not events:
                    if kube.stopping or time.monotonic() >= end:
                        self._end_chunked()
                        return
                    if kube.watch_generation != generation:
                        self._end_chunked()  # the server went away: the client resumes from what it saw
                        return
                    batch = kube.history_after(cursor)
                    if batch:
                        cursor = batch[-1].rv
                        events = [
                            (h.type, h.obj)
                            for h in batch
                            if h.plural == plural and h.namespace == ns and matches(h.obj, labels, fields)
                        ]
                        if not events:
                            continue
                        break
                    if bookmark is not None and bookmark.due(time.monotonic()):
                        newest = kube.last_rv.get(plural, 0)
                        if newest > started_at:
                            events = [("BOOKMARK", _bookmark(plural, version, newest))]
                            break
                    kube.cond.wait(min(0.1, max(0.0, end - time.monotonic())))
            for kind, obj in events:
                self._send_event(kind, obj)

    def _send_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    def runtime_collection(
        self, method: str, query: dict[str, str], body: Any, version: str, ns: str, plural: str
    ) -> None:
        """POST of a namespaced TrainingRuntime (what a launch step creates from a job's own manifest)."""
        if method != "POST" or not isinstance(body, dict):
            self._status(405, "MethodNotAllowed", f"{method} is not served for {plural} here")
            return
        name = (body.get("metadata") or {}).get("name")
        if body.get("kind") != "TrainingRuntime" or not name:
            self._status(400, "BadRequest", "expected a named trainer.kubeflow.org TrainingRuntime")
            return
        if (body.get("metadata") or {}).get("namespace") not in (None, ns):
            self._status(400, "BadRequest", "the namespace of the object does not match the namespace of the request")
            return
        with self.kube.cond:
            if (plural, ns, name) in self.kube.runtimes:
                self._status(409, "AlreadyExists", f'{plural}.{RUNTIME_GROUP} "{name}" already exists')
                return
            obj = copy.deepcopy(body)
            obj["metadata"] = {**obj["metadata"], "namespace": ns, "resourceVersion": self.kube.bump()}
            self.kube.runtimes[(plural, ns, name)] = obj
        self._send_json(201, obj)

    def runtime(self, method: str, query: dict[str, str], body: Any, version: str, *where: str) -> None:
        """GET of a Trainer v2 runtime: ``where`` is (plural, name), or (namespace, plural, name)."""
        ns, plural, name = ("", *where) if len(where) == 2 else where
        if method != "GET":
            self._status(405, "MethodNotAllowed", f"{method} is not served for {plural} here")
            return
        with self.kube.cond:
            obj = copy.deepcopy(self.kube.runtimes.get((plural, ns, name)))
        if obj is None:
            self._status(404, "NotFound", f'{plural}.{RUNTIME_GROUP} "{name}" not found')
        else:
            self._send_json(200, obj)

    def item(
        self, method: str, query: dict[str, str], body: Any, version: str, ns: str, plural: str, name: str
    ) -> None:
        if not self._served(version, plural):
            return
        kube = self.kube
        key = (plural, ns, name)
        if method == "GET":
            with kube.cond:
                obj = copy.deepcopy(kube.jobs.get(key))
            if obj is None:
                self._status(404, "NotFound", f'{plural}.{group_of(plural)} "{name}" not found')
            else:
                self._send_json(200, obj)
        elif method == "DELETE":
            policy = (body or {}).get("propagationPolicy") or query.get("propagationPolicy")
            if kube.delete_job(plural, ns, name, policy):
                self._send_json(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}})
            else:
                self._status(404, "NotFound", f'{plural}.{group_of(plural)} "{name}" not found')
        elif method == "PATCH":
            ctype = self.headers.get("Content-Type", "")
            if "merge-patch" not in ctype:
                self._status(415, "UnsupportedMediaType", f"unsupported patch type {ctype}")
                return
            with kube.cond:
                old = kube.jobs.get(key)
                if old is None:
                    self._status(404, "NotFound", f'{plural}.{group_of(plural)} "{name}" not found')
                    return
                patched = merge_patch(old, body)
                crd = kube.schemas.get(old["apiVersion"], old["kind"])
                if crd is not None:
                    patched = defaulted(prepared_for_update(patched, old, crd), crd.schema)
                if not self._valid(plural, patched):
                    return
                old.clear()
                old.update(patched)
                kube.record(plural, ns, "MODIFIED", old)
                result = copy.deepcopy(old)
            self._send_json(200, result)
        else:
            self._status(405, "MethodNotAllowed", method)

    # -- pods and events -------------------------------------------------------------------------

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
            run = _restart_count(pod) - (1 if query.get("previous", "").lower() == "true" else 0)
            if _waiting(pod) and query.get("previous", "").lower() != "true":
                reason = _waiting(pod)
                self._status(400, "BadRequest", f'container in pod "{name}" is waiting to start: {reason}')
                return
            lines = list(kube.logs.get(uid, {}).get(run, []))
        tail = query.get("tailLines")
        skipped = max(0, len(lines) - int(tail)) if tail is not None else 0  # tailLines: only the last lines
        if query.get("follow", "").lower() != "true":
            lines = lines[skipped:]
            data = "".join(line + "\n" for line in lines).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._start_chunked("text/plain")
        with kube.cond:
            kube.stats.opened("log-follow")
        try:
            self._follow_log(kube, ns, name, uid, run, skipped)
        finally:
            with kube.cond:
                kube.stats.closed("log-follow")

    def _follow_log(self, kube: FakeKube, ns: str, name: str, uid: str, run: int, sent: int) -> None:
        while True:
            with kube.cond:
                current = kube.pods.get((ns, name))
                lines = kube.logs.get(uid, {}).get(run, [])
                fresh = lines[sent:]
                sent = len(lines)
                alive = (
                    current is not None
                    and current["metadata"]["uid"] == uid
                    and _restart_count(current) == run
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


def _bookmark(plural: str, version: str, rv: int) -> dict[str, Any]:
    """A BOOKMARK's object: the kind watched (pods, or a job at ``version``), and only ``rv`` in its metadata."""
    kind, api_version = ("Pod", "v1") if plural == "pods" else (KIND_NAMES[plural], f"{group_of(plural)}/{version}")
    return {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(rv)}}


class _Bookmarks:
    """When a watch ending at ``end`` sends its bookmarks: every minute, and 2 s before its end."""

    EVERY_S = 60.0
    BEFORE_END_S = 2.0

    def __init__(self, end: float) -> None:
        self.end = end
        self.next: float | None = self._after(time.monotonic())

    def _after(self, now: float) -> float | None:
        at = min(now + self.EVERY_S, self.end - self.BEFORE_END_S)
        return at if at > now else None

    def due(self, now: float) -> bool:
        if self.next is None or now < self.next:
            return False
        self.next = self._after(now)
        return True


def _main_status(pod: Mapping[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def _restart_count(pod: Mapping[str, Any]) -> int:
    return int(_main_status(pod).get("restartCount") or 0)


def _terminated(pod: Mapping[str, Any]) -> bool:
    return "terminated" in (_main_status(pod).get("state") or {})


def _waiting(pod: Mapping[str, Any]) -> str | None:
    waiting = (_main_status(pod).get("state") or {}).get("waiting")
    return str(waiting.get("reason")) if waiting else None


def _alternatives(names: Iterable[str]) -> str:
    return "|".join(map(re.escape, names))


_NS = r"/namespaces/([^/]+)"
_ROUTES: Sequence[tuple[str, Callable[..., None]]] = (
    (r"/apis", _Handler.api_groups),
    (rf"/apis/({_alternatives(PLURALS_BY_GROUP)})", _Handler.api_group),
    (rf"/apis/({_alternatives(PLURALS_BY_GROUP)})/(v[a-z0-9]+)", _Handler.api_resources),
    (r"/api", _Handler.core_api),
    (r"/api/v1", _Handler.core_resources),
    # The jobs each API group serves: a collection and its items.
    *(
        (rf"/apis/{re.escape(group)}/(v[a-z0-9]+){_NS}/({_alternatives(plurals)}){item}", handler)
        for group, plurals in PLURALS_BY_GROUP.items()
        for item, handler in (("", _Handler.collection), ("/([^/]+)", _Handler.item))
    ),
    # Trainer's runtimes, which a TrainJob names (its cluster dependency): read, and created from a job's manifest.
    (rf"/apis/{re.escape(RUNTIME_GROUP)}/(v[a-z0-9]+)/(clustertrainingruntimes)/([^/]+)", _Handler.runtime),
    (rf"/apis/{re.escape(RUNTIME_GROUP)}/(v[a-z0-9]+){_NS}/(trainingruntimes)/([^/]+)", _Handler.runtime),
    (rf"/apis/{re.escape(RUNTIME_GROUP)}/(v[a-z0-9]+){_NS}/(trainingruntimes)", _Handler.runtime_collection),
    (rf"/api/v1{_NS}/pods", _Handler.pods),
    (rf"/api/v1{_NS}/pods/([^/]+)", _Handler.pod),
    (rf"/api/v1{_NS}/pods/([^/]+)/log", _Handler.pod_log),
    (rf"/api/v1{_NS}/events", _Handler.events),
    (rf"/api/v1{_NS}/(configmaps|secrets)/([^/]+)", _Handler.core_object),
)


def iter_history(kube: FakeKube) -> Iterator[tuple[str, str]]:
    """(type, name) of every recorded change, for assertions."""
    with kube.cond:
        items = list(kube.history)
    for h in items:
        yield h.type, h.obj["metadata"]["name"]
