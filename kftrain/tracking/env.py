"""The MLflow variables a step gets, the bounds on MLflow's HTTP retries, and what the training replicas are given.

KFP 2.17's driver gives a task's container ``MLFLOW_RUN_ID`` (its nested run), ``MLFLOW_TRACKING_URI``,
``MLFLOW_EXPERIMENT_ID`` (``MLFLOW_WORKSPACE``, ``MLFLOW_TRACKING_AUTH``, credentials as ``secretKeyRef`` of
``kfp-mlflow-credentials``) only when the plugin's ``settings.injectUserEnvVars`` is true, which it is not by default
(kubeflow/pipelines@2.17.0:backend/src/v2/common/plugins/mlflow/handler.go:134, RetrieveUserContainerEnvVars;
backend/src/apiserver/plugins/mlflow/handler.go:116). ``KFP_MLFLOW_CONFIG`` (endpoint, experimentId,
parentRunId; never a credential) is on the step's container either way (apiserver/plugins/mlflow/config.go:527).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from kftrain.environ import environment
from kftrain.errors import JobSpecError
from kftrain.job import EnvVar
from kftrain.redaction import redact, userinfo

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
    # A 429/503's Retry-After (an hour, say) is waited out by default (MLFLOW_HTTP_RESPECT_RETRY_AFTER_HEADER).
    "MLFLOW_HTTP_RESPECT_RETRY_AFTER_HEADER": "false",
}


@dataclass(frozen=True)
class Tracking:
    """Where a step logs: the tracking server and the task's run in it."""

    uri: str
    run_id: str  # "": a run is made for the step (a tracking URI given as an input)
    experiment_id: str = ""
    workspace: str = ""
    owned: bool = False  # the step made the run, and ends it


def tracking_from_env(environ: Mapping[str, str] | None = None, uri: str = "") -> Tracking | None:
    """The task's run as the variables name it (a URI alone, a user's shell default, names no run: None), else,
    given ``uri`` (a step's tracking-URI input), a run to be made for the step on that server; None: nothing to
    log."""
    env = os.environ if environ is None else environ
    env_uri, run_id = env.get(TRACKING_URI, "").strip(), env.get(RUN_ID, "").strip()
    experiment, workspace = env.get(EXPERIMENT_ID, "").strip(), env.get(WORKSPACE, "").strip()
    if env_uri and run_id:
        return Tracking(env_uri, run_id, experiment, workspace)
    if uri.strip():
        return Tracking(uri.strip(), "", experiment, workspace)
    return None


def tracking_uri(value: str, field: str = "mlflow_tracking_uri") -> str:
    """A step's tracking-URI input, stripped; one holding credentials (``user:password@``) is refused naming the
    input, never its value, before the step makes anything: they would show in every log and manifest."""
    value = value.strip()
    if any(userinfo(value)):
        raise JobSpecError(
            field,
            "holds credentials (user:password@): give the server's URI alone, and the credentials as "
            "MLFLOW_TRACKING_TOKEN (or MLFLOW_TRACKING_USERNAME and _PASSWORD) from a Secret",
        )
    return value


_UNUSABLE: set[str] = set()  # runs this process could not open: its replicas are not pointed at them


def unusable(run_id: str) -> None:
    """This step could not open the run ``run_id``: :func:`replica_env` gives its replicas nothing of it."""
    _UNUSABLE.add(run_id)


