"""The object store of a KFP task, found as KFP's own launcher finds it, so a step needs no credentials of its own.

Only in a pod KFP created (``KFP_POD_NAME``), once per process, for ``minio://`` and ``s3://`` URIs: the
``kfp-launcher`` ConfigMap's ``providers`` give each scheme's endpoint, region, ``disableSSL`` and credentials
(``fromEnv``, or a ``secretRef`` read through the Kubernetes API), an ``overrides`` entry matching the bucket and key
prefix winning (kubeflow/pipelines@2.17.0:backend/src/v2/config/s3.go: S3ProviderConfig.ProvideSessionInfo). Without
a provider ``s3://`` uses the environment, and ``minio://`` KFP's default store for the backend's version (the tag of
the pod's ``kfp-launcher`` image; untagged: refused, naming what to set): see :func:`default_minio_endpoint`.
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

from kftrain.errors import redact_urls
from kftrain.storage.errors import StorageError

log = logging.getLogger(__name__)

LAUNCHER_CONFIGMAP = "kfp-launcher"
DEFAULT_SECRET = "mlpipeline-minio-artifact"
DEFAULT_ACCESS_KEY_KEY = "accesskey"
DEFAULT_SECRET_KEY_KEY = "secretkey"
SEAWEEDFS_ENDPOINT = "seaweedfs.kubeflow:9000"  # KFP >= 2.16.0
MINIO_SERVICE_ENDPOINT = "minio-service.kubeflow:9000"  # KFP < 2.16.0
SEAWEEDFS_SINCE = (2, 16)
# From 2.15.0 the default endpoint is a constant: the minio-service variables are no longer read.
SERVICE_ENV_UNTIL = (2, 15)
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
    # Path-style requests (http://host/bucket/key), as KFP's launcher makes them unless forcePathStyle is false
    # (kubeflow/pipelines@2.17.0:backend/src/v2/config/s3.go:111-114, 147-148; objectstore/config.go:225-233: unset
    # is true, also for the default store; object_store.go:355 applies it).
    force_path_style: bool = True

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


def default_minio_endpoint(version: tuple[int, int], env: dict[str, str] | os._Environ[str]) -> str:
    """KFP's default store endpoint at ``version``: before 2.15 the pod's
    ``minio-service`` variables when both are set (kubeflow/pipelines@2.14.0:backend/src/v2/config/env.go:169,
    objectstore/config.go:166-180, MinioDefaultEndpoint); at 2.15 the constant ``minio-service.kubeflow:9000``
    alone (@2.15.0 config/env.go:182, objectstore/config.go:29); from 2.16 ``seaweedfs.kubeflow:9000``."""
    if version >= SEAWEEDFS_SINCE:
        return SEAWEEDFS_ENDPOINT
    if version >= SERVICE_ENV_UNTIL:
        return MINIO_SERVICE_ENDPOINT
    host, port = env.get("MINIO_SERVICE_SERVICE_HOST"), env.get("MINIO_SERVICE_SERVICE_PORT")
    return f"{host}:{port}" if host and port else MINIO_SERVICE_ENDPOINT


# The shapes KFP's launcher decodes ``providers`` into: Go structs, filled by sigs.k8s.io/yaml (YAML to JSON, then
# encoding/json; kubeflow/pipelines@2.17.0:backend/src/v2/config/env.go getBucketProviders, BucketProviders). A
# field is a string (a YAML number or boolean becomes its text: kubernetes-sigs/yaml@v1.6.0:yaml.go
# convertToJSONableObject), a boolean (``*bool``/``bool``: a YAML boolean only, "false" in quotes is refused), a
# whole number (``*int``), a struct (a mapping) or a list of structs; null leaves a field unset; keys match
# case-insensitively and unknown keys are ignored (encoding/json). The structs: config/s3.go (S3ProviderConfig,
# S3ProviderDefault, S3Override, S3Credentials, S3SecretRef; minio.go MinioProviderConfig is the same) and
# config/gcs.go (GCSProviderConfig ...): the launcher decodes the whole document, so a malformed ``gs`` fails a
# ``minio://`` lookup as well.
_STR, _BOOL, _INT = "string", "boolean", "integer"
_Shape = Any  # a field's kind, a struct (dict of fields) or a list of one struct ([struct])
_S3_SECRET_REF: dict[str, _Shape] = {"secretName": _STR, "accessKeyKey": _STR, "secretKeyKey": _STR}
_S3_CREDENTIALS: dict[str, _Shape] = {"fromEnv": _BOOL, "secretRef": _S3_SECRET_REF}
_S3_COMMON: dict[str, _Shape] = {
    "endpoint": _STR,
    "region": _STR,
    "disableSSL": _BOOL,
    "forcePathStyle": _BOOL,
    "maxRetries": _INT,
    "credentials": _S3_CREDENTIALS,
}
_S3_PROVIDER: dict[str, _Shape] = {
    "default": _S3_COMMON,
    "Overrides": [{**_S3_COMMON, "bucketName": _STR, "keyPrefix": _STR}],
}
_GCS_CREDENTIALS: dict[str, _Shape] = {"fromEnv": _BOOL, "secretRef": {"secretName": _STR, "tokenKey": _STR}}
_GCS_PROVIDER: dict[str, _Shape] = {
    "default": {"credentials": _GCS_CREDENTIALS},
    "Overrides": [{"bucketName": _STR, "keyPrefix": _STR, "credentials": _GCS_CREDENTIALS}],
}
_PROVIDERS: dict[str, _Shape] = {"minio": _S3_PROVIDER, "s3": _S3_PROVIDER, "gs": _GCS_PROVIDER}


def _refuse(where: str, problem: str) -> StorageError:
    return StorageError(f"kfp-launcher ConfigMap: {where}: {problem}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def decode(value: Any, shape: _Shape, where: str) -> Any:
    """``value`` (parsed YAML) as the launcher's Go type ``shape`` decodes it: a struct as a dict with every field
    (None: unset), a list as a list; what the launcher refuses is an error naming the field (``where``)."""
    if value is None:
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            raise _refuse(where, f"must be a list (of mappings), not {_shown(value)}")
        return [decode(item, shape[0], f"{where}[{i}]") or decode({}, shape[0], "") for i, item in enumerate(value)]
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise _refuse(where, f"must be a mapping, not {_shown(value)}")
        out = {}
        for name, field in shape.items():
            given = [k for k in value if isinstance(k, str) and k.lower() == name.lower()]
            if len(given) > 1:  # encoding/json would take one of them, in an order nobody sees: say which
                raise _refuse(where, f"{' and '.join(map(repr, given))} are the same field {name}: keep one")
            path = f"{where}.{name}" if where else name
            out[name] = decode(value[given[0]], field, path) if given else None
        return out
    if shape == _BOOL:
        if not isinstance(value, bool):
            raise _refuse(where, f"must be true or false (a YAML boolean, unquoted), not {_shown(value)}")
        return value
    if shape == _INT:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise _refuse(where, f"must be a whole number, not {_shown(value)}")
        return int(value)
    if isinstance(value, bool):  # a YAML boolean where a string is due becomes "true"/"false"
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if not isinstance(value, str):
        raise _refuse(where, f"must be a string, not {_shown(value)}")
    return value


def decode_providers(parsed: Any) -> dict[str, Any] | None:
    """The ConfigMap's ``providers`` (parsed YAML) decoded as the launcher decodes it; None when it is empty."""
    if parsed is None:
        return None
    return dict(decode(parsed, _PROVIDERS, "providers"))


