"""KServe's InferenceService CRD, the one the exports' manifests are checked against: from KServe's Go module at the
release kftrain's exports cite, downloaded by the go command into Go's module cache (checked against the Go checksum
database on download, and against :data:`SUM` here), never copied into the repository.

    python -m testbed.kserve_crd     download the module if needed, print the CRD's path (`make test` runs it)

The tests read the module cache only (:func:`crd_file`: the go command with GOPROXY=off, nothing leaves the
machine); a test that needs the CRD is skipped, naming that command, when it is not there.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from kftrain.job.manifest.schema import CRDSchemas

MODULE, VERSION = "github.com/kserve/kserve", "v0.20.0"
# The module's line in a go.sum: the hash of its zip, as sum.golang.org records it.
SUM = "h1:Bs7HxmGV4KFqqptDcWseKv+mwD4YOYHJWcuVgPG2Gug="
# kserve/kserve@v0.20.0:config/crd/full/serving.kserve.io_inferenceservices.yaml (its folder holds KServe's other
# CRDs, ServingRuntime's and the rest, none of them with an x-kubernetes-validations rule).
CRD = "config/crd/full/serving.kserve.io_inferenceservices.yaml"
FETCH_HINT = "make kserve-crd"  # which runs python -m testbed.kserve_crd
API_VERSION, KIND = "serving.kserve.io/v1beta1", "InferenceService"


class FetchError(RuntimeError):
    """The module could not be had, or is not the one pinned."""


def module_dir(*, offline: bool) -> Path:
    """Where the go command keeps the module, downloaded first unless ``offline`` (the module cache only)."""
    go = shutil.which("go")
    if go is None:
        raise FetchError("no go command here (install Go)")
    env = {**os.environ, "GO111MODULE": "on", "GOWORK": "off", "GOFLAGS": "-mod=mod"}
    if offline:
        env["GOPROXY"] = "off"
    # From the root folder: outside any module, so no go.mod or go.sum of anyone's is read or written.
    out = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        capture_output=True, text=True, env=env, cwd="/", timeout=600, check=False,
    )  # fmt: skip
    try:
        info = json.loads(out.stdout)
    except json.JSONDecodeError:
        raise FetchError(f"go mod download {MODULE}@{VERSION}: {(out.stderr or out.stdout).strip()[:400]}") from None
    if info.get("Error") or out.returncode:
        raise FetchError(f"go mod download {MODULE}@{VERSION}: {info.get('Error') or out.stderr.strip()[:400]}")
    if info.get("Sum") != SUM:
        raise FetchError(f"{MODULE}@{VERSION} in the module cache has hash {info.get('Sum')}, not the pinned {SUM}")
    return Path(info["Dir"])


@functools.cache
def crd_file() -> Path:
    """The CRD's file in the module cache, or a skip naming the command that downloads it."""
    import pytest

    try:
        path = module_dir(offline=True) / CRD
    except FetchError as exc:
        pytest.skip(
            f"KServe's InferenceService CRD ({MODULE}@{VERSION}) not in Go's module cache ({exc}): run `{FETCH_HINT}`"
        )
    if not path.is_file():
        raise FetchError(f"{MODULE}@{VERSION} has no {CRD}")
    return path


def schemas() -> CRDSchemas:
    """The schemas of KServe's CRDs (those beside :data:`CRD`), parsed once per process, or a skip as
    :func:`crd_file`'s."""
    from testbed.reference import schemas_in

    return schemas_in(crd_file().parent)


# What a broken export could write, each refused by the CRD's schema, by the field it names: the predictor's
# modelFormat without its name (required), its args as one string (a list of strings), its storageUri not a string.
BROKEN_FIELDS = {
    "spec.predictor.model.modelFormat": lambda model: model.update(modelFormat={}),
    "spec.predictor.model.args": lambda model: model.update(args="--backend=vllm --enable-lora"),
    "spec.predictor.model.storageUri": lambda model: model.update(storageUri=["s3://bucket/model"]),
}


def broken(service: dict[str, Any], field: str) -> dict[str, Any]:
    """``service`` (an InferenceService) with ``field`` broken as :data:`BROKEN_FIELDS` says."""
    service = copy.deepcopy(service)
    BROKEN_FIELDS[field](service["spec"]["predictor"]["model"])
    return service


if __name__ == "__main__":
    try:
        print(module_dir(offline=False) / CRD)
    except FetchError as exc:
        sys.exit(f"testbed.kserve_crd: {exc}")
