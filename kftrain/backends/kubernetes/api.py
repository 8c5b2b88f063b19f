"""What the backend needs to know about the Kubernetes API's errors: which are worth retrying, and their message."""

from __future__ import annotations

import http.client
import json

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

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
