"""The kfp-launcher ConfigMap's ``providers`` typed as KFP's launcher types them, and nothing secret in a log.

KFP's launcher decodes ``providers`` with sigs.k8s.io/yaml into Go structs (kubeflow/pipelines@2.17.0:
backend/src/v2/config/env.go getBucketProviders; the structs in config/s3.go): a ``*bool`` takes only a YAML
boolean, a ``string`` a scalar, a list a list, keys match case-insensitively. Whatever it refuses, the step refuses
with one line naming the field; a secret it cannot decode, or an AWS variable botocore cannot read, likewise.
"""

from __future__ import annotations

import base64
import http.server
import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from kftrain import storage
from kftrain.storage import kfp_store, uri
from kftrain.storage.kfp_store import SessionInfo, session_info
from testbed.s3_server import set_s3_env, short_client_backoff

REF = {"secretName": "s3-creds", "accessKeyKey": "AK", "secretKeyKey": "SK"}


def _s3(default: Any = None, overrides: Any = None) -> dict[str, Any]:
    provider: dict[str, Any] = {}
    if default is not None:
        provider["default"] = default
    if overrides is not None:
        provider["Overrides"] = overrides
    return {"s3": provider}


DEFAULT = {"endpoint": "store:9000", "credentials": {"fromEnv": True}}

