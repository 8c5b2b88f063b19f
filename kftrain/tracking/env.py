"""The variables KFP 2.17's MLflow plugin gives a step, and what a launch step passes on to its training replicas.

With the plugin's ``injectUserEnvVars`` on, KFP's driver adds to every task's user container
(kubeflow/pipelines@2.17.0:backend/src/v2/common/plugins/mlflow/handler.go, RetrieveUserContainerEnvVars, 141-168):

- ``MLFLOW_RUN_ID`` (the task's nested run), ``MLFLOW_TRACKING_URI`` (the endpoint), ``MLFLOW_EXPERIMENT_ID``;
- ``MLFLOW_WORKSPACE`` where workspaces are enabled;
- for Kubernetes auth ``MLFLOW_TRACKING_AUTH=kubernetes`` (``kubernetes-namespaced`` with workspaces); for bearer
  auth ``MLFLOW_TRACKING_TOKEN``, for basic auth ``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD``, each
  a ``valueFrom.secretKeyRef`` of the Secret ``kfp-mlflow-credentials`` under the key the plugin's
  ``credentialSecretRef`` names (backend/src/common/plugins/mlflow/config.go: BuildCredentialEnvVars,
  CredentialSecretName).

The API server also puts ``KFP_MLFLOW_CONFIG`` (the runtime config as JSON: endpoint, parentRunId, experimentId,
authType, credentialSecretRef's key names; never a credential) on every launcher container
(backend/src/apiserver/plugins/mlflow/config.go, InjectMLflowRuntimeEnv), which is the step's own container: the
executor template carries the launcher role (backend/src/v2/compiler/argocompiler/container.go, setRuntimeRole).

A step logs only when it has both ``MLFLOW_TRACKING_URI`` and ``MLFLOW_RUN_ID``: a tracking URI alone (a user's
shell default) names no run of this task, and a step never creates runs of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from kftrain.job import EnvVar

TRACKING_URI = "MLFLOW_TRACKING_URI"
RUN_ID = "MLFLOW_RUN_ID"
EXPERIMENT_ID = "MLFLOW_EXPERIMENT_ID"
WORKSPACE = "MLFLOW_WORKSPACE"
TRACKING_AUTH = "MLFLOW_TRACKING_AUTH"
TOKEN = "MLFLOW_TRACKING_TOKEN"
USERNAME = "MLFLOW_TRACKING_USERNAME"
PASSWORD = "MLFLOW_TRACKING_PASSWORD"
KFP_CONFIG = "KFP_MLFLOW_CONFIG"
# The Secret KFP's plugin reads credentials from (its name is fixed), and the runtime config key naming each key.
CREDENTIAL_SECRET = "kfp-mlflow-credentials"
CREDENTIAL_KEYS = {TOKEN: "tokenKey", USERNAME: "usernameKey", PASSWORD: "passwordKey"}
# What every replica is given as it is: where to log and into which run; none of them is a secret.
_PLAIN = (TRACKING_URI, RUN_ID, EXPERIMENT_ID, WORKSPACE, TRACKING_AUTH)

# MLflow's client retries a failed request 7 times with a doubling back-off and waits 120 s for an answer
# (mlflow/mlflow@v3.17.2:mlflow/environment_variables.py, MLFLOW_HTTP_REQUEST_MAX_RETRIES and _TIMEOUT): minutes
# against a server that is down. A step bounds them (unless they are set) so that its check of the task's run
# ends within 10 s: two tries of at most 3 s each, the second at once (urllib3 waits factor x 2^(n-1) plus the
# jitter only from the second retry on: urllib3/urllib3@2.7.0:src/urllib3/util/retry.py, get_backoff_time).
BOUNDED_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "3",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.5",
}


@dataclass(frozen=True)
class Tracking:
    """Where a step logs: the tracking server and the task's run in it."""

    uri: str
    run_id: str
    experiment_id: str = ""
    workspace: str = ""


def tracking_from_env(environ: Mapping[str, str] | None = None) -> Tracking | None:
    """The task's run as the variables name it; None (nothing to log) without both the URI and the run id."""
    env = os.environ if environ is None else environ
    uri, run_id = env.get(TRACKING_URI, "").strip(), env.get(RUN_ID, "").strip()
    if not (uri and run_id):
        return None
    return Tracking(uri, run_id, env.get(EXPERIMENT_ID, "").strip(), env.get(WORKSPACE, "").strip())


@contextlib.contextmanager
def bounded_http() -> Iterator[None]:
    """Within the block, MLflow's HTTP requests are bounded as :data:`BOUNDED_HTTP` says, unless already set."""
    added = {k: v for k, v in BOUNDED_HTTP.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def credential_keys(environ: Mapping[str, str]) -> dict[str, str]:
    """The key of ``kfp-mlflow-credentials`` each credential variable comes from, as KFP_MLFLOW_CONFIG's
    ``credentialSecretRef`` names it; empty when the step was given no such config (or an unreadable one)."""
    try:
        config = json.loads(environ.get(KFP_CONFIG, "") or "{}")
    except ValueError:
        return {}
    ref = config.get("credentialSecretRef") if isinstance(config, dict) else None
    if not isinstance(ref, dict):
        return {}
    keys = {name: ref.get(field) for name, field in CREDENTIAL_KEYS.items()}
    return {name: key for name, key in keys.items() if isinstance(key, str) and key}


def replica_env(environ: Mapping[str, str] | None = None) -> list[EnvVar]:
    """The MLflow variables every training replica gets, so that a program calling ``mlflow.log_metric`` logs into
    the task's run.

    Credentials are passed only by reference, never as a value in the job's manifest: each as the
    ``valueFrom.secretKeyRef`` KFP gave the step (``kfp-mlflow-credentials``, the key KFP_MLFLOW_CONFIG names);
    without that config (a local run), under the variable's own name and optional. The local backend resolves a
    ``valueFrom`` from the step's own environment (:mod:`kftrain.backends.local.replica`); on a cluster the replicas
    get the credentials only from that Secret, in the job's namespace.
    """
    env = os.environ if environ is None else environ
    if tracking_from_env(env) is None:
        return []
    out = [EnvVar(name=name, value=env[name]) for name in _PLAIN if env.get(name)]
    keys = credential_keys(env)
    for name in CREDENTIAL_KEYS:
        if not env.get(name):
            continue
        ref: dict[str, object] = {"name": CREDENTIAL_SECRET, "key": keys.get(name, name)}
        if name not in keys:
            ref["optional"] = True
        out.append(EnvVar(name=name, value_from={"secretKeyRef": ref}))
    return out
