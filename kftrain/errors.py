"""Errors a user can cause, each naming what was wrong and where."""

from __future__ import annotations

import re
import sys
from typing import NoReturn


class KftrainError(Exception):
    """Base class for every error kftrain raises on purpose."""


class JobSpecError(KftrainError):
    """A training job manifest or its inputs are invalid.

    ``field`` is the dotted path of the offending field (``spec.pytorchReplicaSpecs.Worker.replicas``)
    so the message points the user at the exact line to fix.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class JobFailedError(KftrainError):
    """A training job ran and failed."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        self.exit_code = exit_code
        super().__init__(message)


# "scheme://user:password@host": the credentials of a URL, wherever one is printed.
_URL_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]*@")


def redact_urls(text: str) -> str:
    """``text`` with every URL's user and password (``https://user:pass@host``) replaced by ``***``."""
    return _URL_USERINFO.sub(r"\1***@", text)


def fail_step(message: str, exit_code: int = 1) -> NoReturn:
    """End a pipeline step: the message in its log, the exit code as its status."""
    print(f"ERROR: {message}", file=sys.stderr)
    raise SystemExit(exit_code)