MALFORMED = {
    "Overrides not a list": (_s3(DEFAULT, {"bucketName": "b"}), r"providers\.s3\.Overrides: .*a list"),
    "an override not a mapping": (_s3(DEFAULT, ["b"]), r"providers\.s3\.Overrides\[0\]: .*a mapping"),
    "secretRef not a mapping": (
        _s3({"credentials": {"secretRef": "s3-creds"}}),
        r"providers\.s3\.default\.credentials\.secretRef: .*a mapping",
    ),
    "keyPrefix not a scalar": (
        _s3(DEFAULT, [{"bucketName": "b", "keyPrefix": ["x"], "credentials": {"fromEnv": True}}]),
        r"providers\.s3\.Overrides\[0\]\.keyPrefix: .*a string",
    ),
    "disableSSL a string": (
        _s3({**DEFAULT, "disableSSL": "false"}),
        r"providers\.s3\.default\.disableSSL: .*true or false.*'false'",
    ),
    "fromEnv a string": (
        _s3({"credentials": {"fromEnv": "false", "secretRef": REF}}),
        r"providers\.s3\.default\.credentials\.fromEnv: .*true or false",
    ),
    "maxRetries not a whole number": (
        _s3({**DEFAULT, "maxRetries": "5"}),
        r"providers\.s3\.default\.maxRetries: .*whole number",
    ),
    "credentials not a mapping": (_s3({"credentials": True}), r"providers\.s3\.default\.credentials: .*a mapping"),
    "an override without credentials": (
        _s3(DEFAULT, [{"bucketName": "b"}]),
        r"providers\.s3\.Overrides\[0\]\.credentials: missing",
    ),
    "an override's secretRef missing": (
        _s3(DEFAULT, [{"bucketName": "b", "credentials": {"fromEnv": False}}]),
        r"providers\.s3\.Overrides\[0\]\.credentials\.secretRef: missing",
    ),
    "a malformed gs provider (the launcher decodes it too)": (
        {"s3": {"default": DEFAULT}, "gs": {"default": {"credentials": {"fromEnv": "yes please"}}}},
        r"providers\.gs\.default\.credentials\.fromEnv: .*true or false",
    ),
    "a key given twice in two cases": (
        {"s3": {"default": DEFAULT, "Overrides": [], "overrides": []}},
        r"providers\.s3: 'Overrides' and 'overrides'",
    ),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_field_is_one_error_naming_it(case: str) -> None:
    providers, match = MALFORMED[case]
    with pytest.raises(storage.StorageError, match=match) as caught:
        session_info("s3://b/key", providers, "E")
    assert "\n" not in str(caught.value)


TYPED = {
    # sigs.k8s.io/yaml@v1.6.0 yaml.go convertToJSONableObject: a YAML number or boolean becomes a string field's text
    "a port-like endpoint number": (
        _s3({"endpoint": 9000, "credentials": {"fromEnv": True}}),
        SessionInfo("9000", "", False, True),
    ),
    # encoding/json matches keys case-insensitively
    "overrides in lower case": (
        {"s3": {"default": DEFAULT, "overrides": [{"bucketName": "b", "credentials": {"secretRef": REF}}]}},
        SessionInfo("store:9000", "", False, False, "s3-creds", "AK", "SK"),
    ),
    "null fields are unset": (
        _s3({**DEFAULT, "disableSSL": None, "region": None}),
        SessionInfo("store:9000", "", False, True),
    ),
    # s3.go: an override with fromEnv drops the default's secret
    "an override fromEnv": (
        _s3({"credentials": {"secretRef": REF}}, [{"bucketName": "b", "credentials": {"fromEnv": True}}]),
        SessionInfo("", "", False, True),
    ),
}


@pytest.mark.parametrize("case", TYPED)
def test_well_typed_fields_read_as_the_launcher_reads_them(case: str) -> None:
    providers, expected = TYPED[case]
    assert session_info("s3://b/key", providers, "E") == expected


# -- secrets, endpoints and AWS variables ------------------------------------------------------------


class _FakeCluster(kfp_store._Cluster):
    """A cluster whose one secret holds ``data`` (already base64, as the API returns it)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.namespace = "team-a"
        self._secrets = {}
        self._data = data
        self.core = SimpleNamespace(read_namespaced_secret=None)

    def _get(self, what: str, read: Any, name: str) -> Any:
        return {"data": self._data}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


SECRETS = {
    "not base64": ({"AK": "!!!not-base64", "SK": _b64(b"sk")}, r"team-a/s3-creds: key AK is not base64"),
    "not UTF-8": ({"AK": _b64(b"\xff\xfe"), "SK": _b64(b"sk")}, r"team-a/s3-creds: key AK is not UTF-8 text"),
    "not a string": ({"AK": 7, "SK": _b64(b"sk")}, r"team-a/s3-creds: key AK is not base64"),
}


@pytest.mark.parametrize("case", SECRETS)
def test_a_secret_that_cannot_be_decoded_is_named_never_shown(case: str) -> None:
    data, match = SECRETS[case]
    cluster = _FakeCluster(data)
    with pytest.raises(storage.StorageError, match=match) as caught:
        cluster.secret_keys(SessionInfo("e", "", False, False, "s3-creds", "AK", "SK"))
    assert "not-base64" not in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "endpoint",
    ["https://user:hunter2@store:9000", "https://user:hun@ter2@store:9000", "https://hunter2@store:9000"],
)
def test_an_endpoint_with_a_password_is_logged_without_it(endpoint: str, caplog: pytest.LogCaptureFixture) -> None:
    kfp_store.clear_cache()
    with caplog.at_level(logging.INFO, logger=kfp_store.__name__):
        kfp_store._log_once("s3://b", endpoint, "kfp-launcher ConfigMap", "")
    kfp_store.clear_cache()
    assert "ter2" not in caplog.text and "https://***@store:9000" in caplog.text


def test_a_configured_endpoint_with_a_password_is_logged_without_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole lookup, from the ConfigMap's providers to the log line (KFP writes the endpoint as host:port)."""

    class Cluster:
        def providers(self) -> Any:
            return {"s3": {"default": {"endpoint": "user:hun@ter2@store:9000", "credentials": {"fromEnv": True}}}}

    monkeypatch.setenv("KFP_POD_NAME", "step-pod")
    monkeypatch.setattr(kfp_store, "_cluster", Cluster)
    kfp_store._log_once.cache_clear()
    with caplog.at_level(logging.INFO, logger=kfp_store.__name__):
        store = kfp_store.kfp_store("s3://b/key")
    kfp_store._log_once.cache_clear()
    assert store is not None and store.session.endpoint == "user:hun@ter2@store:9000"
    assert "ter2" not in caplog.text and "https://***@store:9000" in caplog.text


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("AWS_MAX_ATTEMPTS", "three", r"AWS_MAX_ATTEMPTS: 'three' is not a whole number of at least 1"),
        ("AWS_MAX_ATTEMPTS", "0", r"AWS_MAX_ATTEMPTS: '0' is not a whole number of at least 1"),
        ("AWS_MAX_ATTEMPTS", "\u00b3", r"AWS_MAX_ATTEMPTS: '\u00b3' is not a whole number of at least 1"),  # isdigit()
        ("AWS_RETRY_MODE", "fast", r"AWS_RETRY_MODE: 'fast' is not one of legacy, standard, adaptive"),
    ],
)
def test_aws_retry_variables_botocore_cannot_read_are_named(
    name: str, value: str, match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(storage.StorageError, match=match):
        uri._botocore_config()


class _Failing(http.server.BaseHTTPRequestHandler):
    """Answers every request 500 InternalError (retried by botocore's standard mode), counting them."""

    seen = 0

    def _fail(self) -> None:
        type(self).seen += 1
        body = b"<Error><Code>InternalError</Code><Message>down</Message></Error>"
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = _fail

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("attempts", [1, 2, 3])
def test_aws_max_attempts_counts_every_attempt(attempts: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS_MAX_ATTEMPTS=N is N requests in all, the first included (boto/botocore@1.43.117:botocore/args.py
    _compute_retry_max_attempts: the variable is ``total_max_attempts``; a Config's ``max_attempts`` would be N + 1)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        set_s3_env(monkeypatch, f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", str(attempts))
        short_client_backoff(monkeypatch)
        _Failing.seen = 0
        fs, path = uri.filesystem("s3://bucket/key")  # the filesystem alone: no retry layer of kftrain's above it
        with pytest.raises(Exception):  # noqa: B017 (whatever botocore raises once it gives up)
            fs.cat_file(path)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert _Failing.seen == attempts
