"""A node for the real control plane, standing in for the kubelet: it registers a Ready Node, binds the pods it is
given and moves them through their phases with an outcome per pod the test chooses (run, exit 0, fail with a code,
unschedulable); nothing runs. It also serves the kubelet's log endpoint, answering the outcome's log lines.

What it reports follows kubernetes@v1.36.3's kubelet (pkg/kubelet/kubelet_pods.go, generateAPIPodStatus: phases,
container states, restarts under OnFailure/Always; pkg/kubelet/kuberuntime/kuberuntime_container.go: a
FallbackToLogsOnError message) and scheduler (defaultbinder's binding; schedule_one.go's Unschedulable condition).
Why not kwok (sigs.k8s.io/kwok@v0.8.0): its stages complete only pods owned by a batch Job
(kustomize/stage/pod/general/pod-complete.yaml), and a per-pod outcome would have to be written into the manifest.
"""

from __future__ import annotations

import datetime
import http.server
import itertools
import json
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from kftrain.backends.kubernetes.pod_state import pod_label
from kftrain.job.kinds import KINDS
from testbed.controlplane import pki
from testbed.controlplane.cluster import ControlPlane

NODE_NAME = "kftrain-node"
# kubernetes@v1.36.3:pkg/kubelet/kuberuntime/kuberuntime_container.go (maxTerminationMessageLogLines/Length)
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
POLL_S = 0.1
# Between a container's restart and its next failure. The kubelet waits 10 s, doubling to 5 min
# (kubernetes@v1.36.3:pkg/kubelet/kubelet.go, backOffPeriod and MaxContainerBackOff); a controller reads each
# restartCount in between either way.
RESTART_PACE_S = 0.3
# Where each kind's operator names a pod's job (KindSpec.pod_job_label).
_JOB_NAME_LABELS = tuple(sorted({k.spec.pod_job_label for k in KINDS}))
Pod = dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """What the node does with a pod: keep it running, end it, or never bind it. A failing replica fails
    ``failures`` times, then does ``then`` (``run`` or ``succeed``): restarted in its pod, each restart
    :data:`RESTART_PACE_S` after the last (the kubelet's CrashLoopBackOff, shortened); under restartPolicy Never, once
    in each pod that replaces the last (counted by job and replica label)."""

    action: str  # run | succeed | fail | unschedulable
    exit_code: int = 0
    log: tuple[str, ...] = ()
    message: str = ""
    failures: int = 1
    then: str = "run"


RUN = Outcome("run")
SUCCEED = Outcome("succeed")


def fail(exit_code: int, *log: str, failures: int = 1, then: str = "run") -> Outcome:
    """The main container (the first) exits with ``exit_code``, having printed ``log``; restarted in its pod, it does
    so ``failures`` times, then ``then``."""
    if exit_code == 0:
        raise ValueError("a failure's exit code is not 0")
    if then not in ("run", "succeed"):
        raise ValueError(f"then: {then!r}; run or succeed")
    return Outcome("fail", exit_code=exit_code, log=log, failures=failures, then=then)


