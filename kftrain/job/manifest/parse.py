"""Read and parse a YAML (or JSON) file a user gave, within bounds, as strictly as kubectl reads a manifest.

Every such file (job manifests, runtimes, CRDs, ``--params-file``, compiled pipelines) goes through
:func:`read_yaml_file` or :func:`read_text_file`: only a regular file, opened without blocking, at most
:attr:`Bound.max_bytes` of UTF-8. A document is untrusted: its size (:data:`MAX_MANIFEST_BYTES`), nesting
(:data:`MAX_DEPTH`, on the event stream) and node count with aliases expanded (:data:`MAX_EXPANDED_NODES`: no
"billion laughs") are bounded before anything is built; a repeated key or a key that is not a string is refused, as
kubectl does. Each refusal is a :class:`~kftrain.errors.JobSpecError` naming source, line and column.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kftrain.errors import JobSpecError

MAX_MANIFEST_BYTES = 3 * 1024 * 1024  # the API server's limit on a request body
MAX_DEPTH = 100  # a pod template nests about 15 levels; 100 leaves room for any real schema-less field
MAX_EXPANDED_NODES = 1_000_000  # every node counted as often as aliases repeat it


@dataclass(frozen=True)
class Bound:
    """What a file is (``what``, as its messages name it), the most bytes read of it, and why that many."""

    what: str
    max_bytes: int
    why: str


_API_SERVER = "the Kubernetes API server accepts for an object"
MANIFEST = Bound("manifest", MAX_MANIFEST_BYTES, _API_SERVER)
# Each runtime and CRD in a file is an object the API server is sent; a file of several stays under one's limit.
RUNTIMES = Bound("runtimes file", MAX_MANIFEST_BYTES, _API_SERVER)
CRDS = Bound("CRD file", MAX_MANIFEST_BYTES, _API_SERVER)
# A run's parameters are a few values: a manifest's bound is far more than any needs.
PARAMETERS = Bound("parameters file", MAX_MANIFEST_BYTES, "kftrain reads of one (a manifest's bound)")
# kubeflow/pipelines@2.17.0:backend/src/apiserver/common/const.go: MaxFileLength = 32 << 20, the most the KFP API
# server reads of an uploaded pipeline (server/util.go: loadFile).
PIPELINE = Bound("pipeline file", 32 << 20, "the KFP API server reads of a pipeline")

# What each kind of path is called when it is not a regular file (stat's S_IFMT).
_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# Opening never waits for a pipe's writer nor makes a terminal the controlling one.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)

_MERGE_TAG = "tag:yaml.org,2002:merge"
# libyaml's parser when PyYAML was built with it (it is, in the wheels): the same documents, ten times faster.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _where(mark: Any) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


class _StrictLoader(_BaseLoader):  # type: ignore[misc,valid-type]
    """SafeLoader that refuses repeated and non-string mapping keys, naming the line."""

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:  # an integer of 5000 digits, a date like 2024-13-45
            raise _KeyProblem(f"cannot read the value{_where(node.start_mark)}: {exc}") from None

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue  # "<<: *defaults": merged keys may be overridden, as YAML says
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise _KeyProblem(f"mapping key {key!r}{_where(key_node.start_mark)} is not a string; quote it")
            if key in seen:
                first = seen[key]
                raise _KeyProblem(
                    f"duplicate key {key!r}{_where(key_node.start_mark)} (first at line {first.line + 1}); "
                    "kubectl refuses it, and only the last value would count"
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


class _KeyProblem(Exception):
    """A key or value the loader refuses (raised inside PyYAML's constructor, turned into a JobSpecError)."""


def check_size(size: int, source: str, bound: Bound = MANIFEST) -> None:
    """Refuse a file of ``size`` bytes when it is over ``bound`` (by default a manifest's,
    :data:`MAX_MANIFEST_BYTES`)."""
    if size > bound.max_bytes:
        raise JobSpecError(
            source, f"the {bound.what} is {size} bytes, more than the {bound.max_bytes} bytes {bound.why}"
        )


def _check_regular(mode: int, source: str, bound: Bound) -> None:
    for test, called in _NOT_REGULAR:
        if test(mode):
            raise JobSpecError(source, f"cannot read {bound.what}: {called}, not a regular file")
    if not stat.S_ISREG(mode):
        raise JobSpecError(source, f"cannot read {bound.what}: not a regular file")


def read_text_file(path: str | Path, bound: Bound = MANIFEST, source: str | None = None) -> str:
    """The text of the regular file at ``path``: at most ``bound.max_bytes`` bytes of UTF-8. Every problem is a
    one-line :class:`JobSpecError` naming ``source`` (by default the path)."""
    source = str(path) if source is None else source
    try:
        # stat first: a device or a pipe is refused without being opened at all...
        _check_regular(os.stat(path).st_mode, source, bound)
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise JobSpecError(source, f"cannot read {bound.what}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        # ...and what was opened is checked again: the path may have been replaced by a pipe meanwhile.
        _check_regular(info.st_mode, source, bound)
        check_size(info.st_size, source, bound)  # before reading a byte of a huge file
        with open(fd, "rb", closefd=False) as handle:
            data = handle.read(bound.max_bytes + 1)  # a file that grew since: never more than the limit
    except OSError as exc:
        raise JobSpecError(source, f"cannot read {bound.what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return decode_manifest(data, source, bound)


def read_yaml_file(path: str | Path, bound: Bound = MANIFEST, source: str | None = None) -> list[Any]:
    """Every YAML (or JSON) document of the file at ``path``, read by :func:`read_text_file` and parsed by
    :func:`parse_yaml_documents`: the one way kftrain reads a YAML file a user gave."""
    source = str(path) if source is None else source
    return parse_yaml_documents(read_text_file(path, bound, source), source, bound)


def _check_events(text: str, source: str) -> None:
    """Nesting depth, on the event stream (iterative), before the recursive composer sees the text."""
    depth = 0
    for event in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise JobSpecError(source, f"nested more than {MAX_DEPTH} levels deep{_where(event.start_mark)}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _expanded_size(root: Node, source: str) -> int:
    """How many nodes ``root`` has with every alias expanded; a recursive alias is an error."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()

    def size(node: Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in in_progress:
            raise JobSpecError(source, f"recursive alias{_where(node.start_mark)}: an anchor refers to itself")
        in_progress.add(key)
        total = 1
        if isinstance(node, SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        in_progress.discard(key)
        sizes[key] = total
        if total > MAX_EXPANDED_NODES:
            raise JobSpecError(
                source,
                f"expands to more than {MAX_EXPANDED_NODES} nodes through its aliases (*name){_where(node.start_mark)}",
            )
        return total

    return size(root)


def parse_yaml(text: str, source: str = "<manifest>") -> Any:
    """The one YAML document in ``text``, parsed within the bounds above; every problem names ``source``."""
    docs = parse_yaml_documents(text, source)
    if len(docs) != 1:
        raise JobSpecError(source, f"expected exactly one YAML document, found {len(docs)}")
    return docs[0]


def parse_yaml_documents(text: str, source: str = "<manifest>", bound: Bound = MANIFEST) -> list[Any]:
    """Every YAML document in ``text`` (``---`` separated, as ``kubectl apply -f`` takes them), parsed within the bounds
    above (the size: ``bound``'s); an empty document (only comments) is skipped, as kubectl skips it."""
    check_size(len(text.encode("utf-8", errors="surrogatepass")), source, bound)
    try:
        _check_events(text, source)
        loader = _StrictLoader(text)
        try:
            docs = []
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    continue
                _expanded_size(node, source)
                if not (isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null"):
                    docs.append(loader.construct_document(node))
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise JobSpecError(source, f"malformed YAML{_where(mark)}: {' '.join(str(problem).split())}") from None
    except _KeyProblem as exc:
        raise JobSpecError(source, str(exc)) from None
    return docs


def decode_manifest(data: bytes, source: str, bound: Bound = MANIFEST) -> str:
    """``data`` as text: a manifest is UTF-8 (as kubectl reads it); anything else names the first bad byte."""
    check_size(len(data), source, bound)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise JobSpecError(
            source,
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} (offset {exc.start}: {exc.reason})",
        ) from None