def kfp_config(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """KFP_MLFLOW_CONFIG as a dict; empty when absent or unreadable."""
    env = os.environ if environ is None else environ
    try:
        config = json.loads(env.get(KFP_CONFIG, "") or "{}")
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def local_store(uri: str) -> str:
    """Why ``uri`` is no tracking server a step can log to ("" when it may be one): a folder (a path, ``file:``) or
    an SQLite file (``sqlite:``) is on the step's own disk, which its training replicas' pods and the next step
    cannot read (and MLflow 3 refuses a folder unless told: mlflow/mlflow@v3.17.2:mlflow/store/tracking/
    file_store.py, FileStore.__init__, MLFLOW_ALLOW_FILE_STORE)."""
    scheme = urlsplit(uri.strip()).scheme.lower()
    if uri.strip().lower() in ("databricks", "databricks-uc", "uc"):  # a workspace, named as MLflow names one
        return ""
    if scheme in ("", "file") or len(scheme) == 1:  # a path, or a Windows drive
        what = "a folder"
    elif scheme.startswith("sqlite"):
        what = "an SQLite file"
    else:
        return ""
    return (
        f"{redact(uri)!r} is {what} on this machine's disk, a store the training replicas and the "
        "next step cannot share: give the http(s):// URL of an MLflow tracking server (mlflow server)"
    )


def without_userinfo(uri: str) -> str:
    """``uri`` without its ``user:password@`` (:func:`kftrain.redaction.userinfo`: up to the URI's last ``@``)."""
    scheme, sep, rest = uri.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if any(userinfo(uri)) else uri


@contextlib.contextmanager
def step_credentials(uri: str) -> Iterator[None]:
    """Within the block, the credential variables without surrounding whitespace (a token read from a file or a
    Secret ends in a newline, which no header may hold), and the credentials a tracking URI holds also as
    ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` (unless set): where the local backend's replicas read them from."""
    from_uri = dict(zip((USERNAME, PASSWORD), map(unquote, userinfo(uri)), strict=True))
    names = [k for k in CREDENTIAL_KEYS if os.environ.get(k, "").strip() != os.environ.get(k, "")]
    names += [k for k, v in from_uri.items() if v and k not in os.environ]
    with environment({name: os.environ.get(name, "").strip() or from_uri.get(name, "") for name in names}):
        yield


@contextlib.contextmanager
def bounded_http() -> Iterator[None]:
    """Within the block, MLflow's HTTP requests are bounded as :data:`BOUNDED_HTTP` says, unless already set."""
    with environment({k: v for k, v in BOUNDED_HTTP.items() if k not in os.environ}):
        yield


def credential_keys(environ: Mapping[str, str]) -> dict[str, str]:
    """The key of ``kfp-mlflow-credentials`` each credential variable comes from, as KFP_MLFLOW_CONFIG's
    ``credentialSecretRef`` names it; empty when the step was given no such config (or an unreadable one)."""
    ref = kfp_config(environ).get("credentialSecretRef")
    if not isinstance(ref, dict):
        return {}
    keys = {name: ref.get(field) for name, field in CREDENTIAL_KEYS.items()}
    return {name: key for name, key in keys.items() if isinstance(key, str) and key}


def replica_env(environ: Mapping[str, str] | None = None, run: Tracking | None = None) -> list[EnvVar]:
    """The MLflow variables every training replica gets, so that a program calling ``mlflow.log_metric`` logs into
    the task's run: the one the variables name, or ``run`` when the step made it (a tracking-URI input).

    Credentials are passed only by reference, never as a value in the job's manifest: each as the
    ``valueFrom.secretKeyRef`` KFP gave the step (``kfp-mlflow-credentials``, the key KFP_MLFLOW_CONFIG names);
    without that config (a local run), under the variable's own name and optional. The local backend resolves a
    ``valueFrom`` from the step's own environment (:mod:`kftrain.backends.local.replica`); on a cluster the replicas
    get the credentials only from that Secret, in the job's namespace. A tracking URI's own ``user:password@`` is
    left out of it (:func:`step_credentials`). Nothing when this step could not open the run (:func:`unusable`): a
    program's own ``mlflow.log_metric`` would wait on that server in turn.
    """
    env = os.environ if environ is None else environ
    tracking = run if run is not None and run.owned else tracking_from_env(env)
    if tracking is None or tracking.run_id in _UNUSABLE:
        return []
    plain = {
        TRACKING_URI: tracking.uri,
        RUN_ID: tracking.run_id,
        EXPERIMENT_ID: tracking.experiment_id,
        WORKSPACE: tracking.workspace,
        TRACKING_AUTH: env.get(TRACKING_AUTH, "").strip(),
    }
    out = [EnvVar(name=name, value=without_userinfo(value)) for name, value in plain.items() if value]
    keys = credential_keys(env)
    in_uri = dict(zip((USERNAME, PASSWORD), userinfo(tracking.uri), strict=True))
    for name in CREDENTIAL_KEYS:
        if not (env.get(name) or in_uri.get(name)):
            continue
        ref: dict[str, object] = {"name": CREDENTIAL_SECRET, "key": keys.get(name, name)}
        if name not in keys:
            ref["optional"] = True
        out.append(EnvVar(name=name, value_from={"secretKeyRef": ref}))
    return out
