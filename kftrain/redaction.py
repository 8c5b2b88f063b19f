"""The one place a secret is kept out of what kftrain prints: :func:`redact` on every message, error and log line.

It works on what the secrets are, not on how a URL usually looks: every value of a variable whose name says it is a
secret (``*_TOKEN``, ``*_PASSWORD``, ``*_SECRET``...), the password of every URI held in a variable (its user when
it has none), every value given to :func:`add_secret` (a ``--token``) and the credential of every URI in a
command-line argument (:func:`add_uri_credentials`: ``--mlflow URI``), each raw, without surrounding whitespace (a
token read from a file or a Secret ends in a newline), percent-decoded and percent-encoded. A URL's userinfo is
hidden too, whoever's it is.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import TextIO
from urllib.parse import quote, quote_plus, unquote

MASK = "***"
# A name that says its value is a secret (AWS_SECRET_ACCESS_KEY, MLFLOW_TRACKING_TOKEN, KFP_TOKEN, HF_TOKEN...).
_SECRET_NAME = re.compile(
    r"(TOKEN|PASSWORD|PASSWD|SECRET|SECRET_KEY|SECRET_ACCESS_KEY|API_KEY|PRIVATE_KEY)$", re.IGNORECASE
)
# Shorter values are left alone: "***" for every "1" or "ab" in a message would hide what it says, not a secret.
MIN_SECRET_CHARS = 4
# "scheme://user:password@host": the credentials of a URL, wherever one is printed. The userinfo ends at the
# authority's last "@" (golang/go@go1.24.0:src/net/url/url.go parseAuthority, strings.LastIndex), so a password
# holding an "@" is hidden whole.
_URL_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]*@")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")

registered: set[str] = set()
lock = threading.Lock()


def add_secret(value: str | None) -> None:
    """From now on, ``value`` (in every shape :func:`redact` knows) is never printed."""
    if value and value.strip():
        with lock:
            registered.add(value)


def userinfo(uri: str) -> tuple[str, str]:
    """The user and password of ``uri``'s userinfo, as written: between ``scheme://`` and the URI's last ``@``,
    whatever the password holds (an unencoded ``/``, ``#``, ``?`` or space included); ``("", "")`` without one."""
    scheme, sep, rest = uri.strip().partition("://")
    if not sep or "@" not in rest or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return "", ""
    user, _, password = rest.rpartition("@")[0].partition(":")
    return user, password


def credential(uri: str) -> str:
    """The credential ``uri`` holds: its password, else its user (a token); empty without userinfo, or where what
    stands before an ``@`` is a path (``host/file@v2``), not a user."""
    user, password = userinfo(uri)
    return password or ("" if "/" in user else user)


def add_uri_credentials(text: str) -> None:
    """From now on, the credential of each URI in ``text`` (a command-line argument: ``--mlflow=URI``,
    ``source=URI``; a URI runs to the argument's end) is never printed, wherever the URI goes."""
    for found in _SCHEME.finditer(text):
        add_secret(credential(text[found.start() :]))


def secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Every secret value known now: registered ones, secret-named variables' values, URIs' passwords."""
    env = os.environ if environ is None else environ
    with lock:
        found = set(registered)
    for name, value in env.items():
        if _SECRET_NAME.search(name):
            found.add(value)
        if "://" in value:
            found.add(credential(value))  # without a password, the user is the credential (a token)
    return {value for value in found if value.strip()}


def shapes(value: str) -> set[str]:
    """The ways ``value`` may be printed: raw, stripped, percent-decoded and percent-encoded, each long enough."""
    out: set[str] = set()
    for raw in {value, value.strip(), unquote(value).strip()}:
        for shape in (raw, quote(raw, safe=""), quote(raw), quote_plus(raw)):
            if len(shape.strip()) >= MIN_SECRET_CHARS:
                out.add(shape)
    return out


def redact(text: str, environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> str:
    """``text`` with every known secret (see the module's docstring) and every URL's userinfo replaced by ``***``."""
    values = secrets(environ) | {v for v in extra if v and v.strip()}
    for shape in sorted({s for v in values for s in shapes(v)}, key=len, reverse=True):
        text = text.replace(shape, MASK)
    return _URL_USERINFO.sub(rf"\1{MASK}@", text)


class RedactingFormatter(logging.Formatter):
    """A log line's whole text (its message, its arguments, a traceback) through :func:`redact`."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def log_redacted(level: int, fmt: str, stream: TextIO | None = None) -> None:
    """``logging.basicConfig(level, fmt, stream)`` whose lines are redacted: how a step, the CLI and a training
    program log (a no-op, as basicConfig, where logging is set up already)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(RedactingFormatter(fmt))
    logging.basicConfig(level=level, handlers=[handler])
