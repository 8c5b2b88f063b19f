"""Issue 52, class 5 (the cases of the commands' own answers; the tracking URI's local stores, ONNX external data and
``jobs logs --follow`` are covered with their fixes): answers that are not what the client expects (kftrain/answers.py,
backends/kubernetes, cli/kfp): an HTML sign-in page from a proxy, a bare 401 and a 500 host, and a refused connection,
for ``kftrain launch --backend kubernetes``, ``jobs list``, ``jobs logs`` (a kubeconfig naming the server) and
``kftrain submit``; a local job record holding ``-Infinity`` or 100,000 nested lists under ``jobs list`` (every other
job still listed). Each is one line naming the cause.

The stand-in servers are testbed/http_answer.py's ``answering``; records are written as
tests/backends/local/test_jobs_safety.py's ``record`` writes them.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Callable, Iterator

from testbed.hostile.case import CLEAR, FINE, WRONG, Case, Observed, Sandbox

AREA = "answers"
SIGN_IN = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body><form>...</form></body></html>"
# (name, status, content type, body); "refused": nothing listens.
SERVERS = {
    "an HTML sign-in page": (200, "text/html; charset=utf-8", SIGN_IN),
    "a bare 401": (401, "text/plain", b"Unauthorized"),
    "a 500 host": (500, "text/plain", b"internal error"),
    "a refused connection": (0, "", b""),
}


@contextlib.contextmanager
def _server(name: str) -> Iterator[str]:
    from testbed.http_answer import answering
    from testbed.ports import refusing_url

    status, content_type, body = SERVERS[name]
    if not status:
        with refusing_url() as url:
            yield url
        return
    with answering(status, content_type, body) as url:
        yield url


def _kubeconfig(sb: Sandbox, url: str) -> None:
    import os

    import yaml

    from testbed.kubeconfig import kubeconfig

    config = kubeconfig(url, "kube-token-value", namespace="ns")
    path = sb.write("kubeconfig", yaml.safe_dump(config), folder=sb.home)
    os.environ["KUBECONFIG"] = str(path)


def _kubernetes(server: str, *argv: str) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        import yaml

        from testbed.manifests import pytorchjob, replica

        sb.write("job.yaml", yaml.safe_dump(pytorchjob({"Master": replica(1, "pytorch")}, name="kj")))
        with _server(server) as url:
            _kubeconfig(sb, url)
            return sb.cli(*argv)

    return run


def _submit(server: str) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        from tests.cli.test_run_failures import ADDER

        sb.write("adder.py", ADDER)
        with _server(server) as url:
            return sb.cli("submit", "adder:adder", "--host", url, "--timeout", "30")

    return run


def _bad_record(body: str) -> Callable[[Sandbox], int]:
    """A record of ``body`` beside a good one: ``jobs list`` lists the good one, the bad one as unreadable."""

    def run(sb: Sandbox) -> int:
        good = {"name": "good-job", "created": time.time(), "kind": "PyTorchJob", "phase": "Succeeded"}
        (sb.state / "good-job.json").write_text(json.dumps({**good, "replicas": ["master-0"]}))
        (sb.state / "bad.json").write_text(body)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = sb.cli("jobs", "list")
        listed = out.getvalue()
        print(listed.strip().splitlines()[-1] if listed.strip() else "")
        if code == 0 and "good-job" not in listed:
            raise Observed(WRONG, "jobs list did not list the good job")
        return code

    return run


NESTED = "[" * 100_000 + "]" * 100_000
MINUS_INFINITY = json.dumps({"name": "bad", "created": "-Infinity", "kind": "PyTorchJob"}).replace(
    '"-Infinity"', "-Infinity"
)
K8S = {
    "launch": ("launch", "--backend", "kubernetes", "-f", "job.yaml", "--timeout", "30"),
    "jobs list": ("jobs", "--backend", "kubernetes", "list"),
    "jobs logs": ("jobs", "--backend", "kubernetes", "logs", "kj"),
}

CASES: list[Case] = [
    *(
        Case(
            AREA,
            f"{command}: {server}",
            CLEAR,
            f"kftrain {command} --backend kubernetes",
            _kubernetes(server, *argv),
            secrets=("kube-token-value",),
            timeout_s=90,
        )
        for command, argv in K8S.items()
        for server in SERVERS
    ),
    *(Case(AREA, f"submit: {server}", CLEAR, "kftrain submit", _submit(server), timeout_s=120) for server in SERVERS),
    Case(AREA, "jobs list: a record holding -Infinity", FINE, "kftrain jobs list", _bad_record(MINUS_INFINITY)),
    Case(AREA, "jobs list: a record of 100,000 nested lists", FINE, "kftrain jobs list", _bad_record(NESTED)),
]
