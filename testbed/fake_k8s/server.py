"""A fake Kubernetes API server, over real HTTP, for the real ``kubernetes`` client: the cluster's state.

:class:`FakeKube` holds the state (jobs, pods and their logs, events, ConfigMaps, Secrets, Trainer's runtimes, the
history of changes that watches read), changes it as the cluster would, and serves it through the request handler
of :mod:`testbed.fake_k8s.routes` (discovery, custom resources, watches, core objects each in their own module).
tests/controlplane/test_fake_api_server.py compares it with a real kube-apiserver. A simulated operator
(:mod:`testbed.fake_k8s.operator`) reacts to created jobs.
"""

from __future__ import annotations

import base64
import bisect
import copy
import itertools
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from testbed.fake_k8s.accounting import Fault, Stats
from testbed.fake_k8s.api import DEFAULT_SERVED, group_of, kind_at, now_iso
from testbed.fake_k8s.core import restart_count
from testbed.fake_k8s.routes import Handler
from testbed.fake_k8s.state import History
from testbed.reference import schemas_in

__all__ = ["FakeKube", "Fault", "Stats", "iter_history"]


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
        self.history: list[History] = []
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

        class Bound(Handler):
            kube = fake

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Bound)
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
        self.history.append(History(self.rv, plural, namespace, kind, copy.deepcopy(obj)))
        self._history_rvs.append(self.rv)
        self.cond.notify_all()
        if plural == "pods":
            self.pod_changed(obj["metadata"]["uid"])

    def history_after(self, rv: int) -> list[History]:
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
            self.logs.setdefault(uid, {}).setdefault(restart_count(pod), []).extend(lines)
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
        self,
        action: str,
        path: str = "",
        method: str | None = None,
        nth: int = 1,
        times: int = 1,
        query: str = "",
        retry_after: str = "0",
    ) -> Fault:
        fault = Fault(action, path, method, nth, times, query, retry_after)
        with self.cond:
            self.faults.append(fault)
        return fault

    # -- reads -----------------------------------------------------------------------------------

    def served_versions(self, group: str) -> list[str]:
        """The versions of ``group`` that serve a plural, v1 first (the preferred version, as discovery lists it)."""
        own = [vs for p, vs in self.served.items() if group_of(p) == group]
        return sorted({v for versions in own for v in versions}, key=lambda v: v != "v1")


def iter_history(kube: FakeKube) -> Iterator[tuple[str, str]]:
    """(type, name) of every recorded change, for assertions."""
    with kube.cond:
        items = list(kube.history)
    for h in items:
        yield h.type, h.obj["metadata"]["name"]
