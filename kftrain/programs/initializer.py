"""Kubeflow Trainer's dataset and model initializers, run locally where their images are not: ``python -m
kftrain.programs.initializer dataset|model``.

What they do is kubeflow/trainer@v2.3.0's ``pkg/initializers`` (the images ``dataset-initializer`` and
``model-initializer``): read ``STORAGE_URI`` (``dataset/__main__.py:31-35``), choose the provider by its scheme, and
download into ``/workspace/dataset`` or ``/workspace/model`` (``utils/utils.py:27-33``), where the trainer reads it.
Their configuration comes from variables named after the provider's fields, upper-cased (``utils/utils.py:58-73``,
``types/types.py``): ``ENDPOINT``, ``ACCESS_KEY_ID``, ``SECRET_ACCESS_KEY``, ``REGION`` for S3, ``ACCESS_TOKEN`` for
Hugging Face, ``IGNORE_PATTERNS`` (comma-separated) for both. A ``secretRef`` of the TrainJob reaches the container
as ``envFrom`` (``plugins/jobset/builder.go:64-70``), so the credentials arrive under those names, by reference.

* ``s3://bucket/prefix``: every object under the prefix, at its path below the prefix (``utils/opendal.py:74-113``);
  kftrain's storage reads it (the endpoint and credentials: the variables above, else the usual ``AWS_*``).
* ``hf://owner/name``: the files of that Hugging Face dataset (``dataset/huggingface.py:38-40``: owner/name) or
  model (``model/huggingface.py:38, 53``, the ``*.json *.safetensors *.model *.txt`` files), over the Hub's HTTP API
  (``HF_ENDPOINT``, default https://huggingface.co); where the Hub cannot be reached the error says so.
* ``file:///path``: a folder or file of this machine, copied (kftrain's local source; Trainer's initializers refuse
  the scheme, so it is for local runs only).

The destination is ``$KFTRAIN_WORKSPACE/<dataset|model>``: the local backend sets ``KFTRAIN_WORKSPACE`` only where
it cannot give the job a private ``/workspace``; otherwise it is ``/workspace``, as in the pod.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from kftrain.contract import WORKSPACE_ENV
from kftrain.errors import KftrainError

WORKSPACE = "/workspace"  # pkg/initializers/utils/utils.py:27 WORKSPACE_PATH
STORAGE_URI_ENV = "STORAGE_URI"  # pkg/initializers/utils/utils.py:20
# pkg/initializers/types/types.py: the model initializers' default ignore_patterns.
MODEL_IGNORE = ("*.msgpack", "*.h5", "*.bin", "*.pt", "*.pth")
# pkg/initializers/model/huggingface.py:53: the files of a model it downloads.
MODEL_ALLOW = ("*.json", "*.safetensors", "*.model", "*.txt")
HF_ENDPOINT_ENV = "HF_ENDPOINT"
HF_TIMEOUT_S = 20.0


class InitializerError(KftrainError):
    """What stopped an initializer, in one line."""


def destination(what: str, env: Mapping[str, str]) -> Path:
    return Path(env.get(WORKSPACE_ENV) or WORKSPACE) / what


def ignore_patterns(what: str, env: Mapping[str, str]) -> list[str]:
    given = env.get("IGNORE_PATTERNS")
    if given:  # utils/utils.py:64-68: comma-separated, blanks dropped
        return [p.strip() for p in given.split(",") if p.strip()]
    return list(MODEL_IGNORE) if what == "model" else []


def initialize(what: str, env: Mapping[str, str]) -> Path:
    """Download ``STORAGE_URI`` into the workspace's ``what`` folder (``dataset`` or ``model``); its path."""
    uri = env.get(STORAGE_URI_ENV)
    if not uri:
        raise InitializerError(f"{STORAGE_URI_ENV} env variable must be set (spec.initializer.{what}.storageUri)")
    dest = destination(what, env)
    dest.mkdir(parents=True, exist_ok=True)
    scheme = urllib.parse.urlsplit(uri).scheme
    ignore = ignore_patterns(what, env)
    if scheme == "s3":
        count = _from_s3(uri, dest, ignore, env)
    elif scheme == "hf":
        count = _from_hub(uri, what, dest, ignore, env)
    elif scheme == "file":
        count = _from_folder(Path(urllib.parse.urlsplit(uri).path), dest, ignore)
    else:
        raise InitializerError(
            f"{STORAGE_URI_ENV} {uri!r} must have the valid {what} provider: s3:// or hf:// (as Trainer's "
            "initializers), or file:// locally"
        )
    print(f"{what} initializer: {count} file(s) from {uri} in {dest}", flush=True)
    return dest


