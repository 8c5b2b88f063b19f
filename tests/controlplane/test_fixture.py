"""The parts of the operators' fixture (testbed/controlplane/kubeflow_operators.py, pki.py) that need no binary:
the kustomize patches it applies to the releases' webhook configurations, the order operators start in, and the
certificates cert-controller must accept as they are."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from cryptography import x509

from testbed.controlplane.kubeflow_operators import OPERATORS, in_start_order, json_patch
from testbed.controlplane.pki import WEBHOOK_CERT_DAYS, webhook_pki

DOC = {"metadata": {"name": "validating-webhook-configuration"}, "webhooks": [{"name": "a"}, {"name": "b"}]}

PATCHES: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
    # training-operator's and Trainer's patches rename the configuration
    (
        "replace-member",
        [{"op": "replace", "path": "/metadata/name", "value": "validator.trainer.kubeflow.org"}],
        {**DOC, "metadata": {"name": "validator.trainer.kubeflow.org"}},
    ),
    # JobSet's patches replace a whole webhook (the pod ones, with an objectSelector)
    (
        "replace-item",
        [{"op": "replace", "path": "/webhooks/1", "value": {"name": "vpod"}}],
        {**DOC, "webhooks": [{"name": "a"}, {"name": "vpod"}]},
    ),
    # Trainer's validating patch adds an objectSelector to a webhook
    (
        "add-member",
        [{"op": "add", "path": "/webhooks/0/objectSelector", "value": {"matchLabels": {"x": "y"}}}],
        {**DOC, "webhooks": [{"name": "a", "objectSelector": {"matchLabels": {"x": "y"}}}, {"name": "b"}]},
    ),
    (
        "add-to-end",
        [{"op": "add", "path": "/webhooks/-", "value": {"name": "c"}}],
        {**DOC, "webhooks": [*DOC["webhooks"], {"name": "c"}]},
    ),
    # RFC 6902: ~1 is "/", ~0 is "~"
    (
        "escaped-key",
        [{"op": "add", "path": "/metadata/a~1b~0c", "value": 1}],
        {**DOC, "metadata": {"name": "validating-webhook-configuration", "a/b~c": 1}},
    ),
]


@pytest.mark.parametrize(("operations", "expected"), [p[1:] for p in PATCHES], ids=[p[0] for p in PATCHES])
def test_json_patch(operations: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    assert json_patch(DOC, operations) == expected
    assert DOC["webhooks"] == [{"name": "a"}, {"name": "b"}]  # the release's document is left as it was


@pytest.mark.parametrize(
    ("operations", "error"),
    [
        ([{"op": "remove", "path": "/metadata/name"}], "unsupported patch operation 'remove'"),
        ([{"op": "replace", "path": "/metadata/labels", "value": {}}], "no such member"),
    ],
    ids=["unsupported-op", "replace-missing"],
)
def test_json_patch_refuses(operations: list[dict[str, Any]], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        json_patch(DOC, operations)


@pytest.mark.parametrize(
    ("names", "order"),
    [
        (["trainer", "jobset"], ["jobset", "trainer"]),  # Trainer creates JobSets: JobSet's webhooks first
        (["mpi-operator", "training-operator"], ["mpi-operator", "training-operator"]),
    ],
)
def test_start_order(names: list[str], order: list[str]) -> None:
    assert in_start_order(names) == order


@pytest.mark.parametrize(
    ("names", "error"),
    [(["trainer"], "operator trainer needs jobset"), (["katib"], "unknown operator 'katib'")],
    ids=["missing-need", "unknown"],
)
def test_start_order_refuses(names: list[str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        in_start_order(names)


def test_webhook_certificates_are_kept_by_cert_controller() -> None:
    """What open-policy-agent/cert-controller@v0.16.0:pkg/rotator/rotator.go checks before it keeps a Secret's
    certificates: the CA valid for its CAName, the serving certificate for <service>.<namespace>.svc, both past the
    90-day lookahead, and the CA key in PKCS #1 (buildArtifactsFromSecret); and what the API server checks calling
    https://127.0.0.1:PORT: the serving certificate's IP address."""
    operators = [op for op in OPERATORS.values() if op.serves_webhooks]
    pki = webhook_pki([op.ca_name for op in operators], [op.dns_name for op in operators])
    ca = x509.load_pem_x509_certificate(pki.ca_crt)
    serving = x509.load_pem_x509_certificate(pki.tls_crt)
    lookahead = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=90)
    assert WEBHOOK_CERT_DAYS > 90
    assert ca.not_valid_after_utc > lookahead and serving.not_valid_after_utc > lookahead
    ca_names = ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(ca_names.get_values_for_type(x509.DNSName)) == {op.ca_name for op in operators}
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {op.dns_name for op in operators} <= set(names.get_values_for_type(x509.DNSName))
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert serving.issuer == ca.subject
    assert pki.ca_key.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
