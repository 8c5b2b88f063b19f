"""P8, real images: each image built by ``scripts/build_images.sh`` (buildah, FROM the Debian-made base), its size
and its build times, cold and warm.

    python bench/bench_built_images.py [--images launch,data,...] [--cold] --json out.json

An image whose inputs changed is built first (the build script records every build in
``$KFTRAIN_IMAGE_CACHE/builds.jsonl``); with ``--cold`` every named image is rebuilt with no layer reused. The cold
figure is the latest build of the image's current inputs made with no layer reused (else the latest build of
them, said so); the warm figure is a rerun of the script for that image, timed here (nothing to build: it only
checks the key). Size: the image as its storage reports it (base included, MB of 10^6 bytes), and the base's.
An image whose index does not answer from here (PyTorch's CPU index), or whose build fails, is reported as not
built.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kftrain.images import build_matrix  # noqa: E402  (this checkout's, whatever the venv has)
from testbed.dockerfiles import image_env  # noqa: E402

BUILD = ROOT / "scripts" / "build_images.sh"


def names() -> dict[str, str]:
    """Each image's short name (``launch``, ``pytorch-cuda``) and its reference."""
    return {folder + (f"-{variant}" if variant else ""): ref for folder, variant, ref in build_matrix()}


def build(env: dict[str, str], name: str, cold: bool) -> tuple[float, str]:
    extra = {"KFTRAIN_IMAGE_NO_CACHE": "1"} if cold else {}
    started = time.perf_counter()
    proc = subprocess.run(
        [str(BUILD), name], cwd=ROOT, env={**env, **extra, "PY": sys.executable}, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"build_images.sh {name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout + proc.stderr


def inspect(env: dict[str, str], ref: str, template: str) -> str:
    proc = subprocess.run(["podman", "image", "inspect", "--format", template, ref], env=env, capture_output=True)
    return proc.stdout.decode().strip() if proc.returncode == 0 else ""


def measure(env: dict[str, str], name: str, ref: str, cold: bool) -> dict[str, Any]:
    try:
        _, out = build(env, name, cold)
    except RuntimeError as exc:
        return {"image": ref, "skipped": f"build failed: {str(exc).strip().splitlines()[-1]}"[:200]}
    if "not built" in out:
        return {"image": ref, "skipped": out.strip().splitlines()[-1].removeprefix("build_images: ")}
    warm_s, out = build(env, name, cold=False)
    assert f"{ref} is current" in out, out
    key = inspect(env, ref, '{{ index .Labels "org.kftrain.inputs" }}')
    log = Path(env["KFTRAIN_IMAGE_CACHE"]) / "builds.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    records = [r for r in records if r["image"] == ref and r["key"] == key]
    no_cache = [r for r in records if r["no_cache"]]
    record = (no_cache or records or [None])[-1]
    return {
        "image": ref,
        "size_mb": int(inspect(env, ref, "{{.Size}}")) / 1e6,
        "base_mb": int(inspect(env, "python:3.11-slim-bookworm", "{{.Size}}")) / 1e6,
        "cold_s": record["seconds"] if record else None,
        "cold_no_layer_cache": bool(no_cache),
        "cold_date": record["date"] if record else None,
        "builder": record["builder"] if record else None,
        "warm_s": warm_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", default=",".join(names()))
    parser.add_argument("--cold", action="store_true", help="rebuild each named image with no layer reused")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    env = image_env()
    refs = names()
    out = {}
    for name in args.images.split(","):
        out[name] = measure(env, name, refs[name], args.cold)
        print(name, json.dumps(out[name]), flush=True)
    args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
