"""The backend's one way to the Kubernetes API: where the cluster is, which calls it makes, and how they are retried.

:class:`KubeApi` configures the client (the pod's service account inside a cluster, else the kubeconfig), resolves
the namespace a job goes to, asks discovery which versions the cluster serves, and makes every request the backend
needs through :func:`kftrain.retry.call_with_retry` with :func:`is_transient` as its classifier (throttling, server
errors, dropped connections are retried; an error saying the request is wrong is not). The watches are the
exception: :class:`~kftrain.backends.kubernetes.watch.Watcher` retries them with :mod:`.backoff`, from the requests
:meth:`KubeApi.job_collection` and :meth:`KubeApi.pod_collection` give it. Nothing else reaches the client directly.
Every way a call gives up (an answer that is not JSON, a refusal, a server out of reach, its deadline passed) is one
line naming the server, the call and what came back. Every call, its retries included, ends by a whole-call deadline
(:mod:`kftrain.deadline`): ``call_deadline_s``, or sooner what :meth:`KubeApi.capped` sets (the step's timeout, the
time a stop is given); every request of the client, a watch's too, is answered in whole by then.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import urllib3.exceptions
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kftrain.answers import AnswerError, check_answers, expect_json, quoted
from kftrain.backends.base import JobHandle
from kftrain.deadline import Deadline, DeadlinePassed, bound_requests
from kftrain.errors import KftrainError
from kftrain.job.kinds import kind_for
from kftrain.kube_client import CALL_DEADLINE_S, SERVICE_ACCOUNT_NAMESPACE, load_client
from kftrain.redaction import redact
from kftrain.retry import RetryPolicy, call_with_retry, exception_chain

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


def is_transient(exc: BaseException) -> bool:
    """Errors that say "try again" rather than "you are wrong": throttling, server errors, broken connections."""
    if isinstance(exc, ApiException):
        # status 0: the client raised it without a response (e.g. a watch stream cut mid-way).
        return exc.status in RETRYABLE_STATUS or 500 <= (exc.status or 0) < 600 or exc.status == 0
    return isinstance(exc, urllib3.exceptions.HTTPError | http.client.HTTPException | ConnectionError | TimeoutError)


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def api_message(exc: ApiException) -> str:
    """The server's message for a failed request (the Status object's ``message``), else its reason."""
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


class KubeAnswerError(AnswerError):
    """An :class:`~kftrain.answers.AnswerError` with the server and the call it answered named."""


class KubeCallError(ApiException, KftrainError):
    """A call the server refused for good: still an :class:`ApiException` (callers look at ``status``), and one
    line for the user naming the server, the call, the status and what came back."""

    def __init__(self, line: str, cause: ApiException) -> None:
        ApiException.__init__(self, status=cause.status, reason=cause.reason)
        self.body, self.headers, self.line = cause.body, cause.headers, line

    def __str__(self) -> str:
        return self.line


@dataclass(frozen=True)
class JobRef:
    """Where one job lives in the API: its name, namespace and resource, and the container its program runs in."""

    name: str
    namespace: str
    kind: str
    api_version: str
    plural: str
    version: str
    # The container the operator runs the replica's program in; None: the first one (mpi-operator).
    main_container: str | None
    group: str
    # The label with the job's name on every pod of the job (the kind's controller sets it).
    pod_label: str

    @classmethod
    def make(cls, kind: str, api_version: str | None, name: str, namespace: str) -> JobRef:
        kspec = kind_for(kind, api_version).spec
        return cls(
            name,
            namespace,
            kspec.kind,
            kspec.api_version,
            kspec.plural,
            kspec.version,
            kspec.default_container,
            kspec.group,
            kspec.pod_job_label,
        )

    @classmethod
    def of(cls, handle: JobHandle) -> JobRef:
        if not handle.kind or not handle.namespace:
            raise KftrainError(f"kubernetes backend: handle {handle} lacks kind or namespace")
        return cls.make(handle.kind, handle.api_version, handle.name, handle.namespace)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class KubeApi:
    """The requests the backend makes, each retried by ``retry`` while its error is transient.

    The client is configured on first use (``api_client`` given: that one), so making a backend costs nothing.
    """

    def __init__(
        self,
        retry: RetryPolicy,
        api_client: client.ApiClient | None = None,
        namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE,
        call_deadline_s: float = CALL_DEADLINE_S,
    ) -> None:
        self.retry = retry
        self._client = api_client
        self._kubeconfig_namespace: str | None = None
        self._namespace_file = namespace_file
        self.call_deadline_s = call_deadline_s
        self._cap: Deadline | None = None  # what capped() sets: every call ends by it
        self._calling = threading.local()  # .deadline: the call this thread is making (its requests end by it)

    @property
    def api_client(self) -> client.ApiClient:
        if self._client is None:
            self._client, self._kubeconfig_namespace = load_client()
        bound_requests(self._client.rest_client, self._request_left)
        return check_answers(self._client)

    def deadline(self) -> Deadline:
        """The deadline of a call that begins now: ``call_deadline_s`` away, or sooner the cap."""
        return Deadline.after(self.call_deadline_s).sooner(self._cap)

    def _request_left(self) -> float | None:
        """The seconds a request that begins now has: what is left of this thread's call, else of a new call's."""
        return (getattr(self._calling, "deadline", None) or self.deadline()).left()

    @contextlib.contextmanager
    def capped(self, deadline: Deadline) -> Iterator[None]:
        """Within the block, every call (and request) ends by ``deadline``: it replaces any cap set before, so that
        the stop after a step's timeout has time of its own."""
        before, self._cap = self._cap, deadline
        try:
            yield
        finally:
            self._cap = before

    @property
    def server(self) -> str:
        """The API server's address, as a line that gives up on it names it."""
        return str(self.api_client.configuration.host)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``, retried while it fails transiently; ``what`` names it in the retry's log line.

        Every way it can give up is one line naming the server and the call: an answer that is not JSON
        (:class:`KubeAnswerError`), a refusal (:class:`KubeCallError`), a server that cannot be reached.
        """
        deadline = self.deadline()
        outer, self._calling.deadline = getattr(self._calling, "deadline", None), deadline
        try:
            return call_with_retry(
                fn, policy=self.retry, is_transient=is_transient, what=what, describe=describe, deadline=deadline
            )
        except Exception as exc:
            said = self.gave_up(what, exc)
            if said is exc:
                raise
            raise said from None
        finally:
            self._calling.deadline = outer

    def gave_up(self, what: str, exc: Exception) -> Exception:
        """The one-line error for ``what`` failing with ``exc`` (a call's last try, a watch's end); ``exc`` itself
        when it is already one, or not the server's doing."""
        if isinstance(exc, KubeCallError | KubeAnswerError):
            return exc  # an inner call's, already said
        if isinstance(exc, DeadlinePassed):
            # Still an ApiException (the last answer's status, else 0), for the callers that read one best-effort.
            cause = next((e for e in exception_chain(exc) if isinstance(e, ApiException)), None)
            return KubeCallError(
                f"kubernetes backend: {self.server}: {what}: {exc}", cause or ApiException(0, "no answer in time")
            )
        if isinstance(exc, AnswerError):
            return KubeAnswerError(f"kubernetes backend: {self.server}: {what}: {exc}")
        if isinstance(exc, ApiException):
            answer = quoted((exc.headers or {}).get("Content-Type"), exc.body) if exc.body else "no body"
            return KubeCallError(
                f"kubernetes backend: {self.server}: {what}: HTTP {exc.status} {exc.reason} ({answer})", exc
            )
        if isinstance(exc, urllib3.exceptions.HTTPError | http.client.HTTPException | OSError):
            cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
            why = redact(f"{type(cause).__name__}: {cause}")[:200]
            return KftrainError(f"kubernetes backend: {self.server}: {what}: cannot reach the server ({why})")
        return exc

    # -- where -----------------------------------------------------------------------------------

    def resolve_namespace(self, *preferred: str | None) -> str:
        """The first of ``preferred`` that is set, else this pod's namespace, else the kubeconfig's, else default."""
        for namespace in preferred:
            if namespace:
                return namespace
        with contextlib.suppress(OSError):
            namespace = self._namespace_file.read_text().strip()
            if namespace:
                return namespace
        _ = self.api_client  # loading the kubeconfig is what tells its namespace
        return self._kubeconfig_namespace or "default"

    def served_versions(self, group: str, plural: str) -> list[str]:
        """The versions of ``group`` that serve ``plural``, from discovery (``/apis/<group>``)."""
        try:
            listed: dict[str, Any] = self.call(
                f"discovery of {group}",
                lambda: self.api_client.call_api(
                    f"/apis/{group}",
                    "GET",
                    header_params={"Accept": "application/json"},
                    response_type="object",
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                ),
            )
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        served = []
        for entry in (listed or {}).get("versions", []):
            version = entry.get("version")
            resources = self.call(
                f"discovery of {group}/{version}",
                functools.partial(self.custom.get_api_resources, group, version),
            )
            if any(r.name == plural for r in resources.resources or []):
                served.append(version)
        return served

    # -- the job ---------------------------------------------------------------------------------

    def create_job(self, job: JobRef, manifest: dict[str, Any]) -> dict[str, Any]:
        return self.call(
            f"create {job}",
            lambda: self.custom.create_namespaced_custom_object(
                job.group, job.version, job.namespace, job.plural, manifest
            ),
        )

    def get_job(self, job: JobRef) -> dict[str, Any]:
        return self.call(
            f"get {job}",
            lambda: self.custom.get_namespaced_custom_object(
                job.group, job.version, job.namespace, job.plural, job.name
            ),
        )

    def get_cluster_object(self, group: str, version: str, plural: str, name: str, namespace: str | None) -> Any:
        """A custom object by name: cluster-scoped when ``namespace`` is None, else in that namespace."""
        where = f"{plural}.{group} {name!r}" + (f" in {namespace}" if namespace else "")
        if namespace is None:
            return self.call(
                f"get {where}", lambda: self.custom.get_cluster_custom_object(group, version, plural, name)
            )
        return self.call(
            f"get {where}", lambda: self.custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        )

    def create_namespaced_object(
        self, group: str, version: str, plural: str, namespace: str, manifest: dict[str, Any]
    ) -> Any:
        """Create a custom object in ``namespace`` (a TrainingRuntime a job's file carries)."""
        return self.call(
            f"create {plural}.{group} in {namespace}",
            lambda: self.custom.create_namespaced_custom_object(group, version, namespace, plural, manifest),
        )

    def patch_job(self, job: JobRef, patch: dict[str, Any]) -> dict[str, Any]:
        return self.call(
            f"patch {job}",
            lambda: self.custom.patch_namespaced_custom_object(
                job.group, job.version, job.namespace, job.plural, job.name, patch
            ),
        )

    def delete_job(self, job: JobRef, propagation_policy: str) -> bool:
        """Delete the job; False when it was already gone."""
        body = client.V1DeleteOptions(propagation_policy=propagation_policy)
        try:
            self.call(
                f"delete {job}",
                lambda: self.custom.delete_namespaced_custom_object(
                    job.group, job.version, job.namespace, job.plural, job.name, body=body
                ),
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False
        return True

    def job_collection(self, job: JobRef) -> Callable[..., Any]:
        """The request that lists (or, with ``watch=True``, watches) the job alone, for :class:`.watch.Watcher`."""
        return functools.partial(
            self.custom.list_namespaced_custom_object,
            job.group,
            job.version,
            job.namespace,
            job.plural,
            field_selector=f"metadata.name={job.name}",
        )

    # -- its pods and events ---------------------------------------------------------------------

    def pod_collection(self, job: JobRef) -> Callable[..., Any]:
        """The request that lists (or watches) the job's replica pods, found by the operators' job-name label."""
        return functools.partial(
            self.core.list_namespaced_pod, job.namespace, label_selector=f"{job.pod_label}={job.name}"
        )

    def job_pods(self, job: JobRef) -> list[dict[str, Any]]:
        """The job's replica pods as they stand, as the API's JSON objects."""
        listed = self.call(f"list pods of {job.name}", lambda: read_json(self.pod_collection(job)))
        return list(listed.get("items") or [])

    def pod_log(
        self, namespace: str, name: str, container: str | None, *, tail_lines: int | None, previous: bool
    ) -> str:
        """The container's current run's log (or its previous run's): its last ``tail_lines`` lines, None: all."""
        params: dict[str, Any] = {"container": container, "previous": previous}
        if tail_lines is not None:
            params["tail_lines"] = tail_lines
        text = self.call(f"log of {name}", lambda: self.core.read_namespaced_pod_log(name, namespace, **params))
        return str(text)

    def follow_pod_log(self, namespace: str, name: str, container: str | None, *, tail_lines: int | None = None) -> Any:
        """The open HTTP response that streams the container's log as it is written (its last ``tail_lines``
        lines first; None: from the start); the caller releases it."""
        params: dict[str, Any] = {"container": container, "follow": True, "_preload_content": False}
        if tail_lines is not None:
            params["tail_lines"] = tail_lines
        return self.call(f"log of {name}", lambda: self.core.read_namespaced_pod_log(name, namespace, **params))

    def events_of(self, namespace: str, name: str) -> list[client.CoreV1Event]:
        """The events about the object called ``name`` (a pod, or the job), oldest first as the server lists them."""
        listed = self.call(
            f"events of {name}",
            lambda: self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}"),
        )
        return list(listed.items or [])

    def warnings_with_reason(self, namespace: str, reason: str) -> list[client.CoreV1Event]:
        """The Warning events of reason ``reason`` in ``namespace``, about any object (one request)."""
        listed = self.call(
            f"{reason} events",
            lambda: self.core.list_namespaced_event(namespace, field_selector=f"type=Warning,reason={reason}"),
        )
        return list(listed.items or [])

    def pod_events_with_reason(self, namespace: str, reason: str) -> list[client.CoreV1Event]:
        """The events of reason ``reason`` about pods of ``namespace`` (one request, whatever the number of pods)."""
        listed = self.call(
            f"{reason} events",
            lambda: self.core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.kind=Pod,reason={reason}"
            ),
        )
        return list(listed.items or [])


def cut(response: Any) -> None:
    """Unblock a thread reading a streamed response (a watch, a followed log).

    ``response.close()`` from another thread would wait for the reader's buffer lock (the reader holds it
    while blocked in recv); shutting the socket down makes that recv return instead.
    """
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def read_json(request: Callable[..., Any], **params: Any) -> dict[str, Any]:
    """Make ``request`` and return its body as JSON: pods stay the API's objects rather than client models."""
    resp = request(_preload_content=False, **params)
    try:
        body: dict[str, Any] = expect_json(resp.data, resp.headers.get("Content-Type"), dict)
    finally:
        with contextlib.suppress(Exception):
            resp.release_conn()
    return body
