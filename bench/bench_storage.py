"""Upload+download through kftrain.storage vs plain boto3, against one local moto server.

    python bench/bench_storage.py --size-mb 64 --repeat 3 [--json results.json] [--endpoint URL]

Each round runs each implementation in its own subprocess (so its peak RSS is its own), uploading then
downloading one file of --size-mb random bytes; rounds interleave the two, alternating which goes first.
Prints a markdown table (min/median/max seconds, median throughput, peak RSS over the process's
post-import baseline) and the kftrain/boto3 time ratio.
boto3 uses its default TransferConfig (8 MiB parts, 10 threads), i.e. what a plain boto3 user gets.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from local_s3 import start_moto, stop_moto  # bench/local_s3.py, beside this script

BUCKET = "bench"
IMPLEMENTATIONS = ("kftrain", "boto3")


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _worker(impl: str, endpoint: str, src: str, repeat: int = 1) -> dict[str, Any]:
    """Runs in a subprocess: ``repeat`` upload+download rounds with one implementation."""
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    from kftrain import storage

    storage.exists(f"s3://{BUCKET}/warmup")  # client, event loop, connection: part of the baseline
    client.head_bucket(Bucket=BUCKET)
    baseline = _maxrss_mb()
    dst = src + f".{impl}.back"
    key = f"{impl}.bin"
    up: list[float] = []
    down: list[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        if impl == "kftrain":
            storage.upload(src, f"s3://{BUCKET}/{key}")
        else:
            client.upload_file(src, BUCKET, key)
        middle = time.perf_counter()
        if impl == "kftrain":
            storage.download(f"s3://{BUCKET}/{key}", dst)
        else:
            client.download_file(BUCKET, key, dst)
        up.append(middle - started)
        down.append(time.perf_counter() - middle)
        if os.path.getsize(dst) != os.path.getsize(src):
            raise SystemExit(f"{impl}: downloaded {os.path.getsize(dst)} bytes, expected {os.path.getsize(src)}")
        os.remove(dst)
        client.delete_object(Bucket=BUCKET, Key=key)
    return {"upload_s": up, "download_s": down, "peak_rss_mb": _maxrss_mb() - baseline, "baseline_rss_mb": baseline}


def _write_random(path: str, size: int) -> None:
    with open(path, "wb") as handle:
        left = size
        while left:
            piece = os.urandom(min(left, 8 << 20))
            handle.write(piece)
            left -= len(piece)


def _stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="file size in MiB (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per implementation (default 3)")
    parser.add_argument("--json", type=Path, help="also write machine-readable results here")
    parser.add_argument("--endpoint", help="use this S3 endpoint instead of starting moto_server")
    parser.add_argument("--worker", choices=IMPLEMENTATIONS, help=argparse.SUPPRESS)
    parser.add_argument("--src", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(_worker(args.worker, args.endpoint, args.src)))
        return 0

    proc = None
    endpoint = args.endpoint
    if not endpoint:
        proc, endpoint = start_moto()
    try:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=BUCKET)
        size = args.size_mb * 1024 * 1024
        results: dict[str, Any] = {}
        with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
            src = os.path.join(tmp, "src.bin")
            _write_random(src, size)
            # Rounds interleave the implementations, alternating which goes first, so drift in the
            # machine's load (or the server's state) does not favour one of them.
            for round_ in range(args.repeat):
                order = IMPLEMENTATIONS if round_ % 2 == 0 else IMPLEMENTATIONS[::-1]
                for impl in order:
                    out = subprocess.run(
                        [sys.executable, __file__, "--worker", impl, "--endpoint", endpoint, "--src", src],
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                    one = json.loads(out.stdout.strip().splitlines()[-1])
                    merged = results.setdefault(impl, {"upload_s": [], "download_s": [], "peak_rss_mb": 0.0})
                    merged["upload_s"] += one["upload_s"]
                    merged["download_s"] += one["download_s"]
                    merged["peak_rss_mb"] = max(merged["peak_rss_mb"], one["peak_rss_mb"])
                    merged["baseline_rss_mb"] = one["baseline_rss_mb"]
    finally:
        stop_moto(proc)

    mib = size / (1024 * 1024)
    rows = []
    summary: dict[str, Any] = {"size_mb": args.size_mb, "repeat": args.repeat, "endpoint": endpoint, "results": {}}
    for impl in IMPLEMENTATIONS:
        r = results[impl]
        total = [u + d for u, d in zip(r["upload_s"], r["download_s"], strict=True)]
        entry = {"upload": _stats(r["upload_s"]), "download": _stats(r["download_s"]), "total": _stats(total)}
        entry["peak_rss_mb"] = r["peak_rss_mb"]
        entry["baseline_rss_mb"] = r["baseline_rss_mb"]
        summary["results"][impl] = entry
        for op in ("upload", "download", "total"):
            s = entry[op]
            rows.append(
                f"| {impl} | {op} | {s['min']:.2f} | {s['median']:.2f} | {s['max']:.2f} | "
                f"{mib / s['median']:.0f} | {r['peak_rss_mb']:.0f} |"
            )
    ratios = {
        op: summary["results"]["kftrain"][op]["median"] / summary["results"]["boto3"][op]["median"]
        for op in ("upload", "download", "total")
    }
    summary["ratio_kftrain_over_boto3"] = ratios

    print(f"### Upload + download of {args.size_mb} MiB, {args.repeat} rounds, moto at {endpoint}\n")
    print("| implementation | op | min s | median s | max s | median MiB/s | peak RSS over baseline MB |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n| ratio kftrain/boto3 (median time) | upload | download | total |")
    print("|---|---|---|---|")
    print(f"| | {ratios['upload']:.2f} | {ratios['download']:.2f} | {ratios['total']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
