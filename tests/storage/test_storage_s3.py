"""kftrain.storage against a real S3 protocol: ``moto_server`` in a subprocess (see s3_server.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kftrain import storage
from kftrain.storage import errors as storage_errors
from kftrain.storage import io as storage_io
from kftrain.storage import s3_transfer
from testbed.s3_server import FaultProxy, MotoServer, boto3_client, set_s3_env, short_client_backoff

MiB = 1024 * 1024


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """1 MiB chunks: many ranged reads from little data (upload parts stay at S3's 5 MiB minimum)."""
    monkeypatch.setattr(storage_io, "CHUNK", 1 * MiB)
    return storage_io.CHUNK


def open_uploads(moto: MotoServer, bucket_uri: str) -> list[str]:
    """The keys of the multipart uploads begun and neither completed nor aborted in the bucket of ``bucket_uri``."""
    bucket = bucket_uri.removeprefix("s3://")
    return [u["Key"] for u in boto3_client(moto.endpoint).list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def _random_file(path: Path, size: int) -> str:
    """A file of ``size`` random bytes, written in pieces; returns its sha256."""
    digest = hashlib.sha256()
    with open(path, "wb") as handle:
        left = size
        while left:
            piece = os.urandom(min(left, 4 * MiB))
            handle.write(piece)
            digest.update(piece)
            left -= len(piece)
    return digest.hexdigest()


def _sha(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while piece := handle.read(4 * MiB):
            digest.update(piece)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------------
# Round trips


def test_small_objects_round_trip(s3_env: str) -> None:
    uri = storage.join(s3_env, "dir", "x.bin")
    with storage.open_uri(uri, "wb") as handle:
        handle.write(b"payload")
    assert storage.exists(uri)
    assert storage.read_bytes(uri) == b"payload"
    assert storage.sha256_of(uri) == hashlib.sha256(b"payload").hexdigest()
    assert storage.list_files(storage.join(s3_env, "dir")) == ["x.bin"]


def test_artifact_round_trip_s3(s3_env: str) -> None:
    out = storage.join(s3_env, "runs", "r1", "model")
    with storage.ArtifactWriter(out, metadata={"framework": "pytorch"}) as writer:
        writer.write_json("info.json", {"classes": 10})
        with writer.open("weights.bin") as handle:
            for _ in range(3):
                handle.write(b"w" * (5 * MiB))  # crosses the CHUNK boundary: a multipart upload
    manifest = storage.require_complete(out, verify=True)
    assert manifest["metadata"] == {"framework": "pytorch"}
    assert manifest["files"]["weights.bin"]["size"] == 15 * MiB
    assert storage.read_json(storage.join(out, "info.json")) == {"classes": 10}

    # A failed re-publish leaves the previous version complete and readable (it was written aside).
    with pytest.raises(RuntimeError), storage.ArtifactWriter(out) as writer:
        writer.write_bytes("info.json", b"{}")
        raise RuntimeError("boom")
    assert storage.require_complete(out, verify=True) == manifest
    assert storage.read_json(storage.join(out, "info.json")) == {"classes": 10}


def test_failed_stream_is_not_committed(s3_env: str) -> None:
    uri = storage.join(s3_env, "half.bin")
    with pytest.raises(RuntimeError), storage.open_uri(uri, "wb") as handle:
        handle.write(b"x" * (storage.CHUNK + 1))  # one part already uploaded
        raise RuntimeError("producer failed")
    assert not storage.exists(uri)  # fsspec's default close() would have completed the upload


def test_directory_upload_download_and_copy(s3_env: str, tmp_path: Path, small_chunks: int) -> None:
    src = tmp_path / "src"
    expected = {"a.txt": b"a", "sub/b.bin": os.urandom(storage_io.CHUNK * 2 + 5), "sub/c/empty": b""}
    for rel, data in expected.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    up = storage.upload(src, storage.join(s3_env, "tree"))
    assert {rel: d.sha256 for rel, d in up.items()} == {r: hashlib.sha256(d).hexdigest() for r, d in expected.items()}
    assert storage.list_files(storage.join(s3_env, "tree")) == sorted(expected)

    storage.copy(storage.join(s3_env, "tree"), storage.join(s3_env, "tree2"))  # object store to object store
    down = storage.download(storage.join(s3_env, "tree2"), tmp_path / "back")
    assert down == up
    for rel, data in expected.items():
        assert (tmp_path / "back" / rel).read_bytes() == data


def test_artifact_copy_between_stores(s3_env: str, tmp_path: Path, small_chunks: int) -> None:
    local = str(tmp_path / "art")
    with storage.ArtifactWriter(local) as writer:
        writer.write_bytes("w.bin", os.urandom(storage_io.CHUNK + 3))
    remote = storage.join(s3_env, "published")
    storage.upload(local, remote)
    assert storage.require_complete(remote, verify=True) == storage.require_complete(local)
    storage.download(remote, tmp_path / "again")
    storage.require_complete(str(tmp_path / "again"), verify=True)


# --------------------------------------------------------------------------------------------------
# minio:// and errors


def test_minio_scheme_goes_to_the_endpoint(s3_env: str, moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = s3_env.removeprefix("s3://")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("MINIO_ENDPOINT", f"127.0.0.1:{moto.port}")  # KFP style: no scheme
    storage.upload(__file__, f"minio://{bucket}/via-minio.py")
    got = boto3_client(moto.endpoint).get_object(Bucket=bucket, Key="via-minio.py")["Body"].read()
    assert got == Path(__file__).read_bytes()

    monkeypatch.delenv("MINIO_ENDPOINT")
    monkeypatch.setenv("MINIO_SERVICE_SERVICE_HOST", "127.0.0.1")  # KFP's in-cluster service variables
    monkeypatch.setenv("MINIO_SERVICE_SERVICE_PORT", str(moto.port))
    assert storage.read_bytes(f"minio://{bucket}/via-minio.py") == got


def test_missing_bucket_and_key_name_uri_and_cause(s3_env: str) -> None:
    missing_bucket = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/x/y.bin"
    for call in (storage.read_bytes, storage.sha256_of, storage.require_complete):
        with pytest.raises(storage.StorageError) as info:
            call(missing_bucket)
        assert missing_bucket.rsplit("/", 1)[0] in str(info.value) and "NoSuchBucket" in str(info.value)
    missing_key = storage.join(s3_env, "nope.bin")
    for call in (storage.read_bytes, storage.sha256_of):
        with pytest.raises(storage.StorageError, match=rf"{missing_key}: NoSuchKey"):
            call(missing_key)
    with pytest.raises(storage.StorageError, match="NoSuchBucket"):
        storage.upload(__file__, missing_bucket)


@pytest.fixture(scope="module")
def auth_moto() -> Iterator[tuple[MotoServer, dict[str, str]]]:
    """A moto server that enforces IAM auth after its first four (setup) requests."""
    import boto3

    with MotoServer(env={"INITIAL_NO_AUTH_ACTION_COUNT": "4"}) as server:
        s3 = boto3_client(server.endpoint)
        s3.create_bucket(Bucket="secured")
        s3.put_object(Bucket="secured", Key="k", Body=b"x")
        iam = boto3.client(
            "iam",
            endpoint_url=server.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        iam.create_user(UserName="nobody")
        key = iam.create_access_key(UserName="nobody")["AccessKey"]
        yield server, {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}


@pytest.mark.parametrize(
    ("which", "cause"),
    [("unknown", "InvalidAccessKeyId"), ("bad-secret", "SignatureDoesNotMatch"), ("no-policy", "AccessDenied")],
)
def test_bad_credentials(
    auth_moto: tuple[MotoServer, dict[str, str]], monkeypatch: pytest.MonkeyPatch, which: str, cause: str
) -> None:
    server, key = auth_moto
    set_s3_env(monkeypatch, server.endpoint)
    creds = {
        "unknown": ("AKIAUNKNOWNUNKNOWN00", "whatever"),
        "bad-secret": (key["id"], "not-the-secret"),
        "no-policy": (key["id"], key["secret"]),
    }[which]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", creds[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", creds[1])
    with pytest.raises(storage.StorageError, match=rf"s3://secured/k: {cause}"):
        storage.read_bytes("s3://secured/k")
    with pytest.raises(storage.StorageError, match=cause):
        storage.require_complete("s3://secured/artifact")


# --------------------------------------------------------------------------------------------------
# Atomicity under SIGKILL

_KILLED_WRITER = textwrap.dedent(
    """
    import os, sys
    from kftrain import storage
    from kftrain.storage import io as storage_io
    src, uri = sys.argv[1], sys.argv[2]
    storage_io.CHUNK = 1024 * 1024  # many chunks from little data; parts are 5 MiB
    moved = 0
    def progress(n):
        global moved
        moved += n
        if moved >= 12 * storage_io.CHUNK:  # two 5 MiB parts are up
            print("uploading", flush=True)
    with storage.ArtifactWriter(uri, metadata={"step": 1}) as writer:
        writer.write_json("info.json", {"step": 1})
        writer.add(src, "big.bin", progress=progress)
    print("finished", flush=True)
    """
)


def test_writer_killed_mid_upload_leaves_nothing_complete(s3_env: str, tmp_path: Path, moto: MotoServer) -> None:
    src = tmp_path / "big.bin"
    _random_file(src, 24 * MiB)
    uri = storage.join(s3_env, "killed")
    env = {k: v for k, v in os.environ.items()}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(src), uri], stdout=subprocess.PIPE, env=env, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "uploading", line
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    # The step writes beside its output (killed.partial-<id>/), never into it.
    (staging,) = [p for p in storage.list_files(s3_env) if p.startswith("killed.partial-")]
    staging_uri = storage.join(s3_env, staging.split("/")[0])
    assert storage.exists(storage.join(staging_uri, "info.json"))  # the step did start writing...
    assert not storage.exists(storage.join(staging_uri, "big.bin"))  # ...but the multipart upload never completed
    with pytest.raises(storage.StorageError, match="NoSuchKey"):
        storage.require_complete(uri)  # nothing at the output itself
    # what a bucket lifecycle rule cleans up
    assert open_uploads(moto, s3_env) == [f"{staging_uri.split('/', 3)[3]}/big.bin"]


# --------------------------------------------------------------------------------------------------
# Transient faults and restarts


@pytest.fixture
def proxied(
    s3_env: str, moto: MotoServer, monkeypatch: pytest.MonkeyPatch, small_chunks: int
) -> Iterator[tuple[str, FaultProxy]]:
    proxy = FaultProxy(moto.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    # botocore's inner retries stay on, but fewer (2 attempts in all), and its random backoff (up to 2**n s) shortened.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    short_client_backoff(monkeypatch)
    yield s3_env, proxy
    proxy.close()


@pytest.mark.parametrize(
    ("method", "match", "kind", "times"),
    [
        ("PUT", "partNumber=2", "503", 1),  # SlowDown on a part: botocore's second attempt (of 2) sends it again
        ("PUT", "partNumber=2", "500", 3),  # outlasts botocore's 2 attempts: the object is restarted
        ("PUT", "partNumber=1", "reset", 2),  # connection reset on a part upload
        ("POST", "uploadId=", "500", 3),  # CompleteMultipartUpload fails
        ("GET", "", "reset", 2),  # reset on ranged reads
        ("GET", "", "truncate", 2),  # body cut half-way
        ("GET", "", "503", 3),
    ],
)
def test_transient_faults_end_with_identical_bytes(
    proxied: tuple[str, FaultProxy],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    match: str,
    kind: str,
    times: int,
) -> None:
    monkeypatch.setattr(
        storage_errors, "RETRY_POLICY", dataclasses.replace(storage_errors.RETRY_POLICY, initial_s=0.05)
    )
    base, proxy = proxied
    src = tmp_path / "src.bin"
    digest = _random_file(src, 11 * MiB + 123)  # three 5 MiB parts, eleven 1 MiB ranged reads
    uri = storage.join(base, "faulty.bin")
    if method == "GET":
        storage.upload(src, uri)
    fault = proxy.inject(method, match, kind, times)
    if method == "GET":
        got = storage.download(uri, tmp_path / "back.bin")
    else:
        got = storage.upload(src, uri)
        storage.download(uri, tmp_path / "back.bin")
    assert fault.hits == times, proxy.requests
    assert got[""].sha256 == digest
    assert _sha(tmp_path / "back.bin") == digest


def test_parts_and_ranges_go_out_concurrently_within_the_limit(
    proxied: tuple[str, FaultProxy], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KFTRAIN_S3_MAX_CONCURRENCY", "3")
    base, proxy = proxied
    src = tmp_path / "src.bin"
    digest = _random_file(src, 24 * MiB + 7)  # five 5 MiB parts, 25 ranged reads of 1 MiB
    uri = storage.join(base, "concurrent.bin")
    # The first part and the first range are slow: a concurrent client sends the next ones meanwhile.
    proxy.inject("PUT", "partNumber=1", "delay")
    proxy.inject("GET", "", "delay")
    assert storage.upload(src, uri)[""].sha256 == digest
    got = storage.download(uri, tmp_path / "back.bin")
    assert got[""].sha256 == digest and _sha(tmp_path / "back.bin") == digest
    assert 2 <= proxy.peak_in_flight["PUT"] <= 3, proxy.peak_in_flight
    assert 2 <= proxy.peak_in_flight["GET"] <= 3, proxy.peak_in_flight
    assert len([r for r in proxy.requests if "partNumber=" in r]) == 5


def test_failed_part_aborts_the_upload_and_leaves_no_object(
    proxied: tuple[str, FaultProxy], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto: MotoServer
) -> None:
    monkeypatch.setattr(
        storage_errors, "RETRY_POLICY", dataclasses.replace(storage_errors.RETRY_POLICY, attempts=2, initial_s=0.05)
    )
    base, proxy = proxied
    src = tmp_path / "src.bin"
    _random_file(src, 16 * MiB)
    uri = storage.join(base, "never.bin")
    proxy.inject("PUT", "partNumber=3", "500", times=1000)  # part 3 never goes through
    with pytest.raises(storage.StorageError, match=r"never\.bin"):
        storage.upload(src, uri)
    assert not storage.exists(uri)
    assert "never.bin" not in open_uploads(moto, base)  # every attempt aborted its upload
    assert len([r for r in proxy.requests if r.startswith("DELETE") and "uploadId=" in r]) == 2


def test_stream_past_the_part_limit_is_refused_and_aborted(
    s3_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto: MotoServer, small_chunks: int
) -> None:
    monkeypatch.setattr(s3_transfer, "MAX_PARTS", 2)  # S3's 10,000, scaled down to a test-sized stream
    src = tmp_path / "src.bin"
    _random_file(src, 16 * MiB)  # four 5 MiB parts
    uri = storage.join(s3_env, "too-many-parts.bin")
    with pytest.raises(storage.StorageError, match="more than 2 parts"):
        storage.upload(src, uri)
    assert not storage.exists(uri)
    assert "too-many-parts.bin" not in open_uploads(moto, s3_env)


@dataclasses.dataclass
class GatedMoto:
    """A moto server the client reaches through a proxy that drops every request while the server is away.

    Moto keeps objects in RAM, so a restarted server is re-seeded (standing in for a real MinIO's persistent
    volume) before the gate opens: the transfer's concurrent requests, retried by s3fs on its own as well as
    by kftrain, see a server that is away or one that holds the data, never a half-seeded one.
    """

    server: MotoServer
    gate: FaultProxy

    @property
    def endpoint(self) -> str:
        """The server itself (for seeding), not the gate the client uses."""
        return self.server.endpoint

    def stop(self) -> None:
        self.gate.down = True
        self.server.stop()

    def start_seeded(self, reseed: list[Path]) -> None:
        self.server.start()
        client = boto3_client(self.server.endpoint)
        client.create_bucket(Bucket="restart")
        for path in reseed:
            client.upload_file(str(path), "restart", path.name)
        self.gate.down = False


@pytest.fixture
def own_moto(monkeypatch: pytest.MonkeyPatch, small_chunks: int) -> Iterator[GatedMoto]:
    """A moto server this test may stop and restart, behind its gate."""
    with MotoServer() as server:
        gate = FaultProxy(server.port)
        set_s3_env(monkeypatch, gate.endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # as in `proxied`: few botocore tries, each backoff short
        short_client_backoff(monkeypatch)
        boto3_client(server.endpoint).create_bucket(Bucket="restart")
        yield GatedMoto(server, gate)
        gate.close()


def _restart_on_first_backoff(monkeypatch: pytest.MonkeyPatch, server: GatedMoto, reseed: list[Path]) -> list[float]:
    """Make the first retry backoff restart ``server`` (empty, as moto forgets) and re-create the data."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        if not slept:
            server.start_seeded(reseed)
        slept.append(seconds)
        time.sleep(min(seconds, 0.05))

    monkeypatch.setattr(storage_errors, "sleep", sleep)
    return slept


def test_server_restart_mid_download(own_moto: GatedMoto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "obj.bin"
    digest = _random_file(src, 12 * storage_io.CHUNK + 1)
    boto3_client(own_moto.endpoint).upload_file(str(src), "restart", "obj.bin")
    # Two ranges read ahead: when the server stops after chunk 2, at most chunks 3-5 can already be on
    # their way; the other eight must be fetched from the restarted server.
    monkeypatch.setenv("KFTRAIN_S3_MAX_CONCURRENCY", "2")
    slept = _restart_on_first_backoff(monkeypatch, own_moto, [src])
    moved: list[int] = []

    def progress(n: int) -> None:
        moved.append(n)
        if len(moved) == 2:
            own_moto.stop()  # after two chunks the server goes away mid-transfer

    got = storage.download("s3://restart/obj.bin", tmp_path / "back.bin", progress=progress)
    assert slept, "the transfer should have had to retry"
    assert got[""].sha256 == digest and _sha(tmp_path / "back.bin") == digest


def test_server_restart_mid_upload(own_moto: GatedMoto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "up.bin"
    digest = _random_file(src, 12 * MiB + 1)
    slept = _restart_on_first_backoff(monkeypatch, own_moto, [])
    moved: list[int] = []

    def progress(n: int) -> None:
        moved.append(n)
        if len(moved) == 7:
            own_moto.stop()  # part 1 is up, part 2 is being filled; the multipart upload dies with the server

    got = storage.upload(src, "s3://restart/up.bin", progress=progress)
    assert slept
    assert got[""].sha256 == digest
    storage.download("s3://restart/up.bin", tmp_path / "back.bin")
    assert _sha(tmp_path / "back.bin") == digest


# --------------------------------------------------------------------------------------------------
# Memory stays flat

_RSS_PROBE = textwrap.dedent(
    """
    import json, resource, sys, time
    from kftrain import storage
    src, uri, back = sys.argv[1], sys.argv[2], sys.argv[3]
    storage.exists(uri)  # imports, the S3 client and its event loop: part of the baseline
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    up = storage.upload(src, uri)
    middle = time.monotonic()
    down = storage.download(uri, back)
    done = time.monotonic()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"baseline_kib": baseline, "peak_kib": peak, "up_s": middle - started,
                      "down_s": done - middle, "up": up[""].sha256, "down": down[""].sha256}))
    """
)


@pytest.mark.slow
def test_one_gib_round_trip_in_flat_memory(s3_env: str, tmp_path: Path) -> None:
    size = 1024 * MiB
    src = tmp_path / "one-gib.bin"
    digest = _random_file(src, size)
    uri = storage.join(s3_env, "one-gib.bin")
    out = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, str(src), uri, str(tmp_path / "back.bin")],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    grown_mb = (result["peak_kib"] - result["baseline_kib"]) / 1024
    print(f"1 GiB: up {result['up_s']:.1f}s down {result['down_s']:.1f}s, peak RSS +{grown_mb:.0f} MB over baseline")
    assert result["up"] == result["down"] == digest
    assert _sha(tmp_path / "back.bin") == digest
    assert grown_mb < 300
