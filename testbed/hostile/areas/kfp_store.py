"""The store lookup of a KFP task pod (kftrain/storage/kfp_store.py): the ``kfp-launcher`` ConfigMap's providers
malformed (Overrides, secretRef, keyPrefix, disableSSL "false" as a string, fromEnv "false"), a secret not base64 or
not UTF-8, an endpoint with a password (never logged whole), AWS_MAX_ATTEMPTS=three.

The shapes are tests/storage/test_kfp_store_shapes.py's ``MALFORMED``, ``TYPED`` and ``SECRETS`` (its fake cluster,
``_FakeCluster``), taken by name when the case runs. A "ConfigMap" case goes the whole way a step goes: a pod of KFP's
(``KFP_POD_NAME``) whose cluster holds the ConfigMap's ``providers`` text and the secret, then
``kftrain.storage`` reading an object (on the run's local S3 server, where the case needs one).
"""

from __future__ import annotations

import base64
import logging
import os
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from testbed.hostile.case import CLEAR, FINE, Case, Sandbox

AREA = "kfp-store"
ACCESS_KEY, SECRET_KEY = "AKIA-HOSTILE-7731", "hostile-secret-key-94f2"  # what no output may show
PASSWORD = "hun@ter2-pw"


def _tests() -> Any:
    from tests.storage import test_kfp_store_shapes

    return test_kfp_store_shapes


