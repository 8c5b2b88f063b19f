"""The MLflow variables KFP 2.17 gives a step, what a launch step passes on to its replicas (credentials only by
reference), MLflow's bounded retries, and nothing of MLflow without the variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kftrain.job import EnvVar
from kftrain.tracking.env import BOUNDED_HTTP, Tracking, bounded_http, local_store, replica_env, tracking_from_env
from testbed.reference import REPO

URI, RUN = "http://mlflow.kubeflow:5000", "0f3c"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"MLFLOW_TRACKING_URI": URI}, None),  # a shell's default server names no run of this task
        ({"MLFLOW_RUN_ID": RUN}, None),
        ({"MLFLOW_TRACKING_URI": URI, "MLFLOW_RUN_ID": " "}, None),
        ({"MLFLOW_TRACKING_URI": URI, "MLFLOW_RUN_ID": RUN}, Tracking(URI, RUN)),
        (
            {"MLFLOW_TRACKING_URI": URI, "MLFLOW_RUN_ID": RUN, "MLFLOW_EXPERIMENT_ID": "3", "MLFLOW_WORKSPACE": "team"},
            Tracking(URI, RUN, "3", "team"),
        ),
    ],
)
def test_a_step_logs_only_with_both_the_server_and_its_run(env, expected):
    assert tracking_from_env(env) == expected


TRACKED = {"MLFLOW_TRACKING_URI": URI, "MLFLOW_RUN_ID": RUN, "MLFLOW_EXPERIMENT_ID": "3"}
# KFP_MLFLOW_CONFIG as KFP 2.17's API server writes it (backend/src/common/plugins/mlflow/config.go,
# MLflowRuntimeConfig and CredentialSecretRef): key names only, never a credential.
BEARER = json.dumps({"endpoint": URI, "authType": "bearer", "credentialSecretRef": {"tokenKey": "api-token"}})
BASIC = json.dumps(
    {"endpoint": URI, "authType": "basic-auth", "credentialSecretRef": {"usernameKey": "user", "passwordKey": "pw"}}
)


def ref(name: str, key: str, optional: bool = False) -> EnvVar:
    secret = {"name": "kfp-mlflow-credentials", "key": key, **({"optional": True} if optional else {})}
    return EnvVar(name=name, value_from={"secretKeyRef": secret})


PLAIN = [EnvVar(name=k, value=v) for k, v in TRACKED.items()]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, PLAIN),
        ({"MLFLOW_TRACKING_AUTH": "kubernetes"}, [*PLAIN, EnvVar(name="MLFLOW_TRACKING_AUTH", value="kubernetes")]),
        # KFP's own reference: the Secret and the key its config names.
        (
            {"MLFLOW_TRACKING_TOKEN": "s3cret", "KFP_MLFLOW_CONFIG": BEARER},
            [*PLAIN, ref("MLFLOW_TRACKING_TOKEN", "api-token")],
        ),
        (
            {"MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": "p", "KFP_MLFLOW_CONFIG": BASIC},
            [*PLAIN, ref("MLFLOW_TRACKING_USERNAME", "user"), ref("MLFLOW_TRACKING_PASSWORD", "pw")],
        ),
        # No config (a local run): under its own name, optional; the local backend resolves it from its environment.
        ({"MLFLOW_TRACKING_TOKEN": "s3cret"}, [*PLAIN, ref("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_TOKEN", True)]),
        (
            {"MLFLOW_TRACKING_TOKEN": "s3cret", "KFP_MLFLOW_CONFIG": "{not json"},
            [*PLAIN, ref("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_TOKEN", True)],
        ),
    ],
)
def test_replicas_get_the_run_as_values_and_credentials_only_by_reference(extra, expected):
    env = replica_env({**TRACKED, **extra})
    assert env == expected
    assert "s3cret" not in repr(env) and all(v.value in (None, *TRACKED.values(), "kubernetes") for v in env)


def test_replicas_get_nothing_without_tracking():
    assert replica_env({"MLFLOW_TRACKING_URI": URI, "MLFLOW_TRACKING_TOKEN": "s3cret"}) == []


def test_mlflows_retries_are_bounded_within_the_block_unless_set(monkeypatch):
    for name in BOUNDED_HTTP:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")  # the user's own setting wins
    with bounded_http():
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "1"
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "30"
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "30"


def test_without_the_variables_no_step_imports_mlflow():
    probe = (
        "import sys\n"
        "from kftrain.tracking.client import task_run\n"
        "from kftrain.tracking.local import tracked_pipeline\n"
        "import kftrain.launch.component, kftrain.steps.evaluate.component, kftrain.steps.export.component\n"
        "with task_run('x') as run, tracked_pipeline('.') as runs:\n"
        "    assert run is None and runs is None\n"
        "print('mlflow' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_a_password_in_the_tracking_uri_never_enters_the_manifest():
    env = replica_env({**TRACKED, "MLFLOW_TRACKING_URI": "http://alice:pa/ss w#1@mlflow.kubeflow:5000"})
    assert "pa/ss" not in repr(env) and "alice" not in repr(env)
    assert env == [
        EnvVar(name="MLFLOW_TRACKING_URI", value=URI),
        *PLAIN[1:],
        ref("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_USERNAME", True),
        ref("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_PASSWORD", True),
    ]


def test_the_step_uses_its_credentials_without_a_trailing_newline_and_the_uris_as_variables(monkeypatch):
    from kftrain.tracking.env import step_credentials

    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "s3cret\n")
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    with step_credentials("http://alice:pa%2Fss@mlflow:5000"):
        assert os.environ["MLFLOW_TRACKING_TOKEN"] == "s3cret"
        assert (os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]) == ("alice", "pa/ss")
    assert os.environ["MLFLOW_TRACKING_TOKEN"] == "s3cret\n" and "MLFLOW_TRACKING_PASSWORD" not in os.environ


# A tracking URI that is a store on the step's own disk (issue 52, class 5): "" where it may be a server.
LOCAL_STORES = {
    "file:///mnt/mlruns": "a folder",
    "sqlite:///mlflow.db": "an SQLite file",
    "sqlite:": "an SQLite file",
    "sqlite+pysqlite:///x.db": "an SQLite file",
    "/var/mlruns": "a folder",
    "./mlruns": "a folder",
    "http://mlflow.kubeflow:5000": "",
    "https://user:pw@mlflow.example.com": "",
    "databricks": "",
    "postgresql://db.example.com/mlflow": "",
}


@pytest.mark.parametrize("uri", list(LOCAL_STORES))
def test_a_store_on_the_steps_own_disk_is_no_tracking_server(uri):
    why = local_store(uri)
    if not LOCAL_STORES[uri]:
        assert why == ""
        return
    assert why.startswith(f"{uri!r} is {LOCAL_STORES[uri]} on this machine's disk") and "\n" not in why, why
    assert "http(s):// URL of an MLflow tracking server" in why
