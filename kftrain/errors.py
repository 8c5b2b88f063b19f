"""Errors a user can cause, each naming what was wrong and where."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, NoReturn

from kftrain.redaction import redact

# What one message may quote of the input: a value of 2 MB quoted whole would make a 2 MB error line.
MAX_QUOTED_CHARS = 200
# A field path (a map's keys are the user's) and a message, whatever they quote: one line under 1 KB.
MAX_FIELD_CHARS = 300
MAX_MESSAGE_CHARS = 700


def quoted(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """``value`` as a message quotes it (``repr``), cut to ``limit`` characters with the length it had:
    ``'aaaa…' (2097152 characters)``. Never for a secret's value."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


def bounded(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, its head and tail kept (a message's end often says what is wrong:
    "... is too long"), with how much was left out between them."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 4) :]
    return f"{head} …({len(text) - len(head) - len(tail)} characters left out)… {tail}"


class KftrainError(Exception):
    """Base class for every error kftrain raises on purpose."""


class JobSpecError(KftrainError):
    """A training job manifest or its inputs are invalid.

    ``field`` is the dotted path of the offending field (``spec.pytorchReplicaSpecs.Worker.replicas``)
    so the message points the user at the exact line to fix.

    Every validation error is built here, so here both are bounded (:func:`bounded`): wherever a check quotes the
    input, the line stays under 1 KB however large the value it quotes.
    """

    def __init__(self, field: str, message: str) -> None:
        field = bounded(field, MAX_FIELD_CHARS)
        message = bounded(message, MAX_MESSAGE_CHARS)
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class JobFailedError(KftrainError):
    """A training job ran and failed."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        self.exit_code = exit_code
        super().__init__(message)


class EvaluationError(KftrainError):
    """The model and the dataset do not fit together: the message says how."""


class ExportError(KftrainError):
    """An export could not be produced, or did not reproduce the model's predictions."""


# The name the call sites know for the one redaction (:func:`kftrain.redaction.redact`): known secrets and URLs'
# userinfo alike.
redact_urls = redact


def fail_step(message: str, exit_code: int = 1) -> NoReturn:
    """End a pipeline step: the message in its log, the exit code as its status.

    The exit code holds even when the log is gone: under KFP's launcher with PUBLISH_LOGS the step's output is a pipe
    that closes when the launcher exits on a cancel (kubeflow/pipelines@2.17.0:backend/src/v2/component/
    launcher_v2.go:699-711), and a write then raises BrokenPipeError.
    """
    try:
        print(f"ERROR: {redact(message)}", file=sys.stderr, flush=True)
    except (BrokenPipeError, ValueError):
        _drop_closed_output()
    raise SystemExit(exit_code)


def _drop_closed_output() -> None:
    """Point stdout and stderr at /dev/null, so that the interpreter's flush at exit cannot fail on the closed pipe
    and replace the step's exit code with 120 (docs.python.org/3/library/signal.html, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, stream.fileno())
    os.close(devnull)
