"""A secret is never printed, whatever its shape: a token with a trailing newline, a URI's password holding an
unencoded ``/``, ``#``, ``?`` or space, a password percent-encoded in the URI and printed decoded (or the reverse),
a ``--token`` given on the command line; through :func:`kftrain.redaction.redact` and every way kftrain prints an
error (a step's ``ERROR:`` line, the CLI's ``kftrain: error:``)."""

from __future__ import annotations

import argparse

import pytest

from kftrain.errors import KftrainError, fail_step
from kftrain.redaction import add_secret, redact

TOKEN = "tok-4f9a2c7e"


# (the environment, the text printed, the secret it must not show)
SHAPES = {
    "a token with a trailing newline, quoted by repr": (
        {"MLFLOW_TRACKING_TOKEN": TOKEN + "\n"},
        f"Invalid header value b'Bearer {TOKEN}\\n'",
        TOKEN,
    ),
    "a token with a trailing newline, printed raw": (
        {"MLFLOW_TRACKING_TOKEN": TOKEN + "\n"},
        f"header: Bearer {TOKEN}\n and more",
        TOKEN,
    ),
    "a token percent-encoded in a URL": (
        {"KFP_TOKEN": "a+b/c=d e"},
        "GET http://kfp/api?token=a%2Bb%2Fc%3Dd%20e failed",
        "a%2Bb%2Fc%3Dd%20e",
    ),
    "a password holding an unencoded /": (
        {"MLFLOW_TRACKING_URI": "http://alice:pa/ss9@mlflow:5000"},
        "cannot reach http://alice:pa/ss9@mlflow:5000/api/2.0",
        "pa/ss9",
    ),
    "a password holding an unencoded #": (
        {"MLFLOW_TRACKING_URI": "http://alice:pa#ss9@mlflow:5000"},
        "cannot reach http://alice:pa#ss9@mlflow:5000/api/2.0",
        "pa#ss9",
    ),
    "a password holding an unencoded ?": (
        {"MLFLOW_TRACKING_URI": "http://alice:pa?ss9@mlflow:5000"},
        "cannot reach http://alice:pa?ss9@mlflow:5000/api/2.0",
        "pa?ss9",
    ),
    "a password holding a space": (
        {"MLFLOW_TRACKING_URI": "http://alice:pa ss9@mlflow:5000"},
        "cannot reach http://alice:pa ss9@mlflow:5000/api/2.0",
        "ss9",
    ),
    "a password percent-encoded in the URI, printed decoded": (
        {"MLFLOW_TRACKING_URI": "http://alice:pa%2Fss9@mlflow:5000"},
        "auth failed for alice with password pa/ss9",
        "pa/ss9",
    ),
    "a password from its variable, printed percent-encoded": (
        {"MLFLOW_TRACKING_PASSWORD": "p@ss w/rd"},
        "login refused: password p%40ss%20w%2Frd",
        "p%40ss%20w%2Frd",
    ),
    "a token as a URI's user": (
        {"MLFLOW_TRACKING_URI": "https://ghp_9f8e7d6c@mlflow.example.com"},
        "token ghp_9f8e7d6c was refused",
        "ghp_9f8e7d6c",
    ),
    "a secret variable's value": (
        {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG"},
        "signature with wJalrXUtnFEMI/K7MDENG did not match",
        "wJalrXUtnFEMI",
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_of_a_secret_is_redacted(shape):
    env, text, secret = SHAPES[shape]
    shown = redact(text, environ=env)
    assert secret not in shown and "***" in shown, shown


def test_a_url_userinfo_is_hidden_whoever_it_belongs_to():
    assert redact("https://bob:hunter2@kfp.example.com/#/runs", environ={}) == "https://***@kfp.example.com/#/runs"


def test_short_values_and_plain_names_are_left_alone():
    env = {"MLFLOW_TRACKING_TOKEN": "ab", "MLFLOW_TRACKING_URI": "http://alice:secretpw@h", "KFP_HOST": "http://h"}
    assert redact("alice logged ab at http://h", environ=env) == "alice logged ab at http://h"


def test_a_registered_token_is_never_printed_by_a_step_or_the_cli(capsys, monkeypatch):
    from kftrain.cli.kfp.connection import Connection

    token = "kfp-token-71c3e9"
    monkeypatch.setenv("KFP_TOKEN", token + "\n")  # read from a file or a Secret: a trailing newline
    conn = Connection.from_args(argparse.Namespace(host="http://kfp:8888", namespace=None, token=None))
    assert conn.token == token  # a header cannot hold the newline: never sent with it
    monkeypatch.delenv("KFP_TOKEN")
    with pytest.raises(SystemExit):
        fail_step(f"the server said: invalid header 'Bearer {token}\\n'")
    assert token not in capsys.readouterr().err


def test_the_cli_error_line_is_redacted(capsys, monkeypatch):
    from kftrain.cli import app

    add_secret("cli-token-5d2a8b\n")

    def fails(_: argparse.Namespace) -> int:
        raise KftrainError("refused 'Bearer cli-token-5d2a8b'")

    assert app._run(argparse.Namespace(func=fails)) == 2
    err = capsys.readouterr().err
    assert "cli-token-5d2a8b" not in err and "***" in err


@pytest.mark.parametrize("password", ["pa/ss9x", "pa#ss9x", "pa?ss9x", "pa ss9x", "p@ss9x"])
@pytest.mark.parametrize("form", ["--mlflow={uri}", "{uri}", "source={uri}"])
def test_a_uris_password_given_on_the_command_line_is_never_printed(password: str, form: str, monkeypatch) -> None:
    """Not from a variable (``--mlflow URI``): what the argument holds is known as a secret from then on."""
    from kftrain import redaction

    monkeypatch.setattr(redaction, "registered", set())
    uri = f"http://alice:{password}@mlflow:5000"
    redaction.add_uri_credentials(form.format(uri=uri))
    shown = redaction.redact(f"the MLflow tracking server {uri} did not answer; tried {uri}/api/2.0")
    assert password not in shown and "ss9x" not in shown and "mlflow:5000" in shown


def test_a_path_holding_an_at_sign_is_no_credential(monkeypatch) -> None:
    from kftrain import redaction

    monkeypatch.setattr(redaction, "registered", set())
    redaction.add_uri_credentials("source=https://example.com/data/set@v2.csv")
    assert redaction.redact("read example.com/data/set") == "read example.com/data/set"


@pytest.mark.parametrize(
    "setup",
    [
        "from kftrain.step import component_step\nwith component_step():\n    log()",
        "from kftrain.programs.common import setup_logging\nsetup_logging()\nlog()",
        "from kftrain.cli.app import main\nmain(['jobs', 'list'])\nlog()",
    ],
    ids=["a step", "a training program", "the cli"],
)
def test_every_log_line_is_redacted(setup: str, tmp_path) -> None:
    """A step's, a training program's and the CLI's log lines (a URI from a variable, an exception's text) go
    through :func:`redact`, not only their error lines."""
    import os
    import subprocess
    import sys

    program = (
        "import logging, os\n"
        "def log():\n"
        "    logging.getLogger('kftrain.x').warning('cannot reach %s', os.environ['MLFLOW_TRACKING_URI'])\n"
        "    try:\n"
        "        raise ValueError('header Bearer ' + os.environ['MLFLOW_TRACKING_TOKEN'])\n"
        "    except ValueError:\n"
        "        logging.getLogger('kftrain.x').exception('failed')\n" + setup
    )
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": "http://alice:pa/ss9Log@mlflow:5000",
        "MLFLOW_TRACKING_TOKEN": "tok-9LogLine\n",
        "KFTRAIN_STATE_DIR": str(tmp_path),
    }
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
    output = done.stdout + done.stderr
    assert "cannot reach http://" in output and "ValueError" in output, output
    assert "ss9Log" not in output and "tok-9LogLine" not in output, output
