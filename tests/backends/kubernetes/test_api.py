"""Every way the Kubernetes API can answer what a call does not expect is one line naming the server, the call and
what came back: through ``kftrain jobs`` (the CLI's own entry) and through the backend's create."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from kftrain.backends.kubernetes.api import KubeApi, KubeCallError
from kftrain.cli.app import main
from kftrain.errors import KftrainError
from kftrain.retry import RetryPolicy
from testbed.http_answer import answering
from testbed.kubeconfig import kubeconfig
from testbed.ports import refusing_url

SECRET = "s3cr3t-value-in-the-page"
HTML = f"<html><head><title>Sign in</title></head><body>{SECRET}</body></html>".encode()

# (status, content type, body) the server answers every request with; None: nothing listens.
ANSWERS: dict[str, tuple[int, str, bytes] | None] = {
    "html sign-in page": (200, "text/html", HTML),
    "json that is not an object": (200, "application/json", b'"just a string"'),
    "401": (401, "text/plain", b"Unauthorized"),
    "403 html": (403, "text/html", HTML),
    "500": (500, "text/plain", b"upstream exploded"),
    "refused": None,
}
SAYS = {
    "html sign-in page": "not a JSON",
    "json that is not an object": "not a JSON",
    "401": "HTTP 401",
    "403 html": "HTTP 403",
    "500": "HTTP 500",
    "refused": "cannot reach the server",
}


@pytest.fixture(params=sorted(ANSWERS))
def server(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str]]:
    """A kubeconfig (named by ``KUBECONFIG``) whose server answers as the case says; the case, and the server."""
    answer = ANSWERS[request.param]
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(refusing_url() if answer is None else answering(*answer))
        yield from configured(request.param, url, tmp_path, monkeypatch)


def configured(case: str, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig(url, "not-a-secret", namespace="ns")))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)  # a known secret: the quoted answer masks it
    # Retries stay what they are, only quick: a 500 and a refusal are still retried before the line.
    monkeypatch.setattr(RetryPolicy.__init__, "__defaults__", (3, 0.01, 0.01, False))
    yield case, url


@pytest.mark.parametrize(
    "verb", [["list"], ["status", "some-job"], ["logs", "some-job"], ["delete", "some-job"]], ids=" ".join
)
def test_jobs_give_one_line_naming_the_server_the_call_and_the_answer(
    server: tuple[str, str], verb: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    case, url = server
    assert main(["jobs", "--backend", "kubernetes", *verb]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    errors = [line for line in lines if line.startswith("kftrain: error:")]
    assert len(errors) == 1, err
    assert url in errors[0] and SAYS[case] in errors[0], err
    assert "Traceback" not in out + err and SECRET not in err
    assert out == "", out  # nothing before the line (a table's header was)
    # Retries each say one line too, nothing more.
    assert all(line.startswith(("kftrain: error:", "WARNING ")) for line in lines), err


def test_a_refusal_stays_an_api_exception_with_its_status() -> None:
    """Callers that look at the status (404: not installed, 409: already there) still can."""
    with answering(404, "application/json", b'{"kind": "Status", "message": "nope"}') as url:
        cfg = client.Configuration()
        cfg.host = url
        api = KubeApi(RetryPolicy(attempts=1), client.ApiClient(cfg))
        with pytest.raises(KubeCallError) as caught:
            api.call("get x", lambda: api.core.read_namespace("x"))
        assert caught.value.status == 404 and isinstance(caught.value, KftrainError)
        assert str(caught.value).count("\n") == 0 and "get x: HTTP 404" in str(caught.value)
