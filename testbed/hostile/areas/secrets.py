"""Issue 52, class 4: secrets in odd shapes (kftrain/redaction.py, tracking/env.py, cli/kfp/connection.py): a
tracking URI whose password holds an unencoded ``/``, ``#``, ``?``, space or ``@``, given by ``--mlflow`` or by
``MLFLOW_TRACKING_URI``, to a tracking server that refuses every request (401); an ``MLFLOW_TRACKING_TOKEN`` and a
``kftrain submit --token`` with a trailing newline (as read from a file or a Secret), to servers that refuse them; a
password in ``MLFLOW_TRACKING_URI`` when the launch step renders its job's manifest. Each secret must appear in no
output and no file the call writes.

The pipeline run is tests/cli/test_run_failures.py's ``ADDER`` (one step); the stand-in tracking server is
testbed/mlflow_server.py's ``hostile_server``.
"""

from __future__ import annotations

from collections.abc import Callable

from testbed.hostile.case import CLEAR, FINE, Case, Sandbox

AREA = "secrets"
# Passwords, each as written in the URI (unencoded).
PASSWORDS = {
    "a slash": "pw/Slash9Secret",
    "a hash": "pw#Hash9Secret",
    "a question mark": "pw?Quest9Secret",
    "a space": "pw Space9Secret",
    "an at sign": "pw@At9Secret",
}
TOKEN = "tok-Newline9Secret"


def _adder(sb: Sandbox) -> str:
    from tests.cli.test_run_failures import ADDER

    sb.write("adder.py", ADDER)
    return "adder:adder"


def _run_tracked(password: str, by_env: bool) -> Callable[[Sandbox], int]:
    """``kftrain run`` tracked at ``http://me:PASSWORD@HOST`` (a server answering 401): the run goes on untracked,
    its warning names the server without the password."""

    def run(sb: Sandbox) -> int:
        import os

        from testbed.mlflow_server import hostile_server

        ref = _adder(sb)
        with hostile_server("401") as url:
            uri = url.replace("http://", f"http://me:{password}@")
            if by_env:
                os.environ["MLFLOW_TRACKING_URI"] = uri
                return sb.cli("run", ref, "--pipeline-root", "runs")
            return sb.cli("run", ref, "--mlflow", uri, "--pipeline-root", "runs")

    return run


def _token_newline(sb: Sandbox) -> int:
    """``MLFLOW_TRACKING_TOKEN`` ending in a newline, to a server answering 401."""
    import os

    from testbed.mlflow_server import hostile_server

    ref = _adder(sb)
    os.environ["MLFLOW_TRACKING_TOKEN"] = TOKEN + "\n"
    with hostile_server("401") as url:
        return sb.cli("run", ref, "--mlflow", url, "--pipeline-root", "runs")


def _submit_token(status: int) -> Callable[[Sandbox], int]:
    """``kftrain submit --token 'TOKEN\\n'`` to a KFP server that answers ``status`` to the upload."""

    def run(sb: Sandbox) -> int:
        from testbed.fake_kfp import FakeKFP

        ref = _adder(sb)
        server = FakeKFP().start()
        try:
            server.fail("POST", ".*", status, times=100)
            return sb.cli("submit", f"{ref}", "--host", server.url, "--token", TOKEN + "\n", "--timeout", "30")
        finally:
            server.stop()

    return run


def _launch_manifest(sb: Sandbox) -> int:
    """The launch step in a task KFP tracks (a real tracking server; ``MLFLOW_TRACKING_URI`` holding a password)
    runs its job on the local backend: the password is in no manifest, record, log or line it writes."""
    import os

    from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
    from testbed.launch_harness import call_launch, writes_a_model
    from testbed.mlflow_server import kfp_task_run, mlflow_server

    password = PASSWORDS["a slash"]
    with mlflow_server(sb.tmp / "mlflow") as server:
        env = kfp_task_run(server.client(), server.uri, "pytorchjob-launch")
        env["MLFLOW_TRACKING_URI"] = server.uri.replace("http://", f"http://me:{password}@")
        os.environ.update(env)
        sb.ready()
        call_launch(pytorchjob_launch, sb.work, backend="local", command=writes_a_model(1))
    return 0


CASES: list[Case] = [
    *(
        Case(
            AREA,
            f"a tracking URI password with {what} ({'MLFLOW_TRACKING_URI' if by_env else '--mlflow'})",
            FINE,
            "kftrain run --mlflow (a server answering 401)",
            _run_tracked(password, by_env),
            secrets=(password, password.partition(password[2])[2]),
            timeout_s=180,
        )
        for what, password in PASSWORDS.items()
        for by_env in (False, True)
    ),
    Case(
        AREA,
        "MLFLOW_TRACKING_TOKEN with a trailing newline",
        FINE,
        "kftrain run --mlflow (a server answering 401)",
        _token_newline,
        secrets=(TOKEN,),
        timeout_s=180,
    ),
    *(
        Case(
            AREA,
            f"submit --token with a trailing newline ({status})",
            CLEAR,
            "kftrain submit",
            _submit_token(status),
            secrets=(TOKEN,),
        )
        for status in (401, 500)
    ),
    Case(
        AREA,
        "a password in MLFLOW_TRACKING_URI, the launch step's job rendered and run",
        FINE,
        "pytorchjob_launch (local backend, a real tracking server)",
        _launch_manifest,
        secrets=(PASSWORDS["a slash"], "Slash9Secret"),
        timeout_s=240,
        needs=("mlflow",),
    ),
]
