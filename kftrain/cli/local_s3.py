"""A throw-away S3-compatible server on 127.0.0.1 for running pipelines with their artifacts on s3://.

``kftrain run --storage s3`` uses it: moto's server mode (installed with the dev extra) keeps the
objects in memory and goes away with the run. No MinIO server is installable from the package
registries here; anything S3-compatible works the same through ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from kftrain.errors import KftrainError

BUCKET = "kftrain-local"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def local_s3(bucket: str = BUCKET) -> Iterator[dict[str, str]]:
    """Start the server, create ``bucket``, and yield the environment that points clients at it."""
    server = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    if not Path(server).exists():
        raise KftrainError("--storage s3 needs moto's server (pip install 'moto[server]', part of the dev extra)")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise KftrainError(f"the local S3 server did not start on {endpoint}")
            time.sleep(0.1)
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="local",
                     aws_secret_access_key="local-secret").create_bucket(Bucket=bucket)  # fmt: skip
        yield env
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
