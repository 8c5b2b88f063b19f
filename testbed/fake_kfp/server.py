"""A fake Kubeflow Pipelines API server (v2beta1 REST over real HTTP) for the real ``kfp.Client``.

It serves what ``kfp.Client`` 2.17 calls for experiments, pipelines (multipart upload of a pipeline
and of a version, list, get), pipeline versions, runs and recurring runs, with the server's JSON
shapes (snake_case fields, proto3 JSON: empty lists left out, int64 as strings). Every request is
recorded (method, path, query, headers, JSON body, uploaded files) so tests can assert on what the
client sent. A created run moves through ``run_states`` one step per ``GET`` of it.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testbed.http_answer import send_json

API = "/apis/v2beta1"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: Any = None  # parsed JSON, when JSON
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # form field -> (filename, content)


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_multipart(content_type: str, body: bytes) -> dict[str, tuple[str, bytes]]:
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    out: dict[str, tuple[str, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        out[str(name)] = (part.get_filename() or "", payload if isinstance(payload, bytes) else b"")
    return out


def matches_filter(obj: dict[str, Any], raw: str | None) -> bool:
    """The EQUALS / NOT_EQUALS / IN predicates of a v2beta1 Filter on string fields."""
    if not raw:
        return True
    spec = json.loads(raw)
    for pred in spec.get("predicates", []):
        key = pred["key"]
        value = obj.get(key, obj.get("display_name") if key == "name" else None)
        want = pred.get("stringValue", pred.get("string_value"))
        op = pred.get("operation") or pred.get("op")
        if op in ("EQUALS", 1) and value != want:
            return False
        if op in ("NOT_EQUALS", 2) and value == want:
            return False
        if op in ("IN", 7):
            values = pred.get("stringValues", pred.get("string_values", {})).get("values", [])
            if value not in values:
                return False
    return True


class FakeKFP:
    """The fake server. ``start()`` it; ``url`` is what ``kfp.Client(host=...)`` takes."""

    def __init__(self, *, multi_user: bool = False, default_page_size: int = 10, max_page_size: int = 200) -> None:
        self.multi_user = multi_user
        self.default_page_size = default_page_size
        self.max_page_size = max_page_size  # larger page_size requests get this many (clients must page)
        self.required_token: str | None = None  # when set, other requests get 401
        self.faults: list[tuple[str, str, int]] = []  # (method, path regex after /apis/v2beta1, status), used once
        self.run_states: list[str] = ["PENDING", "RUNNING", "SUCCEEDED"]
        self.lock = threading.RLock()
        self.requests: list[Request] = []
        self.experiments: dict[str, dict[str, Any]] = {}
        self.pipelines: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, dict[str, Any]] = {}  # version id -> version
        self.packages: dict[str, bytes] = {}  # version id -> uploaded file
        self.runs: dict[str, dict[str, Any]] = {}
        self.run_progress: dict[str, int] = {}
        self.recurring_runs: dict[str, dict[str, Any]] = {}
        self._clock = itertools.count()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FakeKFP:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # keep-alive + small writes would wait for delayed ACKs (40 ms each)
            wbufsize = 1 << 16  # headers and body leave in one write (flushed after each request)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                fake._dispatch(self)

            do_GET = do_POST = do_DELETE = do_PATCH = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-kfp", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the fake first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- what the tests look at --------------------------------------------------------------------

    def calls(self, method: str, path_pattern: str) -> list[Request]:
        """Recorded requests with this method whose path fully matches the regex (after /apis/v2beta1)."""
        regex = re.compile(re.escape(API) + path_pattern + "$")
        with self.lock:
            return [r for r in self.requests if r.method == method and regex.match(r.path)]

    def fail(self, method: str, path_pattern: str, status: int, times: int = 1) -> None:
        """The next ``times`` matching requests answer ``status`` (before doing anything)."""
        with self.lock:
            self.faults += [(method, path_pattern, status)] * times

    def _maybe_fail(self, req: Request) -> None:
        for i, (method, pattern, status) in enumerate(self.faults):
            if method == req.method and re.fullmatch(re.escape(API) + pattern, req.path):
                del self.faults[i]
                raise ApiError(status, f"injected fault {status}")

    def add_experiment(self, name: str, namespace: str = "") -> dict[str, Any]:
        with self.lock:
            return self._create_experiment({"display_name": name, "namespace": namespace})

    def add_pipeline(self, name: str, package: bytes = b"{}", namespace: str = "") -> dict[str, Any]:
        with self.lock:
            return self._create_pipeline(name, "", namespace, "pipeline.yaml", package)

    def add_version(self, pipeline_id: str, name: str, package: bytes = b"{}") -> dict[str, Any]:
        with self.lock:
            return self._create_version(pipeline_id, name, "", "pipeline.yaml", package)

    # -- dispatch ----------------------------------------------------------------------------------

    def _dispatch(self, handler: BaseHTTPRequestHandler) -> None:
        split = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in handler.headers.items()}
        request = Request(handler.command, split.path, query, headers)
        content_type = headers.get("content-type", "")
        if content_type.startswith("multipart/form-data"):
            request.files = parse_multipart(content_type, raw)
        elif raw:
            try:
                request.body = json.loads(raw)
            except ValueError:
                request.body = raw.decode(errors="replace")
        with self.lock:
            self.requests.append(request)
            try:
                if self.required_token is not None and headers.get("authorization") != f"Bearer {self.required_token}":
                    raise ApiError(401, "Unauthenticated: bad or missing bearer token")
                self._maybe_fail(request)
                status, payload = 200, self._route(request)
            except ApiError as exc:
                status, payload = exc.status, {"error": exc.message, "code": exc.status, "message": exc.message}
        send_json(handler, status, payload)

    def _route(self, req: Request) -> Any:
        path = req.path
        if not path.startswith(API):
            raise ApiError(404, f"no route {path}")
        rest = path[len(API) :]
        routes: list[tuple[str, str, Callable[..., Any]]] = [
            ("GET", r"/healthz", lambda: {"multi_user": self.multi_user, "pipeline_store": "database"}),
            ("POST", r"/experiments", lambda: self._create_experiment(req.body or {})),
            ("GET", r"/experiments", lambda: self._list("experiments", self.experiments, req)),
            ("GET", r"/experiments/(?P<id>[^/:]+)", lambda id: self._get(self.experiments, id, "experiment")),
            ("POST", r"/pipelines/upload", lambda: self._upload_pipeline(req)),
            ("POST", r"/pipelines/upload_version", lambda: self._upload_version(req)),
            ("GET", r"/pipelines", lambda: self._list("pipelines", self.pipelines, req)),
            ("GET", r"/pipelines/(?P<id>[^/]+)", lambda id: self._get(self.pipelines, id, "pipeline")),
            ("GET", r"/pipelines/(?P<id>[^/]+)/versions", lambda id: self._list_versions(id, req)),
            ("GET", r"/pipelines/(?P<pid>[^/]+)/versions/(?P<id>[^/]+)", lambda pid, id: self._get_version(pid, id)),
            ("POST", r"/runs", lambda: self._create_run(req.body or {})),
            ("GET", r"/runs", lambda: self._list("runs", self.runs, req)),
            ("GET", r"/runs/(?P<id>[^/:]+)", lambda id: self._get_run(id)),
            ("POST", r"/recurringruns", lambda: self._create_recurring_run(req.body or {})),
            ("GET", r"/recurringruns", lambda: self._list("recurringRuns", self.recurring_runs, req)),
            ("GET", r"/recurringruns/(?P<id>[^/:]+)", lambda id: self._get(self.recurring_runs, id, "recurring run")),
            ("POST", r"/recurringruns/(?P<id>[^/:]+):enable", lambda id: self._set_mode(id, True)),
            ("POST", r"/recurringruns/(?P<id>[^/:]+):disable", lambda id: self._set_mode(id, False)),
            ("DELETE", r"/recurringruns/(?P<id>[^/:]+)", lambda id: self._delete_recurring_run(id)),
        ]
        for method, pattern, action in routes:
            match = re.fullmatch(pattern, rest)
            if match and method == req.method:
                return action(**match.groupdict())
        raise ApiError(404, f"no route {req.method} {path}")

    # -- helpers -----------------------------------------------------------------------------------

    def _stamp(self) -> str:
        # Strictly increasing creation times (sorting by created_at must be deterministic).
        tick = next(self._clock)
        return datetime.fromtimestamp(1_700_000_000 + tick, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _get(self, table: dict[str, dict[str, Any]], id: str, what: str) -> dict[str, Any]:
        if id not in table:
            raise ApiError(404, f"{what} {id} not found")
        return copy.deepcopy(table[id])

    def _list(self, key: str, table: dict[str, dict[str, Any]], req: Request, extra: Any = None) -> dict[str, Any]:
        q = req.query
        items = [o for o in table.values() if matches_filter(o, q.get("filter"))]
        if extra is not None:
            items = [o for o in items if extra(o)]
        if q.get("namespace"):
            items = [o for o in items if o.get("namespace", "") in (q["namespace"], "")]
        if q.get("experiment_id"):
            items = [o for o in items if o.get("experiment_id") == q["experiment_id"]]
        sort_by = q.get("sort_by") or ""
        if sort_by:
            name, _, order = sort_by.partition(" ")
            items.sort(key=lambda o: str(o.get(name, "")), reverse=order.strip() == "desc")
        size = min(int(q.get("page_size") or 0) or self.default_page_size, self.max_page_size)
        start = int(q.get("page_token") or 0)
        page = items[start : start + size]
        out: dict[str, Any] = {"total_size": len(items)}
        if page:
            out[key] = copy.deepcopy(page)
        if start + size < len(items):
            out["next_page_token"] = str(start + size)
        return out

    # -- experiments -------------------------------------------------------------------------------

    def _create_experiment(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("display_name")
        if not name:
            raise ApiError(400, "experiment display_name is required")
        if any(
            e["display_name"] == name and e["namespace"] == body.get("namespace", "") for e in self.experiments.values()
        ):
            raise ApiError(409, f"experiment {name} already exists")
        exp = {
            "experiment_id": str(uuid.uuid4()),
            "display_name": name,
            "description": body.get("description") or "",
            "namespace": body.get("namespace") or "",
            "created_at": self._stamp(),
            "storage_state": "AVAILABLE",
        }
        self.experiments[exp["experiment_id"]] = exp
        return copy.deepcopy(exp)

    # -- pipelines ---------------------------------------------------------------------------------

    def _create_pipeline(
        self, name: str, description: str, namespace: str, filename: str, package: bytes
    ) -> dict[str, Any]:
        if any(p["display_name"] == name for p in self.pipelines.values()):
            raise ApiError(409, f"Failed to create a pipeline: a pipeline named {name} already exists")
        pipeline = {
            "pipeline_id": str(uuid.uuid4()),
            "name": name,
            "display_name": name,
            "description": description,
            "namespace": namespace,
            "created_at": self._stamp(),
        }
        self.pipelines[pipeline["pipeline_id"]] = pipeline
        self._create_version(pipeline["pipeline_id"], name, description, filename, package)
        return copy.deepcopy(pipeline)

    def _create_version(
        self, pipeline_id: str, name: str, description: str, filename: str, package: bytes
    ) -> dict[str, Any]:
        if pipeline_id not in self.pipelines:
            raise ApiError(404, f"pipeline {pipeline_id} not found")
        if any(v["pipeline_id"] == pipeline_id and v["display_name"] == name for v in self.versions.values()):
            raise ApiError(409, f"Failed to create a pipeline version: {name} already exists")
        version = {
            "pipeline_id": pipeline_id,
            "pipeline_version_id": str(uuid.uuid4()),
            "name": name,
            "display_name": name,
            "description": description,
            "created_at": self._stamp(),
            "package_url": {"pipeline_url": f"file://{filename}"},
        }
        self.versions[version["pipeline_version_id"]] = version
        self.packages[version["pipeline_version_id"]] = package
        return copy.deepcopy(version)

    def _uploaded(self, req: Request) -> tuple[str, bytes]:
        if "uploadfile" not in req.files:
            raise ApiError(400, "Failed to read the uploaded file: uploadfile is missing")
        return req.files["uploadfile"]

    def _upload_pipeline(self, req: Request) -> dict[str, Any]:
        filename, content = self._uploaded(req)
        name = req.query.get("name") or req.query.get("display_name") or filename
        return self._create_pipeline(
            name, req.query.get("description", ""), req.query.get("namespace", ""), filename, content
        )

    def _upload_version(self, req: Request) -> dict[str, Any]:
        filename, content = self._uploaded(req)
        pipeline_id = req.query.get("pipelineid")
        if not pipeline_id:
            raise ApiError(400, "pipelineid is required")
        name = req.query.get("name") or req.query.get("display_name") or filename
        return self._create_version(pipeline_id, name, req.query.get("description", ""), filename, content)

    def _list_versions(self, pipeline_id: str, req: Request) -> dict[str, Any]:
        if pipeline_id not in self.pipelines:
            raise ApiError(404, f"pipeline {pipeline_id} not found")
        return self._list("pipeline_versions", self.versions, req, extra=lambda v: v["pipeline_id"] == pipeline_id)

    def _get_version(self, pipeline_id: str, version_id: str) -> dict[str, Any]:
        version = self._get(self.versions, version_id, "pipeline version")
        if version["pipeline_id"] != pipeline_id:
            raise ApiError(404, f"pipeline version {version_id} not found in pipeline {pipeline_id}")
        return version

    # -- runs --------------------------------------------------------------------------------------

    def _check_reference(self, body: dict[str, Any]) -> None:
        ref = body.get("pipeline_version_reference")
        if not ref and not body.get("pipeline_spec"):
            raise ApiError(400, "a run needs a pipeline_version_reference or a pipeline_spec")
        if ref:
            version = self.versions.get(ref.get("pipeline_version_id", ""))
            if version is None or version["pipeline_id"] != ref.get("pipeline_id"):
                raise ApiError(404, f"pipeline version {ref} not found")
        if body.get("experiment_id") and body["experiment_id"] not in self.experiments:
            raise ApiError(404, f"experiment {body['experiment_id']} not found")

    def _create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        self._check_reference(body)
        run = copy.deepcopy(body)
        run.update(
            run_id=str(uuid.uuid4()),
            created_at=self._stamp(),
            state=self.run_states[0],
            state_history=[{"state": self.run_states[0], "update_time": now_iso()}],
            storage_state="AVAILABLE",
        )
        self.runs[run["run_id"]] = run
        self.run_progress[run["run_id"]] = 0
        return copy.deepcopy(run)

    def _get_run(self, run_id: str) -> dict[str, Any]:
        run = self._get(self.runs, run_id, "run")
        # Each GET moves the run one state along its script.
        step = min(self.run_progress[run_id], len(self.run_states) - 1)
        self.run_progress[run_id] += 1
        state = self.run_states[step]
        self.runs[run_id]["state"] = run["state"] = state
        if state == "FAILED":
            run["error"] = {"code": 2, "message": "step train failed with exit code 1"}
        return run

    # -- recurring runs ----------------------------------------------------------------------------

    def _create_recurring_run(self, body: dict[str, Any]) -> dict[str, Any]:
        self._check_reference(body)
        trigger = body.get("trigger") or {}
        if bool(trigger.get("cron_schedule")) == bool(trigger.get("periodic_schedule")):
            raise ApiError(400, "exactly one of cron_schedule and periodic_schedule is required")
        cron = (trigger.get("cron_schedule") or {}).get("cron")
        if cron is not None and len(cron.split()) != 6:
            raise ApiError(400, f"invalid cron {cron!r}")
        job = copy.deepcopy(body)
        mode = body.get("mode") or "ENABLE"
        job.update(
            recurring_run_id=str(uuid.uuid4()),
            created_at=self._stamp(),
            updated_at=now_iso(),
            mode=mode,
            status="ENABLED" if mode == "ENABLE" else "DISABLED",
            max_concurrency=str(body.get("max_concurrency") or "1"),
            no_catchup=bool(body.get("no_catchup")),
        )
        self.recurring_runs[job["recurring_run_id"]] = job
        return copy.deepcopy(job)

    def _set_mode(self, recurring_run_id: str, enabled: bool) -> dict[str, Any]:
        job = self.recurring_runs.get(recurring_run_id)
        if job is None:
            raise ApiError(404, f"recurring run {recurring_run_id} not found")
        job.update(mode="ENABLE" if enabled else "DISABLE", status="ENABLED" if enabled else "DISABLED")
        return {}

    def _delete_recurring_run(self, recurring_run_id: str) -> dict[str, Any]:
        if self.recurring_runs.pop(recurring_run_id, None) is None:
            raise ApiError(404, f"recurring run {recurring_run_id} not found")
        return {}