def _ignored(rel: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(rel, p) for p in patterns)


def _from_s3(uri: str, dest: Path, ignore: list[str], env: Mapping[str, str]) -> int:
    from kftrain import storage
    from kftrain.storage.io import copy_file

    # The initializer's own configuration names (types.py S3DatasetInitializer) win over the usual AWS_* ones.
    for ours, aws in (
        ("ENDPOINT", "AWS_ENDPOINT_URL"),
        ("ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"),
        ("SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"),
        ("REGION", "AWS_DEFAULT_REGION"),
    ):
        if env.get(ours):
            os.environ[aws] = env[ours]
    count = 0
    for rel in storage.list_files(uri):
        if _ignored(rel, ignore):
            continue
        target = dest / storage.confine(rel, uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        copy_file(storage.join(uri, rel), str(target))
        count += 1
    return count


def _from_folder(source: Path, dest: Path, ignore: list[str]) -> int:
    if not source.exists():
        raise InitializerError(f"{STORAGE_URI_ENV}: {source} does not exist")
    if source.is_file():
        shutil.copy2(source, dest / source.name)
        return 1
    count = 0
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        rel = path.relative_to(source).as_posix()
        if _ignored(rel, ignore):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest / rel)
        count += 1
    return count


def _from_hub(uri: str, what: str, dest: Path, ignore: list[str], env: Mapping[str, str]) -> int:
    parts = urllib.parse.urlsplit(uri)
    if what == "dataset":  # dataset/huggingface.py:38-40: owner/name, the rest of the path ignored
        repo, api, prefix = f"{parts.netloc}/{parts.path.split('/')[1]}", "datasets", "datasets/"
        allow: tuple[str, ...] = ("*",)
    else:  # model/huggingface.py:38, 50-55
        repo, api, prefix = f"{parts.netloc}{parts.path}", "models", ""
        allow = MODEL_ALLOW
    endpoint = (env.get(HF_ENDPOINT_ENV) or "https://huggingface.co").rstrip("/")
    token = env.get("ACCESS_TOKEN") or env.get("HF_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    listing = json.loads(_fetch(f"{endpoint}/api/{api}/{repo}", headers, uri))
    names = [s.get("rfilename", "") for s in listing.get("siblings") or []]
    wanted = [n for n in names if any(fnmatch.fnmatch(n, a) for a in allow) and not _ignored(n, ignore)]
    from kftrain import storage

    for name in wanted:
        target = dest / storage.confine(name, uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_fetch(f"{endpoint}/{prefix}{repo}/resolve/main/{urllib.parse.quote(name)}", headers, uri))
    return len(wanted)


def _fetch(url: str, headers: Mapping[str, str], uri: str) -> bytes:
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=HF_TIMEOUT_S) as response:
            return bytes(response.read())
    except urllib.error.HTTPError as exc:
        raise InitializerError(f"{uri}: the Hugging Face Hub answered {exc.code} {exc.reason} for {url}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InitializerError(
            f"{uri}: cannot reach the Hugging Face Hub at {url.split('/api/')[0]} ({reason}): no network here? "
            f"Give the data by s3:// (or file:// locally), or set {HF_ENDPOINT_ENV} to a mirror"
        ) from None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["dataset"], ["model"]):
        print("usage: python -m kftrain.programs.initializer dataset|model", file=sys.stderr)
        return 2
    try:
        initialize(args[0], os.environ)
    except KftrainError as exc:
        print(f"{args[0]} initializer: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
