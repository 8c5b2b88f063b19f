"""The KFP API server: where it is, the ``kfp.Client`` for it, its errors as readable messages, and paging.

``--host``/``KFP_HOST``, ``--namespace``/``KFP_NAMESPACE``, ``--token``/``KFP_TOKEN``; ``kfp`` is imported only when
a command talks to the server. Every request is answered in whole within :data:`REQUEST_DEADLINE_S` (its connect,
its reads and urllib3's retries included: :func:`kftrain.deadline.bound_requests`), and a host's credentials are
never printed (:func:`kftrain.redaction.redact`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kftrain.answers import check_answers
from kftrain.deadline import DeadlinePassed, bound_requests
from kftrain.errors import KftrainError, redact_urls
from kftrain.redaction import add_secret

log = logging.getLogger(__name__)

ENV_HOST = "KFP_HOST"
ENV_NAMESPACE = "KFP_NAMESPACE"
ENV_TOKEN = "KFP_TOKEN"
PAGE_SIZE = 100
CONNECT_TIMEOUT_S = 10.0
# A request's whole answer: a server trickling its answer a byte every 2 s, or one asking (Retry-After) to be asked
# again in an hour, is an error within this (docs/cluster.md, "Submitting and scheduling").
REQUEST_DEADLINE_S = 60.0


@dataclass(frozen=True)
class Connection:
    host: str
    namespace: str | None = None
    token: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Connection:
        host = args.host or os.environ.get(ENV_HOST)
        if not host:
            raise KftrainError(f"no KFP API server: pass --host or set {ENV_HOST} (e.g. http://localhost:8888)")
        namespace = args.namespace or os.environ.get(ENV_NAMESPACE) or None
        # A token read from a file or a Secret ends in a newline: never part of it, and a header cannot hold it.
        token = (args.token or os.environ.get(ENV_TOKEN) or "").strip() or None
        add_secret(token)
        return cls(host=host.rstrip("/"), namespace=namespace, token=token)

    def ui_link(self, fragment: str) -> str:
        return redact_urls(f"{self.host}/#/{fragment}")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """kfp.Client prints links and warns on construction; keep our output ours (the text goes to debug)."""
    buffer = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buffer):
        warnings.simplefilter("ignore", FutureWarning)
        yield
    if buffer.getvalue().strip():
        log.debug("kfp: %s", redact_urls(buffer.getvalue().strip()))


def connect(conn: Connection) -> Any:
    """The real ``kfp.Client`` for this server (no kubeconfig lookup: the host is always explicit), every request
    of which has both timeouts."""
    import kfp
    from kfp_server_api import rest

    # kfp.Client builds its REST client (and asks the server's healthz) in its constructor, and passes no timeout
    # to any request: the class it builds it from is replaced for that moment by one whose every request has a
    # whole-call deadline, and which leaves a timed-out read unretried.
    plain, plain_healthz = rest.RESTClientObject, kfp.Client.get_kfp_healthz
    rest.RESTClientObject = _bounded(plain)
    kfp.Client.get_kfp_healthz = _healthz_once
    try:
        with quiet():
            made = kfp.Client(host=conn.host, namespace=conn.namespace or "kubeflow", existing_token=conn.token)
        # The one ApiClient every service of kfp.Client shares.
        check_answers(made._run_api.api_client, redact_urls(f"KFP API server at {conn.host}"))
        return made
    finally:
        rest.RESTClientObject = plain
        kfp.Client.get_kfp_healthz = plain_healthz


def _healthz_once(client: Any, sleep_duration: int = 5) -> Any:
    """The server's healthz, asked once and its error the caller's: kfp.Client's own asks five times 5 s apart,
    logs each failure's traceback, then raises a TimeoutError naming no cause, a 401 or a 500 included
    (kubeflow/pipelines@2.17.0:sdk/python/kfp/client/client.py:401-432)."""
    return client._healthz_api.healthz_service_get_healthz()


def _bounded(plain: type) -> type:
    """``plain`` (kfp_server_api's REST client), every request of which is answered within its deadline."""
    import urllib3
    from urllib3.exceptions import MaxRetryError, ReadTimeoutError

    class NoRetryOfSilence(urllib3.Retry):
        """urllib3's default retries (a dropped or stale connection is tried again), but a read that timed out is
        not: the server took the request and said nothing for the whole timeout, three more times would be four."""

        def increment(
            self,
            method: str | None = None,
            url: str | None = None,
            response: Any = None,
            error: Exception | None = None,
            _pool: Any = None,
            _stacktrace: Any = None,
        ) -> Any:  # Self, on Python 3.11 and later
            if isinstance(error, ReadTimeoutError):
                raise MaxRetryError(_pool, url, error) from error
            return super().increment(method, url, response, error, _pool, _stacktrace)

    class BoundedRESTClient(plain):
        def __init__(self, configuration: Any, *args: Any, **kwargs: Any) -> None:
            configuration.retries = NoRetryOfSilence(3)
            super().__init__(configuration, *args, **kwargs)
            # Read at each request: a test shortens it.
            bound_requests(self, lambda: REQUEST_DEADLINE_S, connect_s=CONNECT_TIMEOUT_S)

    return BoundedRESTClient


# --- errors -----------------------------------------------------------------------------------------


def api_error_message(exc: BaseException) -> str:
    """``HTTP <status>: <first line of the server's message>`` (or the error's reason when there is no body)."""
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    detail = ""
    if body:
        try:
            payload = json.loads(body)
            detail = str(payload.get("message") or payload.get("error_message") or body)
        except (ValueError, AttributeError):
            detail = str(body)
    detail = detail.strip().splitlines()[0] if detail.strip() else str(getattr(exc, "reason", "") or exc)
    return f"HTTP {status}: {detail}" if status else detail


def api_errors(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn the server's and the network's exceptions into a :class:`KftrainError` with a readable message."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        from kfp_server_api.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        host = getattr(args, "host", None) or os.environ.get(ENV_HOST)
        try:
            return func(args)
        except ApiException as exc:
            hint = " (check --token / KFP_TOKEN)" if exc.status in (401, 403) else ""
            raise KftrainError(redact_urls(f"KFP API server at {host}: {api_error_message(exc)}{hint}")) from exc
        except (HTTPError, DeadlinePassed) as exc:
            why = "it did not answer in time" if timed_out(exc) else network_reason(exc)
            if isinstance(exc, DeadlinePassed):
                why = f"it did not answer in time ({exc})"
            raise KftrainError(redact_urls(f"cannot reach the KFP API server at {host}: {why}")) from exc

    return wrapper


def timed_out(exc: BaseException) -> bool:
    """Whether a request ran out of its connect or read timeout (urllib3 wraps it in MaxRetryError)."""
    from urllib3.exceptions import NewConnectionError
    from urllib3.exceptions import TimeoutError as Urllib3Timeout

    # urllib3 makes a refused connection (NewConnectionError) a subclass of ConnectTimeoutError: not a timeout.
    return any(
        isinstance(e, Urllib3Timeout | TimeoutError) and not isinstance(e, NewConnectionError)
        for e in (exc, getattr(exc, "reason", None))
    )


def network_reason(exc: BaseException) -> str:
    """What went wrong on the way, not urllib3's pool and retry wording: ``[Errno 111] Connection refused``."""
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    return text.split("Failed to establish a new connection: ", 1)[-1] if "new connection" in text else text


def is_transient_api_error(exc: BaseException) -> bool:
    """A server error (5xx) or a dropped connection: worth another try. Any other status says the request is wrong,
    and a request that timed out has already waited its whole timeout: trying again would multiply the wait."""
    from kfp_server_api.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        return (exc.status or 0) >= 500
    return isinstance(exc, HTTPError) and not timed_out(exc)


# --- lists ------------------------------------------------------------------------------------------


def pages(call: Callable[..., Any], items: str, **kwargs: Any) -> Iterator[Any]:
    """Every item of a paginated list call."""
    token = ""
    while True:
        response = call(page_token=token, page_size=PAGE_SIZE, **kwargs)
        yield from getattr(response, items, None) or []
        token = getattr(response, "next_page_token", None) or ""
        if not token:
            return


def eq_filter(value: str, key: str = "display_name") -> str:
    """A list filter matching ``key == value`` exactly (the server's filter; callers still compare names)."""
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": key, "stringValue": value}]})


def display_name(obj: Any) -> str:
    return str(getattr(obj, "display_name", None) or getattr(obj, "name", None) or "")
