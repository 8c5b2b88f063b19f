"""What the API server authorizes a request as: (verb, API group, resource, namespace, name) parsed from a
request's method and URL as kube-apiserver parses it, and an ApiClient that records each request it makes so
parsed, with the status it got (tests/controlplane/test_rbac.py names the grant each call used)."""

from __future__ import annotations

import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

# A grant: (API group, resource or resource/subresource, verb), as RBAC rules name them.
Grant = tuple[str, str, str]

# The namespace's own subresources: /api/v1/namespaces/{name}/status is the namespace's, not a resource in it.
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}


@dataclass(frozen=True)
class Call:
    """One request as the authorizer sees it; ``resource`` is empty for a non-resource URL (``path`` then)."""

    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    path: str
    status: int

    @property
    def grant(self) -> Grant:
        return (self.group, self.resource, self.verb)


def attributes(method: str, url: str, query: list[tuple[str, Any]] | None) -> tuple[str, str, str, str, str]:
    """(verb, group, resource, namespace, name) the API server authorizes ``method`` on ``url`` as: the rules of
    k8s.io/apiserver@v0.36.3:pkg/endpoints/request/requestinfo.go (NewRequestInfo): the verb from the method, a
    GET without a name is a list, or a watch when ``watch`` is set; a DELETE without a name a deletecollection. A
    non-resource URL (discovery) gives an empty resource."""
    path = urllib.parse.urlsplit(url).path
    parts = [p for p in path.split("/") if p]
    verb = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[
        method.upper()
    ]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return verb, "", "", "", ""
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if not name and verb == "get":
        watching = any(k == "watch" and str(v).lower() not in ("false", "0") for k, v in query or [])
        verb = "watch" if watching else "list"
    if not name and verb == "delete":
        verb = "deletecollection"
    return verb, group, resource, namespace, name


class RecordingClient(client.ApiClient):
    """An ApiClient that records every request it makes, with the status it got (0: no answer), from whichever
    thread makes it (the backend's watches and log streams have threads of their own)."""

    def __init__(self, configuration: client.Configuration) -> None:
        super().__init__(configuration)
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def request(
        self, method: str, url: str, query_params: list[tuple[str, Any]] | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        try:
            response = super().request(method, url, query_params, *args, **kwargs)
        except ApiException as exc:
            self._record(method, url, query_params, exc.status or 0)
            raise
        except Exception:
            self._record(method, url, query_params, 0)
            raise
        self._record(method, url, query_params, response.status)
        return response

    def _record(self, method: str, url: str, query: list[tuple[str, Any]] | None, status: int) -> None:
        verb, group, resource, namespace, name = attributes(method, url, query)
        call = Call(verb, group, resource, namespace, name, urllib.parse.urlsplit(url).path, status)
        with self._lock:
            self.calls.append(call)

    def recorded(self) -> list[Call]:
        with self._lock:
            return list(self.calls)
