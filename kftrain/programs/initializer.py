"""Kubeflow Trainer's dataset and model initializers, run locally where their images are not.

``python -m kftrain.programs.initializer dataset|model`` does what kubeflow/trainer@v2.3.0:pkg/initializers does:
``STORAGE_URI`` (dataset/__main__.py:31-35) downloaded into ``$KFTRAIN_WORKSPACE/<dataset|model>`` (``/workspace``
in a pod; utils/utils.py:27-33), configured by the provider's fields upper-cased (utils/utils.py:58-73: ``ENDPOINT``,
``ACCESS_KEY_ID``, ``ACCESS_TOKEN``, ``IGNORE_PATTERNS``...). Schemes: ``s3://`` (utils/opendal.py:74-113),
``hf://owner/name`` over the Hub's HTTP API (dataset/huggingface.py:38-40, model/huggingface.py:38,53), and
``file://`` (local runs only: Trainer refuses it).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import stat
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kftrain.contract import WORKSPACE_ENV
from kftrain.errors import KftrainError
from kftrain.redaction import redact

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
    """Download ``STORAGE_URI`` into the workspace's ``what`` folder (``dataset`` or ``model``); its path.

    Every file is downloaded into a staging folder beside the destination and moved into it only once all are
    there: a failed or cancelled download leaves nothing at the destination, not a part of a file nor a part of
    the files."""
    uri = env.get(STORAGE_URI_ENV)
    if not uri:
        raise InitializerError(f"{STORAGE_URI_ENV} env variable must be set (spec.initializer.{what}.storageUri)")
    dest = destination(what, env)
    scheme = urllib.parse.urlsplit(uri).scheme
    if scheme not in ("s3", "hf", "file"):
        raise InitializerError(
            f"{STORAGE_URI_ENV} {uri!r} must have the valid {what} provider: s3:// or hf:// (as Trainer's "
            "initializers), or file:// locally"
        )
    ignore = ignore_patterns(what, env)
    source = _local_source(uri, dest) if scheme == "file" else None  # refused before anything is created
    dest.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{what}.partial-", dir=dest.parent))
    try:
        if scheme == "s3":
            names = _from_s3(uri, staging, ignore, env)
        elif scheme == "hf":
            names = _from_hub(uri, what, staging, ignore, env)
        else:
            assert source is not None
            names = _from_folder(source, staging, ignore, uri)
        for name in names:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, dest / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(redact(f"{what} initializer: {len(names)} file(s) from {uri} in {dest}"), flush=True)
    return dest


def _ignored(rel: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(rel, p) for p in patterns)


def _layout(names: list[str], uri: str) -> list[str]:
    """``names`` (relative paths from a listing) when each can be a file of one folder: confined to it, none
    given twice, none both a file and a folder (objects ``a`` and ``a/b``); else an error naming them."""
    from kftrain.storage import StorageError, confine

    seen: set[str] = set()
    for name in names:
        try:
            confine(name, f"{uri} (listing)")
        except StorageError as exc:
            raise InitializerError(str(exc)) from None
        if name in seen:
            raise InitializerError(f"{uri}: {name!r} is listed twice")
        seen.add(name)
    for name in names:
        parts = name.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder in seen:
                raise InitializerError(
                    f"{uri}: {folder!r} is both a file and a folder ({name!r}): a folder cannot hold both"
                )
    return names


def _from_s3(uri: str, staging: Path, ignore: list[str], env: Mapping[str, str]) -> list[str]:
    from kftrain import storage
    from kftrain.storage.io import copy_file, is_file

    # The initializer's own configuration names (types.py S3DatasetInitializer) win over the usual AWS_* ones.
    for ours, aws in (
        ("ENDPOINT", "AWS_ENDPOINT_URL"),
        ("ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"),
        ("SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"),
        ("REGION", "AWS_DEFAULT_REGION"),
    ):
        if env.get(ours):
            os.environ[aws] = env[ours]
    # Trainer lists the prefix itself: an object at exactly its key is downloaded under its own name, and what is
    # under it at its path below it (kubeflow/trainer@v2.3.0:pkg/initializers/utils/opendal.py:90-106).
    sources = {rel: storage.join(uri, rel) for rel in storage.list_files(uri)}
    key = uri.split("://", 1)[1].rstrip("/")
    if "/" in key and is_file(uri.rstrip("/")):
        name = key.rsplit("/", 1)[1]
        if name in sources:
            raise InitializerError(f"{uri}: the object itself and the object under it are both named {name!r}")
        sources[name] = uri.rstrip("/")
    names = _layout(sorted(n for n in sources if not _ignored(n, ignore)), uri)
    for name in names:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        copy_file(sources[name], str(staging / name))
    return names


def _local_source(uri: str, dest: Path) -> Path:
    """The path of a ``file://`` URI, when it is this machine's, exists and is not the destination."""
    parts = urllib.parse.urlsplit(uri)
    # RFC 8089: file://host/path names a file of that host; "" and "localhost" are this machine.
    if parts.netloc not in ("", "localhost"):
        raise InitializerError(
            f"{STORAGE_URI_ENV} {uri}: names a file of the host {parts.netloc!r}, not of this machine: give "
            "file:///path (three slashes)"
        )
    source = Path(parts.path)
    if not source.exists():
        raise InitializerError(f"{STORAGE_URI_ENV}: {source} does not exist")
    real, target = source.resolve(), dest.resolve()
    if real == target or target.is_relative_to(real) or real.is_relative_to(target):
        raise InitializerError(
            f"{STORAGE_URI_ENV} {uri}: {source} is the destination {dest} or holds it (or lies in it): nothing to "
            "copy it to; give the data's own folder"
        )
    return source


