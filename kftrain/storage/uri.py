"""URIs and the filesystems behind them: local paths, ``file://``, ``s3://``, ``minio://``, ``gs://``.

fsspec does the I/O (s3fs, gcsfs); ``minio://bucket/key`` (KFP's default root) is S3 at an endpoint of its own. The
endpoint: ``MINIO_ENDPOINT``, ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``; else, in a KFP task pod, KFP's launcher's
(:mod:`kftrain.storage.kfp_store`); else ``MINIO_SERVICE_SERVICE_HOST``/``_PORT``; else an error naming them.
Credentials never travel as arguments (they would land in specs and logs): ``AWS_*`` variables, else the secret
folder ``KFTRAIN_S3_CREDENTIALS_DIR`` (``accesskey``/``secretkey``), else KFP's store secret, else botocore's chain.
"""

from __future__ import annotations

import importlib
import os
import posixpath
import re
from pathlib import Path
from typing import Any

import fsspec

from kftrain.contract import CREDENTIALS_DIR_ENV, MOUNTED_CREDENTIALS_DIR
from kftrain.storage.errors import StorageError
from kftrain.storage.kfp_store import kfp_store

# The object stores that need an extra of the kftrain distribution: scheme -> (extra, the module it brings).
_EXTRA_OF_SCHEME = {"s3": ("s3", "s3fs"), "gs": ("gcs", "gcsfs")}


def split_uri(uri: str) -> tuple[str, str]:
    """``(scheme, path)`` with the scheme normalised: ``file`` for local paths, ``s3`` for minio:// and s3a://."""
    if "://" not in uri:
        return "file", os.path.abspath(uri)
    scheme, rest = uri.split("://", 1)
    if scheme in ("file", "local"):
        return "file", rest
    if scheme in ("minio", "s3a"):
        return "s3", rest
    return scheme, rest


def is_local(uri: str) -> bool:
    """Whether ``uri`` is on the local filesystem (a path, ``file://`` or ``local://``)."""
    return split_uri(uri)[0] == "file"


