"""The object store a run's launcher opens (its ``SessionInfo``), found as KFP's root driver finds it.

A ``minio://`` root's session comes from ``providers.minio.default``, or without ``providers`` from the
release's default; anything else in ``providers`` is reported as not modelled. The rules, with their upstream
lines, are in the comment below the imports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from testbed.kfp_backend.versions import Backend

# The root DAG's driver reads the namespace's ``kfp-launcher`` ConfigMap once per run and records the session in
# the run's context; every launcher of the run opens the bucket with it (kubeflow/pipelines@2.5.0:
# backend/src/v2/driver/driver.go:174, launcher_v2.go:211; @2.17.0 driver/root_dag.go:115, launcher_v2.go:252):
#
# - for a ``minio://`` root, ``providers.minio.default`` gives the endpoint, region, ``disableSSL`` and the
#   credentials' ``secretRef`` (@2.17.0 config/env.go:118-161, GetStoreSessionInfo; config/minio.go);
# - without ``providers`` the release's default session: region ``minio``, plain HTTP, the secret
#   ``mlpipeline-minio-artifact`` with the keys ``accesskey``/``secretkey`` (@2.5.0 config/env.go:40-43, 164-179,
#   getDefaultMinioSessionInfo; @2.17.0 env.go:41-44, 177-193), and the endpoint :func:`default_endpoint` gives.
#
# Anything else in ``providers`` (overrides, the ``s3``/``gs`` providers, ``fromEnv``) is reported as not modelled,
# so a test that needs it shows up here rather than being guessed.


DEFAULT_SECRET = "mlpipeline-minio-artifact"
SERVICE_ENV = ("MINIO_SERVICE_SERVICE_HOST", "MINIO_SERVICE_SERVICE_PORT")


class SessionError(Exception):
    """The driver cannot tell which store the run uses: the run fails before any task."""


@dataclass(frozen=True)
class Session:
    """``objectstore.SessionInfo`` of a ``minio://`` root: where the store is and which secret holds its keys."""

    endpoint: str  # host:port, as the cluster resolves it
    secret_name: str
    access_key_key: str
    secret_key_key: str
    disable_ssl: bool = True
    region: str = "minio"

    def as_json(self) -> str:
        """The session as the launcher records it on each output artifact (``store_session_info``)."""
        params = {
            "region": self.region,
            "endpoint": self.endpoint,
            "disableSSL": str(self.disable_ssl).lower(),
            "fromEnv": "false",
            "secretName": self.secret_name,
            "accessKeyKey": self.access_key_key,
            "secretKeyKey": self.secret_key_key,
        }
        return json.dumps({"Provider": "minio", "Params": params}, separators=(",", ":"))


def default_endpoint(backend: Backend, env: dict[str, str]) -> str:
    """The default store of ``backend``: before 2.15 the namespace's ``minio-service`` when the driver's pod has its
    service variables (kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/config.go:166-180, MinioDefaultEndpoint;
    @2.14.0 the same), else the release's constant (@2.15.0 config/env.go:182 reads the constant alone)."""
    host, port = (env.get(name, "") for name in SERVICE_ENV)
    if backend.service_env_store and host and port:
        return f"{host}:{port}"
    return backend.default_store


def session_for(root: str, backend: Backend, configmap: dict[str, str], env: dict[str, str]) -> Session:
    """The session of pipeline root ``root`` given the ``kfp-launcher`` ConfigMap's data and the driver's env."""
    if not root.startswith("minio://"):
        raise SessionError(f"pipeline root {root!r}: only minio:// roots are modelled by this harness")
    text = configmap.get("providers", "")
    providers: Any = yaml.safe_load(text) if text.strip() else None
    minio = (providers or {}).get("minio")
    if minio is None:
        return Session(default_endpoint(backend, env), DEFAULT_SECRET, "accesskey", "secretkey")
    unknown = set(providers) - {"minio"} or set(minio) - {"default"}
    default = minio.get("default") or {}
    credentials = default.get("credentials") or {}
    unknown |= set(default) - {"endpoint", "region", "disableSSL", "credentials"}
    unknown |= set(credentials) - {"fromEnv", "secretRef"}
    if unknown or credentials.get("fromEnv") or "secretRef" not in credentials:
        raise SessionError(f"providers {providers}: only minio.default with a secretRef is modelled by this harness")
    ref = credentials["secretRef"]
    return Session(
        default["endpoint"],
        ref["secretName"],
        ref["accessKeyKey"],
        ref["secretKeyKey"],
        bool(default.get("disableSSL", False)),
        default.get("region", ""),
    )