def _not_regular(path: Path) -> InitializerError:
    return InitializerError(
        f"{STORAGE_URI_ENV}: {path} is not a regular file or a folder (a device, a pipe or a socket): give files"
    )


def _from_folder(source: Path, staging: Path, ignore: list[str], uri: str) -> list[str]:
    if stat.S_ISREG(source.stat().st_mode):
        shutil.copy2(source, staging / source.name)
        return [source.name]
    if not source.is_dir():
        raise _not_regular(source)
    found = []
    for folder, _, files in os.walk(source):
        for name in files:
            path = Path(folder) / name
            try:
                mode = path.stat().st_mode  # a link is what it leads to, as the copy reads it
            except OSError:
                raise InitializerError(f"{STORAGE_URI_ENV}: {path} cannot be read (a broken link?)") from None
            if not stat.S_ISREG(mode):  # a FIFO would block the copy forever, a device never end
                raise _not_regular(path)
            found.append(path.relative_to(source).as_posix())
    names = _layout(sorted(n for n in found if not _ignored(n, ignore)), uri)
    for rel in names:
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / rel, staging / rel)
    return names


def _from_hub(uri: str, what: str, staging: Path, ignore: list[str], env: Mapping[str, str]) -> list[str]:
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
    listing_url = f"{endpoint}/api/{api}/{repo}"
    names = _hub_names(_read_listing(listing_url, headers, uri), f"{uri}: the Hub's listing ({listing_url})")
    wanted = [n for n in names if any(fnmatch.fnmatch(n, a) for a in allow) and not _ignored(n, ignore)]
    _layout(wanted, uri)
    for name in wanted:
        target = staging / name
        target.parent.mkdir(parents=True, exist_ok=True)
        _download(f"{endpoint}/{prefix}{repo}/resolve/main/{urllib.parse.quote(name)}", headers, uri, target)
    return wanted


def _hub_names(listing: bytes, where: str) -> list[str]:
    """The file names of a Hub listing (``{"siblings": [{"rfilename": ...}]}``), every shape checked."""
    try:
        parsed = json.loads(listing)
    except ValueError:
        raise InitializerError(f"{where} is not JSON") from None
    if not isinstance(parsed, dict):
        raise InitializerError(f"{where} is not an object")
    siblings = parsed.get("siblings")
    if siblings is None:
        return []
    if not isinstance(siblings, list):
        raise InitializerError(f"{where}: siblings is not a list")
    names = []
    for i, sibling in enumerate(siblings):
        name = sibling.get("rfilename") if isinstance(sibling, dict) else None
        if not isinstance(name, str):
            raise InitializerError(f"{where}: siblings[{i}].rfilename is not a file name")
        names.append(name)
    return names


# A Hub listing is one JSON document of names; past this it is not one.
MAX_LISTING_BYTES = 64 * 1024 * 1024
CHUNK_BYTES = 1024 * 1024


def _strip_auth(old_url: str, new_url: str) -> bool:
    """Whether a redirect from ``old_url`` to ``new_url`` must drop the Authorization header: to another host, or to
    another scheme or port but http to https on their default ports (psf/requests@v2.33.0:src/requests/
    sessions.py:128-158, SessionRedirectMixin.should_strip_auth). urllib forwards every header on a redirect."""
    old, new = urllib.parse.urlsplit(old_url), urllib.parse.urlsplit(new_url)
    if old.hostname != new.hostname:
        return True
    if old.scheme == "http" and old.port in (80, None) and new.scheme == "https" and new.port in (443, None):
        return False
    default_port = ({"http": 80, "https": 443}.get(old.scheme), None)
    if old.scheme == new.scheme and old.port in default_port and new.port in default_port:
        return False
    return old.port != new.port or old.scheme != new.scheme


class _NoCredentialsAcrossHosts(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _strip_auth(req.full_url, new.full_url):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_NoCredentialsAcrossHosts)


@contextlib.contextmanager
def _opened(url: str, headers: Mapping[str, str], uri: str) -> Iterator[Any]:
    """The Hub's response for ``url`` (redirects followed, credentials kept to the Hub's host); an error naming the
    URL, never the token."""
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with _OPENER.open(request, timeout=HF_TIMEOUT_S) as response:
            yield response
    except urllib.error.HTTPError as exc:
        raise InitializerError(f"{uri}: the Hugging Face Hub answered {exc.code} {exc.reason} for {url}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InitializerError(
            f"{uri}: cannot reach the Hugging Face Hub at {url.split('/api/')[0]} ({reason}): no network here? "
            f"Give the data by s3:// (or file:// locally), or set {HF_ENDPOINT_ENV} to a mirror"
        ) from None


def _read_listing(url: str, headers: Mapping[str, str], uri: str) -> bytes:
    with _opened(url, headers, uri) as response:
        body = bytes(response.read(MAX_LISTING_BYTES + 1))
    if len(body) > MAX_LISTING_BYTES:
        raise InitializerError(f"{uri}: the Hub's listing ({url}) is larger than {MAX_LISTING_BYTES} bytes")
    return body


def _download(url: str, headers: Mapping[str, str], uri: str, target: Path) -> None:
    """``url`` into ``target``, a chunk at a time: a model's file may be larger than the memory."""
    with _opened(url, headers, uri) as response, target.open("wb") as out:
        while chunk := response.read(CHUNK_BYTES):
            out.write(chunk)


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