def unschedulable(message: str = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.") -> Outcome:
    return Outcome("unschedulable", message=message)


class Plans:
    """A test module's outcomes, by the name of a pod's job and the pod's replica label (``worker-1``): given to a
    :class:`NodeAgent` as its ``outcome``; a pod of a job without a plan, or of a replica it leaves out, runs."""

    def __init__(self) -> None:
        self._by_job: dict[str, dict[str, Outcome]] = {}

    def __setitem__(self, job: str, plan: Mapping[str, Outcome]) -> None:
        self._by_job[job] = dict(plan)

    def __call__(self, pod: Pod) -> Outcome:
        return self._by_job.get(job_of(pod), {}).get(pod_label(pod), RUN)


def job_of(pod: Pod) -> str:
    """The name of the job whose pod ``pod`` is, from the label each kind's operator puts on its pods."""
    labels = pod["metadata"].get("labels") or {}
    return next((labels[k] for k in _JOB_NAME_LABELS if k in labels), "")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeAgent:
    """The node ``name``; :meth:`start` registers it and follows the pods, :meth:`stop` ends that (the Node stays).

    ``outcome`` decides each pod's fate when the agent first sees it (default: it runs until told otherwise);
    :meth:`decide` changes a pod's, also while it runs."""

    def __init__(
        self, plane: ControlPlane, name: str = NODE_NAME, outcome: Callable[[Pod], Outcome] = lambda pod: RUN
    ) -> None:
        self.plane = plane
        self.name = name
        self._default = outcome
        # By (namespace, pod name): the uid of the pod it was decided for (None: decided before the agent saw it) and
        # the outcome. A pod made again with the name of one gone (a job of the same name) is a new pod: decided anew.
        self._decided: dict[tuple[str, str], tuple[str | None, Outcome]] = {}
        self._lock = threading.Lock()
        self._log_changed = threading.Condition(self._lock)  # a line printed, an outcome decided, the agent stopped
        self._printed: dict[tuple[str, str], list[str]] = {}  # what each pod's main container printed while running
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ips = (f"10.244.{n // 250}.{n % 250 + 2}" for n in itertools.count())
        self._pod_ips: dict[str, str] = {}
        self._first_container: dict[tuple[str, str], str] = {}
        self._last_failed: dict[str, float] = {}  # by pod uid: when its container last failed (monotonic)
        self.failures: list[Pod] = []  # every failure the node reported: the pod as it was just before
        # By (namespace, job, replica label): the failed pods of that replica that were not restarted in place.
        self._replaced: Counter[tuple[str, str, str]] = Counter()
        self.errors: list[str] = []

    # -- the test's side --------------------------------------------------------------------------------

    def decide(self, namespace: str, pod: str, outcome: Outcome) -> None:
        with self._lock:
            uid = self._decided.get((namespace, pod), (None, RUN))[0]
            self._decided[(namespace, pod)] = (uid, outcome)
            self._log_changed.notify_all()

    def prints(self, namespace: str, pod: str, *lines: str) -> None:
        """The pod's main container prints ``lines`` while it runs: a read of its log shows them, and a followed log
        gets them as they come, as the kubelet streams a running container's log."""
        with self._lock:
            self._printed.setdefault((namespace, pod), []).extend(lines)
            self._log_changed.notify_all()

    def __enter__(self) -> NodeAgent:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._api_client = self.plane.api_client()
        self._core = client.CoreV1Api(self._api_client)
        self._logs = _LogServer(self)
        self._register()
        self._thread = threading.Thread(target=self._loop, name=f"node-agent-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._log_changed.notify_all()  # a followed log ends
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._logs.close()
        self._api_client.close()

    def log_lines(self, namespace: str, pod: str, container: str) -> list[str]:
        """What the pod's container printed: for the main (first) container, the lines it :meth:`prints` while it
        runs and then its outcome's; nothing for another."""
        with self._lock:
            return self._log(namespace, pod, container)[0]

    def log_after(self, namespace: str, pod: str, container: str, seen: int, wait_s: float) -> tuple[list[str], bool]:
        """The container's lines past the first ``seen``, waiting up to ``wait_s`` for one; and whether its log has
        ended (the container has, or the agent stopped)."""

        def more_or_ended() -> bool:
            lines, ended = self._log(namespace, pod, container)
            return len(lines) > seen or ended

        with self._lock:
            self._log_changed.wait_for(more_or_ended, wait_s)
            lines, ended = self._log(namespace, pod, container)
            return lines[seen:], ended

    def _log(self, namespace: str, pod: str, container: str) -> tuple[list[str], bool]:
        outcome = self._decided.get((namespace, pod), (None, None))[1]
        if outcome is None or container != self._first_container.get((namespace, pod)):
            return [], self._stop.is_set()
        ended = outcome.action in ("succeed", "fail")
        lines = self._printed.get((namespace, pod), []) + (list(outcome.log) if ended else [])
        return lines, ended or self._stop.is_set()

    # -- the node ---------------------------------------------------------------------------------------

    def _register(self) -> None:
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        try:
            self._core.create_node({"metadata": {"name": self.name, "labels": labels}}, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise
        node = self._read("GET", f"/api/v1/nodes/{self.name}")
        resources = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        node["status"] = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": _now(),
                    "lastTransitionTime": _now(),
                }
            ],
            # InternalIP only: the API server reaches the kubelet at the first address of its preferred types, and a
            # Hostname address (first by default) would need DNS.
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self._logs.port}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
                "kubeletVersion": "v0.0.0-kftrain-node-agent",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        self._read("PUT", f"/api/v1/nodes/{self.name}/status", node)

    def _read(self, method: str, path: str, body: Any = None) -> Any:
        """One request as the admin, its JSON answer."""
        response = self._api_client.call_api(
            path,
            method,
            body=body,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        return json.loads(response[0].data or b"null")

    # -- the pods ---------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                pods = self._read("GET", "/api/v1/pods")["items"]
                for pod in pods:
                    self._reconcile(pod)
            except ApiException as exc:
                if exc.status not in (404, 409):  # a pod gone, or changed since read: the next round sees it
                    self.errors.append(f"{exc.status} {exc.reason}: {exc.body}")
            except Exception as exc:  # the thread must go on; the test reads .errors
                self.errors.append(repr(exc))

    def _outcome(self, pod: Pod) -> Outcome:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        with self._lock:
            self._first_container[key] = pod["spec"]["containers"][0]["name"]
            uid = pod["metadata"]["uid"]
            decided_for, outcome = self._decided.get(key, (uid, None))
            if outcome is None or decided_for not in (None, uid):
                outcome = self._default(pod)
            self._decided[key] = (uid, outcome)
            return outcome

    def _reconcile(self, pod: Pod) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        where = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        if meta.get("deletionTimestamp"):
            if spec.get("nodeName") in (None, self.name):
                self._read("DELETE", where, {"gracePeriodSeconds": 0})
            return
        outcome = self._outcome(pod)
        if not spec.get("nodeName"):
            if outcome.action == "unschedulable":
                self._mark_unschedulable(pod, where, outcome.message)
            else:
                binding = {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": self.name},
                }
                self._read("POST", f"{where}/binding", binding)
            return
        if spec["nodeName"] != self.name or status.get("phase") in ("Succeeded", "Failed"):
            return
        if status.get("phase") != "Running":
            self._write_status(pod, where, running_status(pod, self._pod_ip(meta["uid"])))
            return
        restarts = _restart_count(status)
        replica = (meta["namespace"], job_of(pod), pod_label(pod))
        paced = time.monotonic() - self._last_failed.get(meta["uid"], -RESTART_PACE_S) >= RESTART_PACE_S
        if outcome.action == "fail" and restarts + self._replaced[replica] < outcome.failures:
            if paced:
                restarted = spec.get("restartPolicy", "Always") != "Never"
                self._write_status(pod, where, ended_status(pod, outcome, restarts + 1 if restarted else 0))
                self._last_failed[meta["uid"]] = time.monotonic()
                self._replaced[replica] += not restarted
                self.failures.append(pod)
        elif outcome.action == "succeed" or (outcome.action == "fail" and outcome.then == "succeed" and paced):
            self._write_status(pod, where, ended_status(pod, SUCCEED, restarts))

    def _pod_ip(self, uid: str) -> str:
        if uid not in self._pod_ips:
            self._pod_ips[uid] = next(self._ips)
        return self._pod_ips[uid]

    def _mark_unschedulable(self, pod: Pod, where: str, message: str) -> None:
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions):
            return
        status = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": _now(),
                }
            ],
        }
        self._write_status(pod, where, status)

    def _write_status(self, pod: Pod, where: str, status: Mapping[str, Any]) -> None:
        body = dict(pod)
        body["status"] = {**(pod.get("status") or {}), **status}
        self._read("PUT", f"{where}/status", body)


