"""The object store of a KFP task, found as KFP's own launcher finds it, so a step needs no credentials of its own.

KFP's launcher, in the same pod and under the same service account as the step, uploads and downloads the
step's artifacts. It reads the ``kfp-launcher`` ConfigMap of the run's namespace (optional): ``providers``
(YAML) configures each scheme's store, and without a provider a ``minio://`` root gets KFP's default store.
This module applies the same rules to any ``minio://`` or ``s3://`` URI a step reads or writes, and reads the
credentials' secret through the Kubernetes API as the launcher does:

- ``providers.<minio|s3>.default`` gives ``endpoint``, ``region``, ``disableSSL`` (default false) and
  ``credentials``: ``fromEnv`` (the pod's environment, AWS's chain) or ``secretRef`` (``secretName``,
  ``accessKeyKey``, ``secretKeyKey``); the first of ``overrides`` whose ``bucketName`` is the URI's bucket and
  whose ``keyPrefix`` starts its key replaces what it sets
  (kubeflow/pipelines@2.17.0:backend/src/v2/config/s3.go, S3ProviderConfig.ProvideSessionInfo; minio.go reads
  the same structure; env.go, ``providers`` is YAML under the keys ``minio``, ``s3``, ``gs``);
- ``minio://`` without a provider: region ``minio``, plain HTTP, the secret ``mlpipeline-minio-artifact``
  (keys ``accesskey``/``secretkey``), and the endpoint of the backend's version: ``seaweedfs.kubeflow:9000``
  from 2.16.0 (kubeflow/pipelines@2.16.0:backend/src/v2/objectstore/config.go,
  ``DefaultEndpointInMultiUserMode``), before it the ``minio-service`` of the pod's own namespace when
  Kubernetes gave it ``MINIO_SERVICE_SERVICE_HOST``/``_PORT``, else ``minio-service.kubeflow:9000``
  (kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/config.go, MinioDefaultEndpoint; config/env.go,
  getDefaultMinioSessionInfo);
- ``s3://`` without a provider: the environment (``fromEnv``).

The backend's version is the tag of the step pod's ``kfp-launcher`` init container image (the release
manifests pin it to the release: ``ghcr.io/kubeflow/kfp-launcher:2.16.0``); a pod whose launcher image
carries no release tag gets the newest default, and says so in the log. Only a pod KFP created (it has
``KFP_POD_NAME``) looks any of this up, once per process; anywhere else nothing changes.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

import yaml

from kftrain.storage.errors import StorageError

log = logging.getLogger(__name__)

LAUNCHER_CONFIGMAP = "kfp-launcher"
DEFAULT_SECRET = "mlpipeline-minio-artifact"
DEFAULT_ACCESS_KEY_KEY = "accesskey"
DEFAULT_SECRET_KEY_KEY = "secretkey"
SEAWEEDFS_ENDPOINT = "seaweedfs.kubeflow:9000"  # KFP >= 2.16.0
MINIO_SERVICE_ENDPOINT = "minio-service.kubeflow:9000"  # KFP < 2.16.0
SEAWEEDFS_SINCE = (2, 16)
LAUNCHER_CONTAINER = "kfp-launcher"
_SCHEMES = {"minio", "s3"}
_RELEASE_TAG = re.compile(r":v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+][^:/@]*)?$")


@dataclass(frozen=True)
class SessionInfo:
    """What KFP's launcher would open a bucket with (``objectstore.SessionInfo``'s S3 params)."""

    endpoint: str  # host:port as KFP writes it, "" for the provider's default (AWS)
    region: str
    disable_ssl: bool
    from_env: bool  # credentials from the pod's environment
    secret_name: str = ""
    access_key_key: str = ""
    secret_key_key: str = ""

    @property
    def endpoint_url(self) -> str | None:
        if not self.endpoint:
            return None
        if "://" in self.endpoint:
            return self.endpoint
        return ("http://" if self.disable_ssl else "https://") + self.endpoint


@dataclass(frozen=True)
class KfpStore:
    """The store of one URI: how to reach it, and where its credentials come from."""

    session: SessionInfo
    source: str  # where the settings came from, for the log

    def credentials(self) -> dict[str, str] | None:
        """key/secret from the secret KFP's configuration names (read once); None: from the environment."""
        return None if self.session.from_env else _cluster().secret_keys(self.session)


