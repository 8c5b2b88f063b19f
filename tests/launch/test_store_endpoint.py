"""The object store's endpoint the launch step passes to every replica: the step's own, as a literal env var of the
job, so it must never carry credentials (they would be written into the job's manifest, readable by anyone who may
read the job); credentials reach replicas only by secretKeyRef."""

from __future__ import annotations

import pytest

from kftrain.errors import JobSpecError
from kftrain.launch.step import store_endpoint_env

SECRET = "s3cr3t@pa55"


@pytest.mark.parametrize(
    ("variable", "value", "host"),
    [
        ("AWS_ENDPOINT_URL", f"http://minio:{SECRET}@minio.kubeflow:9000", "minio.kubeflow:9000"),
        ("MINIO_ENDPOINT", f"minio:{SECRET}@minio-service.kubeflow:9000", "minio-service.kubeflow:9000"),
        ("AWS_ENDPOINT_URL", f"https://user@store.example.com/{SECRET}", "store.example.com"),
    ],
    ids=["url", "providers-form", "user-only"],
)
def test_an_endpoint_with_credentials_is_refused_without_printing_them(monkeypatch, variable, value, host) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(JobSpecError) as caught:
        store_endpoint_env("s3://bucket/model")
    message = str(caught.value)
    assert message.startswith(f"{variable}: the object store's endpoint (host {host}) carries credentials")
    assert SECRET.split("@")[0] not in message and "minio:" not in message


@pytest.mark.parametrize(
    "value", ["http://minio.kubeflow:9000", "minio-service.kubeflow:9000", "https://store.example.com/path@v1"]
)
def test_an_endpoint_without_credentials_is_passed_on(monkeypatch, value) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", value)
    assert store_endpoint_env("s3://bucket/model")["AWS_ENDPOINT_URL"] == value
