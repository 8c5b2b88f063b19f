"""What a REST client built by an OpenAPI generator (the Kubernetes client, kfp_server_api) may be answered.

Such a client hands a body that is not JSON on as a ``str``, or builds a model from it with every field None (a
proxy's HTML sign-in page becomes ``'str' object has no attribute 'get'`` or a model's ``ApiValueError`` later).
:func:`check_answers` makes the client refuse it where it deserializes (parsing it once), and a web page where a
log or a stream was expected, as :class:`AnswerError` saying what came back: its content type and first bytes,
bounded and redacted. The caller names the server and the call.
"""

from __future__ import annotations

import json
from typing import Any

from kftrain.errors import KftrainError
from kftrain.redaction import redact

# How much of an unexpected answer a message quotes.
ANSWER_QUOTED = 120


class AnswerError(KftrainError, ValueError):
    """The server answered something that is not the JSON the call expects; a ValueError, as the client's own
    parse failure is (a watch retries those)."""


def quoted(content_type: str | None, body: Any) -> str:
    """What came back, for a message: its content type and its first bytes, bounded and redacted."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    first = " ".join(text.split())[:ANSWER_QUOTED]
    return f"{content_type or 'no content type'}: {redact(first)!r}"


def expect_json(body: Any, content_type: str | None, kind: type = object) -> Any:
    """``body`` parsed as a JSON object or list (of ``kind``), else :class:`AnswerError` saying what came back."""
    try:
        parsed = json.loads(body)
    except (TypeError, ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, kind) and isinstance(parsed, dict | list):
        return parsed
    raise AnswerError(f"not a JSON {'object' if kind is dict else 'answer'} ({quoted(content_type, body)})")


def is_page(content_type: str | None) -> bool:
    """Whether an answer of ``content_type`` is a web page (a proxy's sign-in page): never an API's answer."""
    return (content_type or "").split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml")


def check_answers(api_client: Any, server: str = "") -> Any:
    """``api_client``, made to refuse as :class:`AnswerError` any answer it would deserialize that is not JSON
    (a download, ``file``, is what it is), and a text or streamed answer (a log, a watch) that is a web page;
    ``server``: named in the message."""
    if getattr(api_client, "_answers_checked", False):
        return api_client
    original = api_client.deserialize
    # The generated client's own model builder, given the body parsed once here (its deserialize parses it again):
    # kubernetes-client/python@v30.1.0:kubernetes/client/api_client.py ApiClient.deserialize, and kfp_server_api's
    # (kubeflow/pipelines@2.17.0:backend/api/v2beta1/python_http_client/kfp_server_api/api_client.py) alike.
    build = getattr(api_client, "_ApiClient__deserialize", None)

    def refused(exc: AnswerError) -> AnswerError:
        return AnswerError(f"{server}: {exc}" if server else str(exc))

    def deserialize(response: Any, response_type: Any) -> Any:
        content_type = response.getheader("Content-Type")
        if response_type == "str" and is_page(content_type):
            raise refused(AnswerError(f"a page, not the text the call expects ({quoted(content_type, response.data)})"))
        if response_type in ("str", "file") or build is None:
            return original(response, response_type)
        try:
            parsed = expect_json(response.data, response.getheader("Content-Type"))
        except AnswerError as exc:
            raise refused(exc) from None
        return build(parsed, response_type)

    rest = api_client.rest_client
    plain_request = rest.request

    def request(*args: Any, **kwargs: Any) -> Any:
        response = plain_request(*args, **kwargs)
        if kwargs.get("_preload_content", True):
            return response  # read whole: deserialize checks it
        content_type = response.headers.get("Content-Type")  # urllib3's response itself
        if is_page(content_type):
            try:
                first = response.read(ANSWER_QUOTED * 2)
            finally:
                response.release_conn()
            raise refused(AnswerError(f"a page, not the stream the call expects ({quoted(content_type, first)})"))
        return response

    api_client.deserialize = deserialize
    rest.request = request
    api_client._answers_checked = True
    return api_client