def in_kfp_task_pod() -> bool:
    """Whether this process runs in a pod KFP's backend created for a task (its launcher sets ``KFP_POD_NAME``)."""
    return bool(os.environ.get("KFP_POD_NAME"))


def split_bucket(uri: str) -> tuple[str, str, str]:
    """``(scheme, bucket, key)`` of an object-store URI."""
    scheme, _, rest = uri.partition("://")
    bucket, _, key = rest.partition("/")
    return scheme, bucket, key


def default_minio_endpoint(version: tuple[int, int] | None, env: dict[str, str] | os._Environ[str]) -> str:
    """KFP's default store endpoint at ``version`` (None: unknown, the newest)."""
    if version is None or version >= SEAWEEDFS_SINCE:
        return SEAWEEDFS_ENDPOINT
    host, port = env.get("MINIO_SERVICE_SERVICE_HOST"), env.get("MINIO_SERVICE_SERVICE_PORT")
    return f"{host}:{port}" if host and port else MINIO_SERVICE_ENDPOINT


def session_info(uri: str, providers: dict[str, Any] | None, default_endpoint: str) -> SessionInfo:
    """The session KFP's launcher would use for ``uri`` given the ConfigMap's ``providers`` (parsed YAML)."""
    scheme, bucket, key = split_bucket(uri)
    provider = (providers or {}).get(scheme) or {}
    if not isinstance(provider, dict):
        raise StorageError(f"kfp-launcher ConfigMap: providers.{scheme} must be a mapping")
    default, overrides = provider.get("default"), provider.get("Overrides")
    if default is None and overrides is None:
        if scheme == "minio":
            return SessionInfo(
                default_endpoint,
                "minio",
                True,
                False,
                DEFAULT_SECRET,
                DEFAULT_ACCESS_KEY_KEY,
                DEFAULT_SECRET_KEY_KEY,
            )
        return SessionInfo("", "", False, True)
    if not isinstance(default, dict) or not isinstance(default.get("credentials"), dict):
        raise StorageError(f"kfp-launcher ConfigMap: providers.{scheme}.default.credentials is missing")
    chosen = {**default}
    for override in overrides or []:
        if override.get("bucketName") == bucket and key.startswith(override.get("keyPrefix") or ""):
            if not isinstance(override.get("credentials"), dict):
                raise StorageError(f"kfp-launcher ConfigMap: providers.{scheme}.Overrides: credentials missing")
            chosen.update({k: v for k, v in override.items() if v not in (None, "") or k == "credentials"})
            break
    credentials = chosen["credentials"]
    secret = credentials.get("secretRef") or {}
    if not credentials.get("fromEnv") and not secret.get("secretName"):
        raise StorageError(f"kfp-launcher ConfigMap: providers.{scheme}: credentials need fromEnv or a secretRef")
    return SessionInfo(
        str(chosen.get("endpoint") or ""),
        str(chosen.get("region") or ""),
        bool(chosen.get("disableSSL") or False),
        bool(credentials.get("fromEnv")),
        str(secret.get("secretName") or ""),
        str(secret.get("accessKeyKey") or ""),
        str(secret.get("secretKeyKey") or ""),
    )


def launcher_version(image: str) -> tuple[int, int] | None:
    """(major, minor) of a ``kfp-launcher`` image's release tag; None for ``latest``, a digest or no tag."""
    match = _RELEASE_TAG.search(image.split("@", 1)[0])
    return (int(match.group(1)), int(match.group(2))) if match else None


def kfp_store(uri: str) -> KfpStore | None:
    """The store of ``uri`` as KFP's launcher in this pod would open it; None outside a KFP task pod and for
    schemes other than ``minio://`` and ``s3://``."""
    if not in_kfp_task_pod() or split_bucket(uri)[0] not in _SCHEMES or "://" not in uri:
        return None
    cluster = _cluster()
    scheme, bucket, _ = split_bucket(uri)
    providers = cluster.providers()
    has_provider = bool((providers or {}).get(scheme))
    default_endpoint = ""
    if scheme == "minio" and not has_provider:
        version = cluster.version()
        default_endpoint = default_minio_endpoint(version, os.environ)
        source = f"KFP {'.'.join(map(str, version)) if version else '(newest)'} default store"
    else:
        source = f"kfp-launcher ConfigMap providers.{scheme}" if has_provider else "the environment"
    session = session_info(uri, providers, default_endpoint)
    _log_once(
        f"{scheme}://{bucket}", session.endpoint_url or "", source, "" if session.from_env else session.secret_name
    )
    return KfpStore(session, source)