def join(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended: ``/`` for URIs with a scheme, the OS separator for local paths."""
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        return f"{scheme}://{posixpath.join(rest, *parts)}"
    return os.path.join(uri, *parts)


# What an object key of an output may not hold. fsspec reads ``* ? [ ]`` as a glob in copies and removals (an
# artifact published under ``qm?/ds`` landed under ``qm?/ds/dataset.json/dataset.json`` and could not be read
# back), s3fs reads ``?versionId=`` as a version, a URL parser (``urllib.parse``, what model servers' storage
# initializers use) ends the key at ``#``, and a control character has no place in a name shown in a log.
_UNSAFE_IN_KEYS = frozenset("*?[]#")


def check_output_uri(uri: str) -> str:
    """``uri`` when an output may be written there; else an error naming it and the character, before anything is
    written. Local paths hold any name; object keys hold none of :data:`_UNSAFE_IN_KEYS` nor control characters."""
    if is_local(uri):
        return uri
    _, path = split_uri(uri)
    bad = [c for c in path if c in _UNSAFE_IN_KEYS or ord(c) < 32 or ord(c) == 127]
    if bad:
        raise StorageError(
            f"{uri!r}: an output's object key cannot hold {bad[0]!r} (object stores' tools read * ? [ ] as "
            "patterns, ? as a query and # as a fragment, so it would be written or read elsewhere); rename it"
        )
    return uri


# The schemes a step reads: a local path, file:// (and local://), and the object stores fsspec opens here. Any
# other scheme fsspec knows (ftp://, http://, memory://) would be opened by a filesystem nothing configures.
INPUT_SCHEMES = ("file", "local", "s3", "s3a", "minio", "gs")
# A bound of ours on a URI's length, the longest path this machine opens: PATH_MAX (torvalds/linux@v6.6:
# include/uapi/linux/limits.h, 4096 "chars in a path name including nul"); an object URI longer is a mistake.
MAX_URI_CHARS = 4096


def _shown(uri: str) -> str:
    return repr(uri if len(uri) <= 120 else uri[:117] + "...")


def check_input_uri(uri: str, field: str) -> str:
    """``uri``, an input of ``field`` (``dataset_uri``), when a step can read it; else one error naming the field
    and the URI, before anything is done. Checked once, where the URI enters a step; it then travels as written."""
    shown = f"{field} {_shown(uri)}"
    if len(uri) > MAX_URI_CHARS:
        raise StorageError(f"{shown}: longer than {MAX_URI_CHARS} characters ({len(uri)}): not a path or object URI")
    if any(ord(c) < 32 or ord(c) == 127 for c in uri):
        raise StorageError(f"{shown}: a control character (a newline, a tab) has no place in a URI; remove it")
    if "://" not in uri:
        return uri  # a local path
    scheme, rest = uri.split("://", 1)
    if scheme not in INPUT_SCHEMES:
        supported = ", ".join(f"{s}://" for s in INPUT_SCHEMES if s != "local")
        raise StorageError(f"{shown}: {scheme}:// is not supported (local paths, {supported})")
    if scheme in ("file", "local"):
        if not rest:
            raise StorageError(f"{shown}: no path after {scheme}://")
        return uri
    if not rest.split("/", 1)[0]:
        raise StorageError(f"{shown}: no bucket after {scheme}:// (give {scheme}://bucket/path)")
    return uri


def derived_uri(uri: str, suffix: str) -> str:
    """``<uri>-<suffix>``: an output kept beside ``uri`` and named after it (its logs, TensorBoard files,
    checkpoints), checked by :func:`check_output_uri`.

    ``uri`` must name an object path inside its bucket, or a local folder other than the root: ``s3://bkt/``
    would put the sibling in another bucket (``s3://bkt-logs``) and ``/`` in the current folder (``-logs``)."""
    if not uri.strip():
        raise StorageError(f"no URI: an empty one has no {suffix} to keep beside it")
    scheme, path = split_uri(uri)
    if scheme == "file":
        if not os.path.abspath(path).strip("/"):
            raise StorageError(f"{uri!r}: the root folder has no sibling to keep its {suffix} in; give a folder")
        written = uri.rstrip("/")
        if posixpath.basename(written.split("://", 1)[-1]) in ("", ".", ".."):  # "." is a folder with a name
            written = (uri.split("://", 1)[0] + "://" if "://" in uri else "") + os.path.abspath(path)
        return f"{written}-{suffix}"
    bucket_and_key = path.strip("/")
    if "/" not in bucket_and_key:
        raise StorageError(
            f"{uri!r}: names a bucket, not a path inside it: its {suffix} would be written to another bucket "
            f"({uri.split('://', 1)[0]}://{bucket_and_key}-{suffix}); give a path such as "
            f"{uri.split('://', 1)[0]}://{bucket_and_key or 'bucket'}/models/run"
        )
    return check_output_uri(f"{uri.rstrip('/')}-{suffix}")


def local_path(uri: str) -> Path:
    """The local path of a local URI (for libraries that only take paths)."""
    scheme, path = split_uri(uri)
    if scheme != "file":
        raise StorageError(f"{uri}: not a local path")
    return Path(path)


def _with_scheme(endpoint: str) -> str:
    # In-cluster MinIO (KFP's default) is plain HTTP; endpoints from env often come without a scheme.
    return endpoint if "://" in endpoint else "http://" + endpoint


def s3_endpoint(uri: str) -> str | None:
    """The S3 endpoint URL that ``uri`` resolves to, or None for AWS's default.

    An endpoint in the environment wins (``s3://``: ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``,
    ``MINIO_ENDPOINT``; ``minio://`` prefers ``MINIO_ENDPOINT``); then, in a KFP task pod, KFP's store
    configuration; then, for ``minio://``, KFP's in-namespace service variables. ``minio://`` has no AWS default.
    """
    env = os.environ
    scheme = uri.split("://", 1)[0] if "://" in uri else "file"
    if scheme == "minio":
        explicit = [env.get("MINIO_ENDPOINT"), env.get("AWS_ENDPOINT_URL_S3"), env.get("AWS_ENDPOINT_URL")]
    else:
        explicit = [env.get("AWS_ENDPOINT_URL_S3"), env.get("AWS_ENDPOINT_URL"), env.get("MINIO_ENDPOINT")]
    for candidate in explicit:
        if candidate:
            return _with_scheme(candidate)
    store = kfp_store(uri) if scheme in ("minio", "s3") else None
    if store is not None and store.session.endpoint_url:
        return store.session.endpoint_url
    if scheme != "minio":
        return None
    host = env.get("MINIO_SERVICE_SERVICE_HOST")
    if host:
        return _with_scheme(f"{host}:{env.get('MINIO_SERVICE_SERVICE_PORT') or '9000'}")
    raise StorageError(
        f"{uri}: no MinIO endpoint; set MINIO_ENDPOINT (or AWS_ENDPOINT_URL, or "
        "MINIO_SERVICE_SERVICE_HOST/MINIO_SERVICE_SERVICE_PORT as KFP does in-cluster); in a KFP task pod it "
        "comes from the kfp-launcher ConfigMap"
    )


def _s3_credentials(uri: str) -> dict[str, str]:
    """key/secret/token for s3fs, from the environment or a mounted secret; empty means botocore's chain."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        creds = {"key": env["AWS_ACCESS_KEY_ID"], "secret": env["AWS_SECRET_ACCESS_KEY"]}
        if env.get("AWS_SESSION_TOKEN"):
            creds["token"] = env["AWS_SESSION_TOKEN"]
        return creds
    secret_dir = env.get(CREDENTIALS_DIR_ENV) or (
        MOUNTED_CREDENTIALS_DIR if os.path.isfile(os.path.join(MOUNTED_CREDENTIALS_DIR, "accesskey")) else None
    )
    if secret_dir:
        files = {"key": "accesskey", "secret": "secretkey", "token": "sessiontoken"}
        creds = {}
        for option, name in files.items():
            path = os.path.join(secret_dir, name)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as handle:
                    creds[option] = handle.read().strip()  # secrets mounted from YAML often end in a newline
        if "key" not in creds or "secret" not in creds:
            raise StorageError(
                f"{uri}: the credentials folder {secret_dir} must contain the files accesskey and secretkey"
            )
        return creds
    store = kfp_store(uri) if uri.split("://", 1)[0] in ("minio", "s3") else None
    return dict((store.credentials() if store is not None else None) or {})


def _addressing_style(uri: str) -> str | None:
    """botocore's ``addressing_style`` for ``uri`` in KFP's store (its ``forcePathStyle``), if it is KFP's store."""
    if any(os.environ.get(name) for name in ("MINIO_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")):
        return None  # another endpoint is not KFP's store
    store = kfp_store(uri) if uri.split("://", 1)[0] in ("minio", "s3") else None
    if store is None:
        return None
    return "path" if store.session.force_path_style else "virtual"


def _region(uri: str) -> str | None:
    """The region KFP's store configuration gives ``uri`` (some S3-compatible stores check it), if any."""
    explicit = ("AWS_REGION", "AWS_DEFAULT_REGION", "MINIO_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
    if any(os.environ.get(name) for name in explicit):
        return None  # botocore reads the environment's own region; another endpoint is not KFP's store
    store = kfp_store(uri) if uri.split("://", 1)[0] in ("minio", "s3") else None
    return (store.session.region or None) if store is not None else None


# Every request has both timeouts: an endpoint that accepts connections and never answers fails a request in
# READ_TIMEOUT_S, tried AWS_MAX_ATTEMPTS times by botocore and no more (kftrain.storage.errors.timed_out), so a
# silent store is an error in about 3 minutes, not hours. 60 s is botocore's own default read timeout: time
# for the server to answer once the request was sent, whatever the part's size.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
# s3fs's own retry loop around every call: 1 means none. botocore below and kftrain.storage.errors.with_retry
# above already retry the same faults; three layers multiplied each other (5 x 3 x 6 tries of a silent request).
S3FS_TRIES = 1


# What botocore takes for its retry variables (boto/botocore@1.43.117:botocore/configprovider.py reads
# AWS_MAX_ATTEMPTS with int(); botocore/config.py _validate_retry_configuration: total attempts at least 1, the
# modes below); a value it cannot read is named here, not raised as a ValueError from inside a client.
# AWS_MAX_ATTEMPTS counts every attempt, the first included: botocore/args.py _compute_retry_max_attempts maps it to
# the Config's ``total_max_attempts``, and a Config's ``max_attempts`` to retries after the first (value + 1).
_RETRY_MODES = ("legacy", "standard", "adaptive")
_WHOLE_NUMBER = re.compile(r"[0-9]+")
DEFAULT_MAX_ATTEMPTS = 3  # attempts in all, as botocore's standard mode counts them (retries/standard.py)


def _botocore_config() -> dict[str, Any]:
    """botocore's own per-request retries: "standard" mode retries 500/503/SlowDown and connection errors.

    The standard AWS_MAX_ATTEMPTS/AWS_RETRY_MODE variables still apply (an explicit Config would otherwise
    override them), so operators and tests can tune the inner layer without code changes.
    """
    attempts = os.environ.get("AWS_MAX_ATTEMPTS") or str(DEFAULT_MAX_ATTEMPTS)
    if not _WHOLE_NUMBER.fullmatch(attempts.strip()) or int(attempts) < 1:  # not isdigit(): "³" is a digit to it
        raise StorageError(f"AWS_MAX_ATTEMPTS: {attempts[:40]!r} is not a whole number of at least 1")
    mode = os.environ.get("AWS_RETRY_MODE") or "standard"
    if mode not in _RETRY_MODES:
        raise StorageError(f"AWS_RETRY_MODE: {mode[:40]!r} is not one of {', '.join(_RETRY_MODES)}")
    return {
        "retries": {"total_max_attempts": int(attempts), "mode": mode},
        "connect_timeout": CONNECT_TIMEOUT_S,
        "read_timeout": READ_TIMEOUT_S,
    }


def filesystem(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and in-filesystem path for ``uri``."""
    scheme, path = split_uri(uri)
    options: dict[str, Any] = {}
    if scheme == "s3":
        endpoint = s3_endpoint(uri)
        client_kwargs: dict[str, Any] = {"endpoint_url": endpoint} if endpoint else {}
        region = _region(uri)
        if region:
            client_kwargs["region_name"] = region
        if client_kwargs:
            options["client_kwargs"] = client_kwargs
        options.update(_s3_credentials(uri))
        options["config_kwargs"] = _botocore_config()
        style = _addressing_style(uri)
        if style:
            options["config_kwargs"]["s3"] = {"addressing_style": style}
        # Markers are written by other processes (other pods); a cached listing would hide them.
        options["use_listings_cache"] = False
    extra = _EXTRA_OF_SCHEME.get(scheme)
    if extra is not None:
        try:
            # Only to turn a missing package into a message naming the extra that installs it.
            importlib.import_module(extra[1])
        except ModuleNotFoundError:
            raise StorageError(
                f"{uri}: {scheme}:// needs the {extra[1]} package: pip install 'kftrain[{extra[0]}]'"
            ) from None
    try:
        fs = fsspec.filesystem(scheme, **options)
    except (ImportError, ValueError) as exc:
        raise StorageError(f"{uri}: no filesystem for {scheme}:// ({exc})") from None
    if scheme == "s3":
        fs.retries = S3FS_TRIES  # a class attribute s3fs reads per call; it takes no argument for it
    return fs, path
