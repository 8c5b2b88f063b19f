"""``kftrain submit`` against a KFP host that stalls, throttles or is down: one line within the request's deadline
(a server trickling its answer a byte every 2 s, or asking to be asked again in an hour, held it before)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import kfp.client.client
import pytest

from kftrain.cli.app import main
from kftrain.cli.kfp import connection
from kftrain.cli.kfp.connection import ENV_HOST, ENV_NAMESPACE, ENV_TOKEN
from testbed.http_answer import answering
from testbed.mlflow_server import hostile_server
from testbed.ports import refusing_url

DEADLINE_S = 3.0  # the request's deadline, short for the test (60 s in use)

Server = Callable[[], contextlib.AbstractContextManager[str]]
# name: (a server, what the one line says)
HOSTS: dict[str, tuple[Server, str]] = {
    "trickles a byte every 2 s": (lambda: hostile_server("silent-body"), "no whole answer within 3s"),
    "429 Retry-After 3600": (lambda: hostile_server("throttles"), "HTTP 429"),
    "503 Retry-After 3600": (lambda: hostile_server("retry-after"), "HTTP 503"),
    "500": (lambda: hostile_server("500"), "HTTP 500"),
    "down": (refusing_url, "cannot reach the KFP API server"),
    "HTML sign-in page": (lambda: answering(200, "text/html", b"<html>Sign in</html>"), "not a JSON"),
}


@pytest.fixture
def hermetic(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setattr(kfp.client.client.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    for var in (ENV_HOST, ENV_NAMESPACE, ENV_TOKEN):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(connection, "REQUEST_DEADLINE_S", DEADLINE_S)
    yield


def submit(server: Server, *options: str) -> tuple[int, str, float]:
    """``kftrain submit pytorch-digits --host URL [options]`` while ``server`` answers at URL: its exit code, the URL
    and the seconds it took."""
    with server() as url:
        started = time.monotonic()
        code = main(["submit", "pytorch-digits", "--host", url, *options])
        return code, url, time.monotonic() - started


@pytest.mark.parametrize("host", list(HOSTS))
def test_submit_to_a_host_that_stalls_or_fails_is_one_line_within_the_deadline(
    host: str, hermetic: None, capsys: pytest.CaptureFixture[str]
) -> None:
    server, said = HOSTS[host]
    code, url, took = submit(server, "--namespace", "ns")
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("kftrain: error:")]
    assert code != 0 and len(errors) == 1 and "Traceback" not in out + err, out + err
    assert url in errors[0] and said in errors[0], errors[0]
    assert took < DEADLINE_S + 3.0, took  # healthz is the first request: its deadline ends the command


# Without --namespace kfp.Client asks the server's healthz first (its own way: five tries 5 s apart, then a
# TimeoutError naming no cause); kftrain asks it once.
HEALTHZ: dict[str, tuple[Server, str]] = {
    "401": (lambda: answering(401, "text/plain", b"Unauthorized"), "HTTP 401: Unauthorized (check --token"),
    "500": (lambda: answering(500, "text/plain", b"internal error"), "HTTP 500: internal error"),
    "down": (refusing_url, "Connection refused"),
}


@pytest.mark.parametrize("host", list(HEALTHZ))
def test_a_failing_healthz_is_its_own_cause_in_one_line(
    host: str, hermetic: None, capsys: pytest.CaptureFixture[str]
) -> None:
    server, said = HEALTHZ[host]
    code, url, took = submit(server)
    out, err = capsys.readouterr()
    assert code != 0 and "Traceback" not in out + err and "attempt" not in out + err, out + err
    assert (
        [line for line in err.splitlines() if line.strip()]
        == [line for line in err.splitlines() if line.startswith("kftrain: error:") and url in line and said in line]
        != []
    ), err
    assert took < DEADLINE_S + 3.0, took
