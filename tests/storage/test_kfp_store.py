"""A step finds its object store as KFP's launcher does: the kfp-launcher ConfigMap, then the backend's default.

The rules are KFP's (kubeflow/pipelines@2.17.0:backend/src/v2/config/s3.go, minio.go, env.go;
@2.5.0 and @2.16.0:backend/src/v2/objectstore/config.go for the default endpoint); each case names the one it
checks. The last tests read a fake cluster (testbed/fake_k8s): the ConfigMap, the step's own pod and the secret,
through the real Kubernetes client, as a KFP task pod does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain import storage
from kftrain.storage import kfp_store
from kftrain.storage.kfp_store import SessionInfo, default_minio_endpoint, launcher_version, session_info

MINIO_DEFAULT = SessionInfo("E", "minio", True, False, "mlpipeline-minio-artifact", "accesskey", "secretkey")
SECRET_REF = {"secretName": "s3-creds", "accessKeyKey": "AK", "secretKeyKey": "SK"}
S3_PROVIDER = {
    "s3": {
        "default": {"endpoint": "s3.amazonaws.com", "region": "eu-west-1", "credentials": {"fromEnv": True}},
        "Overrides": [
            {"bucketName": "other", "keyPrefix": "", "credentials": {"secretRef": SECRET_REF}},
            {
                "bucketName": "team",
                "keyPrefix": "private/",
                "endpoint": "minio.team:9000",
                "disableSSL": True,
                "credentials": {"secretRef": SECRET_REF},
            },
        ],
    }
}


@pytest.mark.parametrize(
    "uri, providers, expected",
    [
        # minio.go ProvideSessionInfo: no provider for minio -> getDefaultMinioSessionInfo (env.go)
        ("minio://mlpipeline/v2/artifacts/x", None, MINIO_DEFAULT),
        # s3.go ProvideSessionInfo: no default and no overrides -> fromEnv
        ("s3://bucket/x", None, SessionInfo("", "", False, True)),
        ("s3://bucket/x", {"minio": {}}, SessionInfo("", "", False, True)),
        # the default's settings (disableSSL defaults to false)
        ("s3://bucket/x", S3_PROVIDER, SessionInfo("s3.amazonaws.com", "eu-west-1", False, True)),
        # the first override whose bucket matches and whose keyPrefix starts the key
        (
            "s3://other/a/b",
            S3_PROVIDER,
            SessionInfo("s3.amazonaws.com", "eu-west-1", False, False, "s3-creds", "AK", "SK"),
        ),
        (
            "s3://team/private/run/x",
            S3_PROVIDER,
            SessionInfo("minio.team:9000", "eu-west-1", True, False, "s3-creds", "AK", "SK"),
        ),
        ("s3://team/public/x", S3_PROVIDER, SessionInfo("s3.amazonaws.com", "eu-west-1", False, True)),
        # a minio provider is read as an S3 one (minio.go: S3ProviderConfig(p))
        (
            "minio://mlpipeline/x",
            {
                "minio": {
                    "default": {"endpoint": "store:9000", "disableSSL": True, "credentials": {"secretRef": SECRET_REF}}
                }
            },
            SessionInfo("store:9000", "", True, False, "s3-creds", "AK", "SK"),
        ),
    ],
)
def test_session_info_as_kfp_launcher_config(uri: str, providers: dict[str, Any] | None, expected: SessionInfo) -> None:
    assert session_info(uri, providers, "E") == expected


@pytest.mark.parametrize(
    "providers, match",
    [
        (
            {"s3": {"default": {"endpoint": "x"}}},
            "default.credentials: missing",
        ),  # s3.go: missing default credentials
        ({"s3": {"default": {"credentials": {}}}}, "fromEnv or a secretRef"),
        ({"s3": "yes"}, "must be a mapping"),
    ],
)
def test_malformed_providers_are_refused_naming_the_field(providers: dict[str, Any], match: str) -> None:
    with pytest.raises(storage.StorageError, match=match):
        session_info("s3://bucket/x", providers, "E")


@pytest.mark.parametrize(
    "version, env, endpoint",
    [
        ((2, 5), {}, "minio-service.kubeflow:9000"),  # @2.5.0 objectstore/config.go MinioDefaultEndpoint
        ((2, 5), {"MINIO_SERVICE_SERVICE_HOST": "10.0.0.7", "MINIO_SERVICE_SERVICE_PORT": "9000"}, "10.0.0.7:9000"),
        ((2, 15), {}, "minio-service.kubeflow:9000"),  # @2.15.0: DefaultMinioEndpointInMultiUserMode
        (
            (2, 14),
            {"MINIO_SERVICE_SERVICE_HOST": "10.0.0.7", "MINIO_SERVICE_SERVICE_PORT": "9000"},
            "10.0.0.7:9000",
        ),  # @2.14.0 config/env.go:169 still calls MinioDefaultEndpoint
        (
            (2, 15),
            {"MINIO_SERVICE_SERVICE_HOST": "10.0.0.7", "MINIO_SERVICE_SERVICE_PORT": "9000"},
            "minio-service.kubeflow:9000",
        ),  # @2.15.0 config/env.go:182: the constant, the variables unread
        (
            (2, 16),
            {"MINIO_SERVICE_SERVICE_HOST": "10.0.0.7", "MINIO_SERVICE_SERVICE_PORT": "9000"},
            "seaweedfs.kubeflow:9000",
        ),
        ((2, 17), {}, "seaweedfs.kubeflow:9000"),  # @2.16.0+: DefaultEndpointInMultiUserMode
    ],
)
def test_default_endpoint_of_each_backend_version(version: Any, env: dict[str, str], endpoint: str) -> None:
    assert default_minio_endpoint(version, env) == endpoint


@pytest.mark.parametrize(
    "image, version",
    [
        ("ghcr.io/kubeflow/kfp-launcher:2.17.0", (2, 17)),
        ("gcr.io/ml-pipeline/kfp-launcher:2.5.0", (2, 5)),
        ("registry.local:5000/mirror/kfp-launcher:2.16.1-rc.1", (2, 16)),
        ("ghcr.io/kubeflow/kfp-launcher:latest", None),
        ("ghcr.io/kubeflow/kfp-launcher@sha256:" + "0" * 64, None),
        ("kfp-launcher", None),
    ],
)
def test_backend_version_from_the_launcher_image(image: str, version: Any) -> None:
    assert launcher_version(image) == version


# -- in a KFP task pod, against a fake cluster -------------------------------------------------------


NAMESPACE = "team-a"


@pytest.fixture
def task_pod(kube: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """This process as a KFP task pod of ``NAMESPACE``: its own pod (with KFP's launcher init container) exists."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name in ("MINIO_ENDPOINT", "MINIO_SERVICE_SERVICE_HOST", "KFTRAIN_S3_CREDENTIALS_DIR", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kube.write_kubeconfig(tmp_path / "kubeconfig", NAMESPACE)))
    monkeypatch.setenv("KFP_POD_NAME", "run-x-system-container-impl-1")
    kfp_store.clear_cache()
    yield kube
    kfp_store.clear_cache()


def add_task_pod(kube: Any, launcher_image: str) -> None:
    kube.add_pod(
        {
            "metadata": {"name": "run-x-system-container-impl-1", "namespace": NAMESPACE, "uid": "u-1", "labels": {}},
            "spec": {
                "initContainers": [{"name": "kfp-launcher", "image": launcher_image}],
                "containers": [{"name": "main", "image": "python"}],
            },
            "status": {"phase": "Running", "containerStatuses": [{"name": "main", "restartCount": 0}]},
        }
    )


@pytest.mark.parametrize(
    "image, endpoint",
    [
        ("gcr.io/ml-pipeline/kfp-launcher:2.5.0", "minio-service.kubeflow:9000"),
        ("ghcr.io/kubeflow/kfp-launcher:2.16.0", "seaweedfs.kubeflow:9000"),
    ],
)
def test_no_configmap_gives_the_versions_default_store_and_its_secret(task_pod: Any, image: str, endpoint: str) -> None:
    add_task_pod(task_pod, image)
    task_pod.add_secret(NAMESPACE, "mlpipeline-minio-artifact", {"accesskey": "ak-1", "secretkey": "sk-1"})
    assert storage.s3_endpoint("minio://mlpipeline/v2/artifacts/x") == f"http://{endpoint}"
    fs, _ = storage.filesystem("minio://mlpipeline/v2/artifacts/x")
    assert (fs.key, fs.secret) == ("ak-1", "sk-1")  # type: ignore[attr-defined]
    assert fs.client_kwargs["region_name"] == "minio"  # type: ignore[attr-defined]


def test_configmap_providers_name_the_store_and_its_secret(task_pod: Any) -> None:
    add_task_pod(task_pod, "ghcr.io/kubeflow/kfp-launcher:2.17.0")
    providers = {
        "minio": {
            "default": {"endpoint": "store.team-a:9000", "disableSSL": True, "credentials": {"secretRef": SECRET_REF}}
        }
    }
    task_pod.add_configmap(
        NAMESPACE, "kfp-launcher", {"defaultPipelineRoot": "minio://b/r", "providers": yaml.safe_dump(providers)}
    )
    task_pod.add_secret(NAMESPACE, "s3-creds", {"AK": "team-key", "SK": "team-secret"})
    assert storage.s3_endpoint("minio://b/r/x") == "http://store.team-a:9000"
    fs, _ = storage.filesystem("minio://b/r/x")
    assert (fs.key, fs.secret) == ("team-key", "team-secret")  # type: ignore[attr-defined]


def test_the_environment_still_wins(task_pod: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    add_task_pod(task_pod, "ghcr.io/kubeflow/kfp-launcher:2.17.0")
    monkeypatch.setenv("MINIO_ENDPOINT", "minio.example:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    assert storage.s3_endpoint("minio://b/x") == "http://minio.example:9000"
    fs, _ = storage.filesystem("minio://b/x")
    assert fs.key == "env-key"  # type: ignore[attr-defined]


def test_a_missing_secret_is_named(task_pod: Any) -> None:
    add_task_pod(task_pod, "ghcr.io/kubeflow/kfp-launcher:2.17.0")
    with pytest.raises(storage.StorageError, match="team-a/mlpipeline-minio-artifact"):
        storage.filesystem("minio://b/x")


@pytest.mark.parametrize(
    "image",
    ["ghcr.io/kubeflow/kfp-launcher:latest", "ghcr.io/kubeflow/kfp-launcher@sha256:" + "0" * 64, "kfp-launcher"],
)
def test_a_launcher_image_without_a_release_is_refused_naming_what_to_set(task_pod: Any, image: str) -> None:
    """KFP's own fallback launcher image is ``:latest`` whatever the release, whose default store may be MinIO's: the
    step does not guess it."""
    add_task_pod(task_pod, image)
    task_pod.add_secret(NAMESPACE, "mlpipeline-minio-artifact", {"accesskey": "ak-1", "secretkey": "sk-1"})
    with pytest.raises(storage.StorageError) as refused:
        storage.s3_endpoint("minio://mlpipeline/v2/artifacts/x")
    assert f"kfp-launcher image ({image}) names no release" in str(refused.value)
    assert "providers.minio.default" in str(refused.value) and "MINIO_ENDPOINT" in str(refused.value)


def test_a_launcher_image_without_a_release_takes_the_configured_store(task_pod: Any) -> None:
    add_task_pod(task_pod, "ghcr.io/kubeflow/kfp-launcher:latest")
    providers = {"minio": {"default": {"endpoint": "store.team-a:9000", "credentials": {"secretRef": SECRET_REF}}}}
    task_pod.add_configmap(NAMESPACE, "kfp-launcher", {"providers": yaml.safe_dump(providers)})
    assert storage.s3_endpoint("minio://b/r/x") == "https://store.team-a:9000"


class _Sent(Exception):
    pass


def _request_url(fs: Any) -> str:
    """Where botocore, configured as ``fs`` configures its client, sends a read of ``mlpipeline/r/x`` (never sent)."""
    import botocore.session
    from botocore.config import Config

    client = botocore.session.get_session().create_client(
        "s3",
        aws_access_key_id="k",
        aws_secret_access_key="s",
        config=Config(**fs.config_kwargs),
        **{"region_name": "us-east-1", **fs.client_kwargs},
    )
    urls: list[str] = []

    def capture(request: Any, **_: Any) -> None:
        urls.append(request.url)
        raise _Sent

    client.meta.events.register("before-send.s3", capture)
    with pytest.raises(_Sent):
        client.head_object(Bucket="mlpipeline", Key="r/x")
    return urls[0]


@pytest.mark.parametrize(
    "force_path_style, url",
    [
        (None, "http://store.team-a:9000/mlpipeline/r/x"),
        (True, "http://store.team-a:9000/mlpipeline/r/x"),
        (False, "http://mlpipeline.store.team-a:9000/r/x"),
    ],
)
def test_force_path_style_addresses_the_bucket_as_kfps_launcher_does(
    task_pod: Any, force_path_style: bool | None, url: str
) -> None:
    """Unset is true (KFP's s3.go): a bucket in the path, which a store behind a cluster DNS name needs."""
    add_task_pod(task_pod, "ghcr.io/kubeflow/kfp-launcher:2.17.0")
    default: dict[str, Any] = {
        "endpoint": "store.team-a:9000",
        "disableSSL": True,
        "credentials": {"secretRef": SECRET_REF},
    }
    if force_path_style is not None:
        default["forcePathStyle"] = force_path_style
    task_pod.add_configmap(NAMESPACE, "kfp-launcher", {"providers": yaml.safe_dump({"minio": {"default": default}})})
    task_pod.add_secret(NAMESPACE, "s3-creds", {"AK": "team-key", "SK": "team-secret"})
    fs, _ = storage.filesystem("minio://mlpipeline/r/x")
    assert _request_url(fs) == url