class _LogServer:
    """The kubelet's log endpoint for ``agent``'s pods, over HTTPS on a free loopback port."""

    def __init__(self, agent: NodeAgent) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                query = urllib.parse.parse_qs(url.query)
                lines = agent.log_lines(parts[1], parts[2], parts[3])
                seen = len(lines)
                tail = query.get("tailLines")
                if tail:
                    lines = lines[-int(tail[0]) :] if int(tail[0]) > 0 else []
                body = "".join(f"{line}\n" for line in lines).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                if query.get("follow") != ["true"]:
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                # Followed: the lines as the container prints them, until it ends; the body ends with the
                # connection (HTTP/1.0), as the kubelet's stream ends when the container does.
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                ended = False
                while not ended:
                    more, ended = agent.log_after(parts[1], parts[2], parts[3], seen, wait_s=1.0)
                    seen += len(more)
                    if more:
                        try:
                            self.wfile.write("".join(f"{line}\n" for line in more).encode())
                            self.wfile.flush()
                        except OSError:  # the API server closed the stream: its client stopped following
                            return

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory(prefix="kftrain-node-") as folder:
            cert, key = pki.write_self_signed(Path(folder), NODE_NAME)
            context.load_cert_chain(cert, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="node-agent-logs", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _restart_count(status: Mapping[str, Any]) -> int:
    """How many times the pod's main container has been restarted."""
    return int((status.get("containerStatuses") or [{}])[0].get("restartCount", 0))


def _container_id(pod: Pod, name: str) -> str:
    return f"containerd://{pod['metadata']['uid']}-{name}"


def _container_status(
    pod: Pod, container: Mapping[str, Any], state: dict[str, Any], *, ready: bool, started: bool | None = None
) -> dict[str, Any]:
    """A container's status in ``state`` (an init container's has no ``started``)."""
    status = {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "containerID": _container_id(pod, container["name"]),
        "ready": ready,
        "restartCount": 0,
        "state": state,
    }
    if started is not None:
        status["started"] = started
    return status


def _conditions(ready: bool) -> list[dict[str, Any]]:
    now = _now()
    value = "True" if ready else "False"
    return [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": value, "lastTransitionTime": now},
        {"type": "Ready", "status": value, "lastTransitionTime": now},
    ]


def running_status(pod: Pod, pod_ip: str) -> dict[str, Any]:
    """Every init container done (exit 0), every container running."""
    now = _now()
    spec = pod["spec"]
    done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
    init = [_container_status(pod, c, done, ready=False) for c in spec.get("initContainers") or []]
    running = {"running": {"startedAt": now}}
    containers = [_container_status(pod, c, running, ready=True, started=True) for c in spec["containers"]]
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": _conditions(ready=True),
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": now,
        "containerStatuses": containers,
        "qosClass": (pod.get("status") or {}).get("qosClass", "BestEffort"),
    }
    if init:
        status["initContainerStatuses"] = init
    return status