def session_info(uri: str, providers: dict[str, Any] | None, default_endpoint: str) -> SessionInfo:
    """The session KFP's launcher would use for ``uri`` given the ConfigMap's ``providers`` (parsed YAML; checked
    here as the launcher decodes it, :func:`decode_providers`)."""
    scheme, bucket, key = split_bucket(uri)
    where = f"providers.{scheme}"
    provider = (decode_providers(providers) or {}).get(scheme) or {}
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
    if default is None or default["credentials"] is None:  # s3.go: "missing default credentials"
        raise _refuse(f"{where}.default.credentials", "missing")
    endpoint, region = default["endpoint"] or "", default["region"] or ""
    disable_ssl = bool(default["disableSSL"])  # s3.go: unset is false
    path_style = default["forcePathStyle"] is not False  # s3.go: unset is true
    credentials, credentials_at = default["credentials"], f"{where}.default.credentials"
    for i, override in enumerate(overrides or []):
        # s3.go getOverrideByPrefix: the first whose bucket is the URI's and whose keyPrefix starts its key
        if override["bucketName"] != bucket or not key.startswith(override["keyPrefix"] or ""):
            continue
        endpoint, region = override["endpoint"] or endpoint, override["region"] or region
        if override["disableSSL"] is not None:
            disable_ssl = override["disableSSL"]
        if override["forcePathStyle"] is not None:
            path_style = override["forcePathStyle"]
        if override["credentials"] is None:  # s3.go: "missing override credentials"
            raise _refuse(f"{where}.Overrides[{i}].credentials", "missing")
        credentials, credentials_at = override["credentials"], f"{where}.Overrides[{i}].credentials"
        break
    from_env = bool(credentials["fromEnv"])
    secret = credentials["secretRef"]
    if not from_env:
        # s3.go: an override without one is "missing override secretref"; the default's is read unchecked there
        if secret is None:
            raise _refuse(f"{credentials_at}.secretRef", "missing: credentials need fromEnv or a secretRef")
        if not secret["secretName"]:
            raise _refuse(f"{credentials_at}.secretRef.secretName", "missing")
        return SessionInfo(
            endpoint,
            region,
            disable_ssl,
            False,
            secret["secretName"],
            secret["accessKeyKey"] or "",
            secret["secretKeyKey"] or "",
            path_style,
        )
    return SessionInfo(endpoint, region, disable_ssl, True, force_path_style=path_style)


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
        image = cluster.launcher_image()
        version = launcher_version(image)
        if version is None:
            raise unknown_version(uri, image)
        default_endpoint = default_minio_endpoint(version, os.environ)
        source = f"KFP {'.'.join(map(str, version))} default store"
    else:
        source = f"kfp-launcher ConfigMap providers.{scheme}" if has_provider else "the environment"
    session = session_info(uri, providers, default_endpoint)
    _log_once(
        f"{scheme}://{bucket}", session.endpoint_url or "", source, "" if session.from_env else session.secret_name
    )
    return KfpStore(session, source)


