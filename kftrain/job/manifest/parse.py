"""Parse a manifest a user gave as YAML, within bounds, as strictly as kubectl reads it.

A manifest is untrusted input: a few hundred bytes of nested aliases (a "billion laughs") expand to
billions of nodes, and thousands of nested brackets overflow a recursive parser. Before anything is
built from the text, this module bounds:

- the size (:data:`MAX_MANIFEST_BYTES`: the Kubernetes API server refuses larger requests anyway),
- the nesting depth (:data:`MAX_DEPTH`, checked on the event stream, which PyYAML parses without recursion),
- the node count once aliases are expanded (:data:`MAX_EXPANDED_NODES`; a recursive alias is refused),

and, as kubectl does, refuses a mapping that repeats a key (PyYAML would keep the last one silently) and
keys that are not strings (a manifest is JSON: its keys are strings). Every refusal is a
:class:`~kftrain.errors.JobSpecError` naming the source and, where there is one, the line and column.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kftrain.errors import JobSpecError

MAX_MANIFEST_BYTES = 3 * 1024 * 1024  # the API server's limit on a request body
MAX_DEPTH = 100  # a pod template nests about 15 levels; 100 leaves room for any real schema-less field
MAX_EXPANDED_NODES = 1_000_000  # every node counted as often as aliases repeat it

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


def check_size(size: int, source: str) -> None:
    """Refuse a manifest of ``size`` bytes when it is over :data:`MAX_MANIFEST_BYTES`."""
    if size > MAX_MANIFEST_BYTES:
        raise JobSpecError(
            source,
            f"the manifest is {size} bytes, more than the {MAX_MANIFEST_BYTES} bytes the Kubernetes API "
            "server accepts for an object",
        )


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


def parse_yaml_documents(text: str, source: str = "<manifest>") -> list[Any]:
    """Every YAML document in ``text`` (``---`` separated, as ``kubectl apply -f`` takes them), parsed within the bounds
    above; an empty document (only comments) is skipped, as kubectl skips it."""
    check_size(len(text.encode("utf-8", errors="surrogatepass")), source)
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


def decode_manifest(data: bytes, source: str) -> str:
    """``data`` as text: a manifest is UTF-8 (as kubectl reads it); anything else names the first bad byte."""
    check_size(len(data), source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise JobSpecError(
            source,
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} (offset {exc.start}: {exc.reason})",
        ) from None