def ended_status(pod: Pod, outcome: Outcome, restarts: int = 0) -> dict[str, Any]:
    """Every container exited 0 (succeed), or the first exited with the outcome's code (fail): the pod Failed, or,
    when its restart policy restarts the container, Running with the exit in lastState and ``restarts`` as the
    container's restartCount. A pod that succeeds keeps the ``restarts`` it had."""
    now = _now()
    spec = pod["spec"]
    statuses = []
    for i, c in enumerate(spec["containers"]):
        code = outcome.exit_code if outcome.action == "fail" and i == 0 else 0
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": "Error" if code else "Completed",
            "startedAt": now,
            "finishedAt": now,
            "containerID": _container_id(pod, c["name"]),
        }
        if code and c.get("terminationMessagePolicy") == "FallbackToLogsOnError" and outcome.log:
            tail = "\n".join(outcome.log[-FALLBACK_LOG_LINES:])
            terminated["message"] = tail.encode()[-FALLBACK_LOG_BYTES:].decode(errors="ignore")
        statuses.append(_container_status(pod, c, {"terminated": terminated}, ready=False, started=False))
    statuses[0]["restartCount"] = restarts
    if outcome.action == "fail" and spec.get("restartPolicy", "Always") != "Never":
        first = statuses[0]
        first.update(
            ready=True,
            started=True,
            lastState={"terminated": first["state"]["terminated"]},
            state={"running": {"startedAt": now}},
        )
        for other in statuses[1:]:
            other.update(ready=True, started=True, state={"running": {"startedAt": now}})
        return {"phase": "Running", "containerStatuses": statuses}
    return {
        "phase": "Failed" if outcome.action == "fail" else "Succeeded",
        "conditions": _conditions(ready=False),
        "containerStatuses": statuses,
    }