def unknown_version(uri: str, image: str) -> StorageError:
    """The refusal of a ``minio://`` URI whose default store this pod cannot tell: its ``kfp-launcher`` image has no
    release tag (KFP's own fallback is ``:latest``: kubeflow/pipelines@2.17.0:backend/src/v2/compiler/argocompiler/
    container.go:50, and @2.5.0 container.go:44), and the default store differs by release."""
    return StorageError(
        f"{uri}: KFP's default store differs by release ({MINIO_SERVICE_ENDPOINT} before 2.16, {SEAWEEDFS_ENDPOINT} "
        f"from 2.16) and this pod's kfp-launcher image ({image or 'none'}) names no release; set the store in the "
        f"{LAUNCHER_CONFIGMAP} ConfigMap's providers.minio.default (endpoint, disableSSL, credentials.secretRef: KFP's "
        "launcher reads the same), or MINIO_ENDPOINT for the step"
    )


@functools.cache
def _log_once(bucket: str, endpoint: str, source: str, secret: str) -> None:
    log.info(
        "object store of %s: %s (%s), credentials %s",
        bucket,
        redact_urls(endpoint) or "the provider's default endpoint",  # an endpoint may carry user:password@
        source,
        f"from secret {secret}" if secret else "from the environment",
    )


class _Cluster:
    """What this pod may read of its namespace, each read once: the ConfigMap, its own pod, secrets."""

    def __init__(self, api_client: Any = None, namespace: str | None = None) -> None:
        """The step's own cluster configuration, or ``api_client`` in ``namespace`` where given (as the RBAC
        tests give the launch step's service account)."""
        from kubernetes import client

        from kftrain.kube_client import SERVICE_ACCOUNT_NAMESPACE, load_client

        if api_client is None:
            try:
                api_client, kubeconfig_namespace = load_client()
            except Exception as exc:  # no cluster configuration: the step cannot do what KFP's launcher does
                raise StorageError(
                    f"cannot read the kfp-launcher ConfigMap (no Kubernetes API access): {exc}"
                ) from None
            in_pod = SERVICE_ACCOUNT_NAMESPACE.is_file() and SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
            namespace = str(in_pod or kubeconfig_namespace or "default")
        self.namespace = str(namespace or "default")
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
            problem = " ".join(str(exc).split())  # PyYAML's message spans lines (the snippet, a caret): one line
            raise StorageError(f"kfp-launcher ConfigMap: providers is not valid YAML: {problem}") from None
        return decode_providers(parsed)  # every field typed here, once, as the launcher decodes them

    def launcher_image(self) -> str:
        """The image of this pod's ``kfp-launcher`` init container; "" when it has none."""
        pod = self._get("pod", self.core.read_namespaced_pod, os.environ.get("KFP_POD_NAME", ""))
        containers = ((pod or {}).get("spec") or {}).get("initContainers") or []
        images = [str(c.get("image") or "") for c in containers if c.get("name") == LAUNCHER_CONTAINER]
        return images[0] if images else ""

    def version(self) -> tuple[int, int] | None:
        return launcher_version(self.launcher_image())

    def _decoded(self, name: str, data: Any) -> dict[str, str]:
        """A secret's ``data`` (base64, as the API returns it) as text; a value that is not is named, never shown."""
        out = {}
        for key, value in (data if isinstance(data, dict) else {}).items():
            where = f"secret {self.namespace}/{name}: key {key}"
            try:
                raw = base64.b64decode(value, validate=True)
            except (TypeError, ValueError):
                raise StorageError(f"{where} is not base64 (the API returns a secret's data encoded)") from None
            try:
                out[str(key)] = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise StorageError(f"{where} is not UTF-8 text: an access key or secret key is text") from None
        return out

    def secret_keys(self, session: SessionInfo) -> dict[str, str]:
        if session.secret_name not in self._secrets:
            secret = self._get("secret", self.core.read_namespaced_secret, session.secret_name)
            if secret is None:
                raise StorageError(
                    f"the object store's secret {self.namespace}/{session.secret_name} (named by KFP's store "
                    "configuration) does not exist"
                )
            self._secrets[session.secret_name] = self._decoded(session.secret_name, secret.get("data") or {})
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
