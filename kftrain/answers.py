"""What a REST client built by an OpenAPI generator (the Kubernetes client, kfp_server_api) may be answered.

Such a client hands a body that is not JSON on as a ``str``, or builds a model from it with every field None (a
proxy's HTML sign-in page becomes ``'str' object has no attribute 'get'`` or a model's ``ApiValueError`` later).
:func:`check_answers` makes the client refuse it where it deserializes, as :class:`AnswerError` saying what came
back: its content type and first bytes, bounded and redacted. The caller names the server and the call.
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


def check_answers(api_client: Any, server: str = "") -> Any:
    """``api_client``, made to refuse as :class:`AnswerError` any answer it would deserialize that is not JSON
    (a text answer, ``str``, and a download, ``file``, are what they are); ``server``: named in the message."""
    if getattr(api_client, "_answers_checked", False):
        return api_client
    original = api_client.deserialize

    def deserialize(response: Any, response_type: Any) -> Any:
        if response_type not in ("str", "file"):
            try:
                expect_json(response.data, response.getheader("Content-Type"))
            except AnswerError as exc:
                raise AnswerError(f"{server}: {exc}" if server else str(exc)) from None
        return original(response, response_type)

    api_client.deserialize = deserialize
    api_client._answers_checked = True
    return api_client
