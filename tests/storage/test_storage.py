"""kftrain.storage on local paths, and the parts that need no server: endpoints, credentials, retries."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from kftrain import storage
from kftrain.storage import artifact as storage_artifact
from kftrain.storage import errors as storage_errors

S3_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "MINIO_ENDPOINT",
    "MINIO_SERVICE_SERVICE_HOST",
    "MINIO_SERVICE_SERVICE_PORT",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "KFTRAIN_S3_CREDENTIALS_DIR",
    "KUBERNETES_SERVICE_HOST",
    "KFP_POD_NAME",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in S3_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _tree(root: Path) -> dict[str, bytes]:
    files = {
        "a.txt": b"alpha\n",
        "sub/b.bin": os.urandom(3 * 1024 + 7),
        "sub/deeper/c.bin": os.urandom(storage.CHUNK + 11),  # more than one chunk
        "empty": b"",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def test_artifact_round_trip_local(tmp_path: Path) -> None:
    out = str(tmp_path / "artifact")
    with storage.ArtifactWriter(out, metadata={"kind": "test"}) as writer:
        writer.write_bytes("data/x.bin", b"\x00\x01" * 1000)
        writer.write_json("info.json", {"a": 1})
        with writer.open("stream.bin") as handle:
            for _ in range(3):
                handle.write(b"abc")
        Path(writer.path_for("external.txt")).write_text("by another library")
        writer.record("external.txt")
    manifest = storage.require_complete(out, verify=True)
    assert manifest["metadata"] == {"kind": "test"}
    assert manifest["files"]["stream.bin"] == {"size": 9, "sha256": hashlib.sha256(b"abcabcabc").hexdigest()}
    assert storage.read_json(storage.join(out, "info.json")) == {"a": 1}
    assert storage.read_bytes(storage.join(out, "data/x.bin")) == b"\x00\x01" * 1000
    assert storage.list_files(out) == sorted(
        ["data/x.bin", "info.json", "stream.bin", "external.txt", "_COMPLETE.json"]
    )
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_file_uri_and_local_path(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/f.bin"
    with storage.open_uri(uri, "wb") as handle:
        handle.write(b"hello")
    assert storage.read_bytes(uri) == b"hello"
    assert storage.local_path(uri) == tmp_path / "f.bin"
    with pytest.raises(storage.StorageError, match="not a local path"):
        storage.local_path("s3://bucket/key")


def test_writer_failure_leaves_nothing_complete(tmp_path: Path) -> None:
    out = str(tmp_path / "artifact")
    with pytest.raises(RuntimeError), storage.ArtifactWriter(out) as writer:
        writer.write_bytes("x.bin", b"x")
        raise RuntimeError("boom")
    assert not os.path.exists(out)
    assert not list(tmp_path.iterdir())
    with pytest.raises(storage.StorageError, match="not found"):
        storage.require_complete(out)


def test_incomplete_and_tampered_artifacts_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "artifact"
    out.mkdir()
    (out / "x.bin").write_bytes(b"x")
    with pytest.raises(storage.StorageError, match="incomplete artifact"):
        storage.require_complete(str(out))
    with pytest.raises(storage.StorageError, match="not a kftrain artifact"):
        storage.ArtifactWriter(str(out))  # an output never replaces files it did not write
    (out / "x.bin").unlink()
    with storage.ArtifactWriter(str(out)) as writer:
        writer.write_bytes("x.bin", b"original")
    (out / "x.bin").write_bytes(b"tampered")
    storage.require_complete(str(out))  # without verify only the marker is checked
    with pytest.raises(storage.StorageError, match=r"x\.bin: checksum mismatch"):
        storage.require_complete(str(out), verify=True)


def test_copy_file_and_folder_local(tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = _tree(src)
    copied = storage.upload(src, str(tmp_path / "dst"))
    assert set(copied) == set(files)
    for rel, data in files.items():
        assert (tmp_path / "dst" / rel).read_bytes() == data
        assert copied[rel] == storage.FileDigest(len(data), hashlib.sha256(data).hexdigest())
    single = storage.copy(str(src / "sub/deeper/c.bin"), str(tmp_path / "one" / "c.bin"))
    assert single[""].sha256 == hashlib.sha256(files["sub/deeper/c.bin"]).hexdigest()
    assert not [p for p in (tmp_path / "one").iterdir() if ".partial-" in p.name]
    with pytest.raises(storage.StorageError, match="missing"):
        storage.copy(str(tmp_path / "missing"), str(tmp_path / "x"))


def test_copy_artifact_checks_marker_and_writes_it_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = str(tmp_path / "art")
    with storage.ArtifactWriter(src) as writer:
        writer.write_bytes("a.bin", b"a" * 100)
        writer.write_bytes("z.bin", b"z" * 100)
    order: list[str] = []
    real = storage_artifact.copy_file
    monkeypatch.setattr(
        storage_artifact, "copy_file", lambda s, d, p: order.append(os.path.basename(d)) or real(s, d, p)
    )
    storage.copy(src, str(tmp_path / "copy"))
    assert order[-1] == storage.COMPLETE_MARKER
    storage.require_complete(str(tmp_path / "copy"), verify=True)

    Path(src, "a.bin").write_bytes(b"corrupted")
    with pytest.raises(storage.StorageError, match="checksum mismatch"):
        storage.copy(src, str(tmp_path / "copy2"))
    assert not os.path.exists(tmp_path / "copy2" / storage.COMPLETE_MARKER)


def test_writer_add_folder(tmp_path: Path) -> None:
    src = tmp_path / "model"
    files = _tree(src)
    out = str(tmp_path / "artifact")
    with storage.ArtifactWriter(out) as writer:
        writer.add(src, "model")
        writer.add(src / "a.txt", "top.txt")
    manifest = storage.require_complete(out, verify=True)
    assert set(manifest["files"]) == {f"model/{rel}" for rel in files} | {"top.txt"}


# --------------------------------------------------------------------------------------------------
# Endpoints and credentials


def test_minio_endpoint_mapping(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(storage.StorageError, match="no MinIO endpoint"):
        storage.s3_endpoint("minio://bucket/key")
    assert storage.s3_endpoint("s3://bucket/key") is None  # AWS itself

    clean_env.setenv("MINIO_SERVICE_SERVICE_HOST", "10.0.0.7")
    assert storage.s3_endpoint("minio://b/k") == "http://10.0.0.7:9000"
    clean_env.setenv("MINIO_SERVICE_SERVICE_PORT", "9100")
    assert storage.s3_endpoint("minio://b/k") == "http://10.0.0.7:9100"
    assert storage.s3_endpoint("s3://b/k") is None  # the in-cluster MinIO is not where s3:// goes

    clean_env.setenv("AWS_ENDPOINT_URL", "https://s3.example.com")
    assert storage.s3_endpoint("minio://b/k") == "https://s3.example.com"
    assert storage.s3_endpoint("s3://b/k") == "https://s3.example.com"
    clean_env.setenv("MINIO_ENDPOINT", "minio-service.kubeflow:9000")
    assert storage.s3_endpoint("minio://b/k") == "http://minio-service.kubeflow:9000"

    fs, path = storage.filesystem("minio://mlpipeline/v2/artifacts/x")
    assert path == "mlpipeline/v2/artifacts/x"
    assert fs.client_kwargs["endpoint_url"] == "http://minio-service.kubeflow:9000"  # type: ignore[attr-defined]


def test_minio_endpoint_is_never_guessed_outside_a_kfp_task_pod(clean_env: pytest.MonkeyPatch) -> None:
    """A pod that is not a KFP task's (a notebook's) has no store configuration to read: the endpoint must be set.
    (The old guess, minio-service.kubeflow:9000, names a service KFP 2.16 no longer installs.)"""
    clean_env.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    with pytest.raises(storage.StorageError, match="MINIO_ENDPOINT"):
        storage.s3_endpoint("minio://mlpipeline/v2/artifacts/x")
    clean_env.setenv("MINIO_ENDPOINT", "http://minio.example:9000")  # an explicit endpoint
    assert storage.s3_endpoint("minio://mlpipeline/v2/artifacts/x") == "http://minio.example:9000"


def test_credentials_from_env_then_secret_dir(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("MINIO_ENDPOINT", "localhost:9000")
    (tmp_path / "accesskey").write_text("minio\n")
    (tmp_path / "secretkey").write_text("minio123\n")
    clean_env.setenv("KFTRAIN_S3_CREDENTIALS_DIR", str(tmp_path))
    fs, _ = storage.filesystem("minio://b/k")
    assert (fs.key, fs.secret) == ("minio", "minio123")  # type: ignore[attr-defined]

    clean_env.setenv("AWS_ACCESS_KEY_ID", "envkey")
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
    clean_env.setenv("AWS_SESSION_TOKEN", "envtoken")
    fs, _ = storage.filesystem("minio://b/k")
    assert (fs.key, fs.secret, fs.token) == ("envkey", "envsecret", "envtoken")  # type: ignore[attr-defined]

    clean_env.delenv("AWS_ACCESS_KEY_ID")
    (tmp_path / "secretkey").unlink()
    with pytest.raises(storage.StorageError, match="accesskey and secretkey"):
        storage.filesystem("minio://b/k")


def test_gs_without_gcsfs_names_the_package() -> None:
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        with pytest.raises(storage.StorageError, match="gcsfs"):
            storage.filesystem("gs://bucket/key")
    else:
        _, path = storage.filesystem("gs://bucket/key")
        assert path == "bucket/key"


# --------------------------------------------------------------------------------------------------
# Retries


class _ClientError(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.response = {"Error": {"Code": code}}


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (_ClientError("SlowDown"), True),
        (_ClientError("InternalError"), True),
        (_ClientError("503"), True),
        (ConnectionResetError(), True),
        # A request that ran out of its timeout was already tried AWS_MAX_ATTEMPTS times by botocore, each waiting
        # the whole timeout: not again (tests/storage/test_network_bounds.py).
        (TimeoutError(), False),
        (_ClientError("NoSuchBucket"), False),
        (_ClientError("AccessDenied"), False),
        (FileNotFoundError(), False),
        (PermissionError(), False),
        (ValueError("bug"), False),
    ],
)
def test_transient_classification(exc: Exception, transient: bool) -> None:
    assert storage.is_transient(exc) is transient


def test_retry_is_bounded_with_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    # The numbers storage has always used: 6 tries, 0.25 s doubling up to 5 s, jittered.
    policy = storage_errors.RETRY_POLICY
    assert (policy.attempts, policy.initial_s, policy.max_s, policy.jitter) == (6, 0.25, 5.0, True)
    sleeps: list[float] = []
    monkeypatch.setattr(storage_errors, "sleep", sleeps.append)
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("reset by peer")
        return "ok"

    assert storage_errors.with_retry("op", flaky) == "ok"
    assert len(sleeps) == 2 and sleeps[0] < sleeps[1] * 2

    def always() -> None:
        calls.append(1)
        raise _ClientError("SlowDown")

    calls.clear()
    sleeps.clear()
    with pytest.raises(_ClientError):
        storage_errors.with_retry("op", always)
    assert len(calls) == storage_errors.RETRY_POLICY.attempts
    assert max(sleeps) <= storage_errors.RETRY_POLICY.max_s

    calls.clear()
    with pytest.raises(_ClientError):
        storage_errors.with_retry("op", lambda: (calls.append(1), (_ for _ in ()).throw(_ClientError("NoSuchKey"))))
    assert len(calls) == 1  # permanent errors are not retried


def test_manifest_is_json_with_sizes(tmp_path: Path) -> None:
    out = str(tmp_path / "a")
    with storage.ArtifactWriter(out) as writer:
        writer.write_bytes("x", b"12345")
    marker = json.loads((tmp_path / "a" / storage.COMPLETE_MARKER).read_text())
    assert marker["files"]["x"]["size"] == 5