@functools.cache
def _log_once(bucket: str, endpoint: str, source: str, secret: str) -> None:
    log.info(
        "object store of %s: %s (%s), credentials %s",
        bucket,
        endpoint or "the provider's default endpoint",
        source,
        f"from secret {secret}" if secret else "from the environment",
    )


class _Cluster:
    """What this pod may read of its namespace, each read once: the ConfigMap, its own pod, secrets."""

    def __init__(self) -> None:
        from kubernetes import client

        from kftrain.kube_client import SERVICE_ACCOUNT_NAMESPACE, load_client

        try:
            api_client, kubeconfig_namespace = load_client()
        except Exception as exc:  # no cluster configuration: the step cannot do what KFP's launcher does
            raise StorageError(f"cannot read the kfp-launcher ConfigMap (no Kubernetes API access): {exc}") from None
        in_pod = SERVICE_ACCOUNT_NAMESPACE.is_file() and SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        self.namespace = str(in_pod or kubeconfig_namespace or "default")
        self.core = client.CoreV1Api(api_client)
        self._secrets: dict[str, dict[str, str]] = {}

    def _get(self, what: str, read: Any, name: str) -> Any:
        from kubernetes.client.rest import ApiException

        try:
            response = read(name, self.namespace, _preload_content=False)
            return json.loads(response.data)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise StorageError(
                f"cannot read {what} {self.namespace}/{name} (HTTP {exc.status}): the step runs as KFP's launcher "
                "does and needs the same access"
            ) from None

    @functools.cached_property
    def _config(self) -> dict[str, str]:
        configmap = self._get("ConfigMap", self.core.read_namespaced_config_map, LAUNCHER_CONFIGMAP)
        return dict((configmap or {}).get("data") or {})

    def providers(self) -> dict[str, Any] | None:
        text = self._config.get("providers") or ""
        if not text.strip():
            return None
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise StorageError(f"kfp-launcher ConfigMap: providers is not valid YAML: {exc}") from None
        if not isinstance(parsed, dict):
            raise StorageError("kfp-launcher ConfigMap: providers must be a mapping")
        return parsed

    def version(self) -> tuple[int, int] | None:
        pod = self._get("pod", self.core.read_namespaced_pod, os.environ.get("KFP_POD_NAME", ""))
        containers = ((pod or {}).get("spec") or {}).get("initContainers") or []
        images = [str(c.get("image") or "") for c in containers if c.get("name") == LAUNCHER_CONTAINER]
        version = launcher_version(images[0]) if images else None
        if version is None:
            log.info("KFP's version is unknown (launcher image %s): its newest default store applies", images or "none")
        return version

    def secret_keys(self, session: SessionInfo) -> dict[str, str]:
        if session.secret_name not in self._secrets:
            secret = self._get("secret", self.core.read_namespaced_secret, session.secret_name)
            if secret is None:
                raise StorageError(
                    f"the object store's secret {self.namespace}/{session.secret_name} (named by KFP's store "
                    "configuration) does not exist"
                )
            self._secrets[session.secret_name] = {
                k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()
            }
        data = self._secrets[session.secret_name]
        missing = [k for k in (session.access_key_key, session.secret_key_key) if k not in data]
        if missing:
            raise StorageError(f"secret {self.namespace}/{session.secret_name} has no key {', '.join(missing)}")
        return {"key": data[session.access_key_key], "secret": data[session.secret_key_key]}


@functools.cache
def _cluster() -> _Cluster:
    return _Cluster()


def clear_cache() -> None:
    """Forget what was read of the cluster (the ConfigMap, the pod, secrets): the next lookup reads them again."""
    _cluster.cache_clear()
    _log_once.cache_clear()