def _malformed(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        from kftrain.storage.kfp_store import session_info

        providers, _ = _tests().MALFORMED[key]
        sb.ready()
        session_info("s3://b/key", providers, "E")

    return run


def _typed(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        from kftrain.storage.kfp_store import session_info

        providers, expected = _tests().TYPED[key]
        sb.ready()
        got = session_info("s3://b/key", providers, "E")
        if got != expected:
            raise AssertionError(f"read as {got}, not {expected}")

    return run


def _secret(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        from kftrain.storage.kfp_store import SessionInfo

        data, _ = _tests().SECRETS[key]
        sb.ready()
        _tests()._FakeCluster(data).secret_keys(SessionInfo("e", "", False, False, "s3-creds", "AK", "SK"))

    return run


def _b64(raw: bytes | str) -> str:
    return base64.b64encode(raw.encode() if isinstance(raw, str) else raw).decode()


class _Cluster:
    """The cluster of a KFP task pod as the lookup reads it: the ConfigMap's ``providers`` text and one secret."""

    def __new__(cls, providers: str, secret: dict[str, Any] | None) -> Any:
        from kftrain.storage import kfp_store

        class Cluster(kfp_store._Cluster):
            def __init__(self) -> None:
                self.namespace = "team-a"
                self._secrets = {}
                self.core = SimpleNamespace(read_namespaced_secret=None, read_namespaced_pod=None)
                self.__dict__["_config"] = {"providers": providers}

            def _get(self, what: str, read: Any, name: str) -> Any:
                return {"data": secret} if what == "secret" and secret is not None else None

            def version(self) -> tuple[int, int] | None:
                return (2, 17)

        return Cluster()


def _configmap(
    providers: str, secret: dict[str, Any] | None = None, *, read: bool = False
) -> Callable[[Sandbox], None]:
    """The whole lookup of ``s3://<bucket>/data.csv`` in a KFP pod whose ConfigMap holds ``providers``; ``read``: then
    read the object (the run's local S3 server is ``{endpoint}`` in ``providers``), as a step would."""

    def run(sb: Sandbox) -> None:
        from kftrain import storage
        from kftrain.storage import kfp_store

        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
        bucket = "hostile-store"
        endpoint = sb.s3_endpoint if read else "http://store:9000"
        if read:
            from testbed.s3_server import boto3_client

            client = boto3_client(endpoint)
            client.create_bucket(Bucket=bucket)
            client.put_object(Bucket=bucket, Key="data.csv", Body=b"a,b\n1,2\n")
        cluster = _Cluster(providers.replace("{endpoint}", endpoint.removeprefix("http://")), secret)
        kfp_store._cluster = lambda: cluster  # type: ignore[assignment]  # the pod's cluster, read by the lookup
        os.environ["KFP_POD_NAME"] = "step-pod"
        sb.ready()
        store = kfp_store.kfp_store(f"s3://{bucket}/data.csv")
        if store is None:
            raise AssertionError("no store for s3:// in a KFP task pod")
        store.credentials()
        if read and storage.read_bytes(f"s3://{bucket}/data.csv") != b"a,b\n1,2\n":
            raise AssertionError("read another object")

    return run


def _logged_endpoint(endpoint: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        from kftrain.storage import kfp_store

        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
        sb.ready()
        kfp_store._log_once("s3://b", endpoint, "kfp-launcher ConfigMap", "")

    return run


def _botocore(sb: Sandbox) -> None:
    from kftrain.storage import uri

    sb.ready()
    uri._botocore_config()


def _aws_read(attempts: str) -> Callable[[Sandbox], None]:
    """An object read with ``AWS_MAX_ATTEMPTS=attempts``, on the run's local S3 server (set once the bucket is made:
    the variable is botocore's, for every client of the process)."""

    def run(sb: Sandbox) -> None:
        from kftrain import storage
        from testbed.s3_server import boto3_client

        client = boto3_client(sb.s3_endpoint)
        client.create_bucket(Bucket="hostile-aws")
        client.put_object(Bucket="hostile-aws", Key="k", Body=b"x")
        os.environ.update(
            AWS_ENDPOINT_URL=sb.s3_endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_MAX_ATTEMPTS=attempts,
        )
        sb.ready()
        storage.read_bytes("s3://hostile-aws/k")

    return run


# Those the ConfigMap cases below do not give whole (Overrides not a list, keyPrefix, disableSSL, fromEnv).
MALFORMED = {
    "an override not a mapping": "providers.s3.Overrides[0]",
    "secretRef not a mapping": "providers.s3.default.credentials.secretRef",
    "an override without credentials": "providers.s3.Overrides[0].credentials",
    "an override's secretRef missing": "providers.s3.Overrides[0].credentials.secretRef",
    "a malformed gs provider (the launcher decodes it too)": "providers.gs.default.credentials.fromEnv",
}
SECRETS = {"not a string": "key AK"}  # not base64, not UTF-8: the ConfigMap cases below
SECRET_REF = "credentials: {secretRef: {secretName: s3-creds, accessKeyKey: AK, secretKeyKey: SK}}"
GOOD_SECRET = {"AK": _b64(ACCESS_KEY), "SK": _b64(SECRET_KEY)}
# (name, providers text, the secret's data, what the one line must name): the whole lookup from the ConfigMap.
CONFIGMAPS: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("providers not YAML", "s3: {default: [", None, "providers is not valid YAML"),
    (
        "disableSSL 'false' in the ConfigMap",
        "s3: {default: {endpoint: e, disableSSL: 'false', credentials: {fromEnv: true}}}",
        None,
        "providers.s3.default.disableSSL",
    ),
    (
        "fromEnv 'false' in the ConfigMap",
        "s3: {default: {credentials: {fromEnv: 'false'}}}",
        None,
        "providers.s3.default.credentials.fromEnv",
    ),
    ("a secret that does not exist", f"s3: {{default: {{{SECRET_REF}}}}}", None, "s3-creds"),
    ("a secret without the key named", f"s3: {{default: {{{SECRET_REF}}}}}", {"AK": _b64(ACCESS_KEY)}, "SK"),
    (
        "a secret not base64",
        f"s3: {{default: {{{SECRET_REF}}}}}",
        {"AK": "!!" + ACCESS_KEY, "SK": _b64(SECRET_KEY)},
        "key AK",
    ),
    (
        "a secret not UTF-8",
        f"s3: {{default: {{{SECRET_REF}}}}}",
        {"AK": _b64(b"\xff" + ACCESS_KEY.encode()), "SK": _b64(SECRET_KEY)},
        "key AK",
    ),
    (
        "Overrides a mapping in the ConfigMap",
        "s3: {default: {credentials: {fromEnv: true}}, Overrides: {bucketName: b}}",
        None,
        "providers.s3.Overrides",
    ),
    (
        "keyPrefix a list in the ConfigMap",
        "s3: {default: {credentials: {fromEnv: true}}, Overrides: [{bucketName: hostile-store, keyPrefix: [a],"
        " credentials: {fromEnv: true}}]}",
        None,
        "keyPrefix",
    ),
]
ENDPOINTS = [f"https://user:{PASSWORD}@store:9000"]
AWS = [("AWS_MAX_ATTEMPTS", "three"), ("AWS_MAX_ATTEMPTS", "\u00b3"), ("AWS_RETRY_MODE", "fast")]
SURFACE_CM = "kfp_store.kfp_store(URI) in a KFP pod (ConfigMap providers)"

CASES: list[Case] = [
    *(
        Case(AREA, key, CLEAR, "session_info(uri, providers)", _malformed(key), names=(field,))
        for key, field in MALFORMED.items()
    ),
    *(
        Case(AREA, f"{key} (read as the launcher reads it)", FINE, "session_info(uri, providers)", _typed(key))
        for key in ("overrides in lower case", "an override fromEnv")
    ),
    *(
        Case(
            AREA,
            f"a secret {key} (its data decoded)",
            CLEAR,
            "_Cluster.secret_keys",
            _secret(key),
            names=(field,),
            secrets=("not-base64",),
        )
        for key, field in SECRETS.items()
    ),
    *(
        Case(AREA, name, CLEAR, SURFACE_CM, _configmap(text, secret), names=(field,), secrets=(ACCESS_KEY, SECRET_KEY))
        for name, text, secret, field in CONFIGMAPS
    ),
    Case(
        AREA,
        "a ConfigMap whose secret is read (control)",
        FINE,
        SURFACE_CM,
        _configmap(f"s3: {{default: {{{SECRET_REF}}}}}", GOOD_SECRET),
        secrets=(ACCESS_KEY, SECRET_KEY),
    ),
    Case(
        AREA,
        "an endpoint with a password in the ConfigMap, looked up",
        FINE,
        SURFACE_CM,
        _configmap(f"s3: {{default: {{endpoint: 'user:{PASSWORD}@store:9000', credentials: {{fromEnv: true}}}}}}"),
        secrets=(PASSWORD, "ter2-pw"),
    ),
    Case(
        AREA,
        "a ConfigMap's store and secret, an object read",
        FINE,
        SURFACE_CM + " + kftrain.storage.read_bytes",
        _configmap(
            f"s3: {{default: {{endpoint: '{{endpoint}}', disableSSL: true, region: us-east-1, {SECRET_REF}}}}}",
            {"AK": _b64("testing"), "SK": _b64("testing")},
            read=True,
        ),
        needs=("s3",),
    ),
    *(
        Case(
            AREA,
            f"an endpoint with a password logged: {endpoint.split('@')[0].split(':')[-1]}@",
            FINE,
            "kfp_store._log_once (the lookup's log line)",
            _logged_endpoint(endpoint),
            secrets=("hunter2", "ter2-pw"),
        )
        for endpoint in ENDPOINTS
    ),
    *(
        Case(
            AREA,
            f"{name}={value}",
            CLEAR,
            "kftrain.storage (botocore's config)",
            _botocore,
            names=(name,),
            env={name: value},
        )
        for name, value in AWS
    ),
    Case(
        AREA,
        "AWS_MAX_ATTEMPTS=three on a read",
        CLEAR,
        "kftrain.storage.read_bytes(s3://...)",
        _aws_read("three"),
        names=("AWS_MAX_ATTEMPTS",),
        needs=("s3",),
    ),
    Case(
        AREA,
        "AWS_MAX_ATTEMPTS=2 on a read (control)",
        FINE,
        "kftrain.storage.read_bytes(s3://...)",
        _aws_read("2"),
        needs=("s3",),
    ),
]
