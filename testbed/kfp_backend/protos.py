"""The kfp-kubernetes platform proto of each supported backend, taken from the released ``kfp-kubernetes`` package.

Nothing is vendored or hand-copied: the released distribution (a wheel, or for 1.x the sdist: PyPI has no 1.x
wheel) is fetched once with pip into ``~/.cache/kftrain/kfp-kubernetes/<version>/`` (``KFTRAIN_CACHE_DIR``
moves the cache), and the serialized ``FileDescriptorProto`` its generated ``kubernetes_executor_config_pb2.py``
carries is read from that file's source (as a literal, never executed) into a descriptor pool of its own, so
two releases' messages live side by side and neither touches the installed ``kfp.kubernetes``. The proto
imports ``pipeline_spec.proto`` (for ``InputParameterSpec``) and ``google/protobuf/struct.proto``; both come
from the installed packages (``kfp-pipeline-spec``, ``protobuf``), whose ``InputParameterSpec`` has the same
fields at every supported backend.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory, struct_pb2
from kfp.pipeline_spec import pipeline_spec_pb2

PB2_PATH = "kfp/kubernetes/kubernetes_executor_config_pb2.py"
CONFIG_MESSAGE = "kfp_kubernetes.KubernetesExecutorConfig"


def cache_dir() -> Path:
    root = os.environ.get("KFTRAIN_CACHE_DIR") or str(Path.home() / ".cache" / "kftrain")
    return Path(root) / "kfp-kubernetes"


def distribution(version: str) -> Path:
    """The released kfp-kubernetes ``version`` (wheel or sdist), downloaded once with pip into the cache."""
    folder = cache_dir() / version
    found = sorted(p for p in folder.glob("kfp*kubernetes*") if p.suffix in (".whl", ".gz"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check"]
    command += ["--dest", str(folder), f"kfp-kubernetes=={version}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    found = sorted(p for p in folder.glob("kfp*kubernetes*") if p.suffix in (".whl", ".gz"))
    if result.returncode != 0 or not found:
        raise RuntimeError(
            f"cannot download kfp-kubernetes=={version} from the package index (needed for its platform proto):\n"
            f"{result.stderr.strip()[-2000:]}"
        )
    return found[0]


def generated_module_source(dist: Path) -> str:
    """The text of ``kubernetes_executor_config_pb2.py`` inside the distribution ``dist``."""
    if dist.suffix == ".whl":
        with zipfile.ZipFile(dist) as wheel:
            return wheel.read(PB2_PATH).decode()
    with tarfile.open(dist) as sdist:
        for member in sdist.getmembers():
            if member.name.endswith("/" + PB2_PATH):
                handle = sdist.extractfile(member)
                assert handle is not None
                return io.TextIOWrapper(handle, encoding="utf-8").read()
    raise RuntimeError(f"{dist}: no {PB2_PATH}")


def serialized_descriptor(source: str) -> bytes:
    """The bytes given to ``AddSerializedFile(...)`` in a generated ``_pb2.py``, read as a literal."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile" and node.args:
            value = ast.literal_eval(node.args[0])
            if isinstance(value, bytes):
                return value
    raise RuntimeError("no AddSerializedFile(b'...') call in the generated module")


@functools.cache
def config_class(version: str) -> Any:
    """``KubernetesExecutorConfig`` as kfp-kubernetes ``version`` defines it, in a descriptor pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    for dependency in (struct_pb2.DESCRIPTOR, pipeline_spec_pb2.DESCRIPTOR):
        _add_with_dependencies(pool, dependency, added)
    file_proto = descriptor_pb2.FileDescriptorProto.FromString(
        serialized_descriptor(generated_module_source(distribution(version)))
    )
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(CONFIG_MESSAGE))


def _add_with_dependencies(pool: descriptor_pool.DescriptorPool, file_descriptor: Any, added: set[str]) -> None:
    if file_descriptor.name in added:
        return
    for dependency in file_descriptor.dependencies:
        _add_with_dependencies(pool, dependency, added)
    proto = descriptor_pb2.FileDescriptorProto()
    file_descriptor.CopyToProto(proto)
    pool.Add(proto)
    added.add(file_descriptor.name)


def parse(version: str, config: dict[str, Any], *, strict: bool) -> Any:
    """``config`` (an executor's ``platforms.kubernetes`` entry, as JSON) as a message of ``version``'s proto.

    ``strict``: an unknown field is an error (Go's ``protojson.Unmarshal``); else it is dropped (``jsonpb``
    with ``AllowUnknownFields``).
    """
    return json_format.ParseDict(config, config_class(version)(), ignore_unknown_fields=not strict)


def dropped_fields(version: str, config: dict[str, Any]) -> list[str]:
    """The JSON paths of ``config`` that ``version``'s proto does not know (a lenient parse drops them)."""
    kept = json_format.MessageToDict(parse(version, config, strict=False), preserving_proto_field_name=False)
    return sorted(_paths(config) - _paths(kept))


def _paths(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        out = set()
        for key, item in value.items():
            out |= {f"{prefix}{key}"} | _paths(item, f"{prefix}{key}.")
        return out
    if isinstance(value, list):
        return set().union(*(_paths(item, prefix) for item in value)) if value else set()
    return set()


def known_fields(version: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with what ``version``'s proto does not know removed, as the driver sees it after a lenient parse."""
    return json_format.MessageToDict(parse(version, config, strict=False))
