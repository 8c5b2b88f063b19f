"""A pod's ``affinity`` as the API server checks it, before anything is created: the rules of
``kubernetes/kubernetes@v1.36.3:pkg/apis/core/validation/validation.go`` (validateAffinity and the node selector,
preferred-term and pod affinity term checks below it) and, for label selectors,
``kubernetes/apimachinery@v0.30.0:pkg/apis/meta/v1/validation/validation.go`` (ValidateLabelSelector). A field the API
does not have is refused too: a misspelt ``nodeAfinity`` would otherwise be dropped and the pod placed anywhere. Each
function raises a :class:`~kftrain.errors.JobSpecError` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job import pod_checks as check

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# validateNodeFieldSelectorRequirement: nodeFieldSelectorValidators has one key.
NODE_FIELD_KEYS = ("metadata.name",)
WEIGHT_RANGE = (1, 100)


def _fields(field: str, value: Any, known: Sequence[str]) -> Mapping[str, Any]:
    """``value``, a mapping of only the ``known`` fields."""
    given = check.mapping(field, value)
    unknown = sorted(str(k) for k in given if k not in known)
    if unknown:
        raise JobSpecError(f"{field}.{unknown[0]}", f"unknown field (known: {', '.join(known)})")
    return given


def _strings(field: str, value: Any) -> list[str]:
    return [check.text(f"{field}[{i}]", v) for i, v in enumerate(check.list_of(field, value or []))]


def _weight(field: str, value: Any) -> None:
    low, high = WEIGHT_RANGE
    weight = check.integer(field, value if value is not None else 0)
    if not low <= weight <= high:
        raise JobSpecError(field, f"must be in the range {low}-{high}, got {weight}")


def _preferred(field: str, given: Mapping[str, Any], term_key: str, check_term: Callable[[str, Any], None]) -> None:
    """The weighted terms under ``preferredDuringScheduling...``: each a weight and its ``term_key`` term."""
    for i, weighted in enumerate(check.list_of(f"{field}.{PREFERRED}", given.get(PREFERRED) or [])):
        where = f"{field}.{PREFERRED}[{i}]"
        term = _fields(where, weighted, ("weight", term_key))
        _weight(f"{where}.weight", term.get("weight"))
        check_term(f"{where}.{term_key}", term.get(term_key) or {})


def affinity(field: str, value: Any) -> dict[str, Any]:
    """A pod's ``affinity``: node affinity, pod affinity and pod anti-affinity, each as the API server checks it."""
    given = _fields(field, value, ("nodeAffinity", "podAffinity", "podAntiAffinity"))
    if given.get("nodeAffinity") is not None:
        _node_affinity(f"{field}.nodeAffinity", given["nodeAffinity"])
    for part in ("podAffinity", "podAntiAffinity"):
        if given.get(part) is not None:
            _pod_affinity(f"{field}.{part}", given[part])
    return dict(given)


def _node_affinity(field: str, value: Any) -> None:
    given = _fields(field, value, (REQUIRED, PREFERRED))
    if given.get(REQUIRED) is not None:
        selector = _fields(f"{field}.{REQUIRED}", given[REQUIRED], ("nodeSelectorTerms",))
        terms = check.list_of(f"{field}.{REQUIRED}.nodeSelectorTerms", selector.get("nodeSelectorTerms") or [])
        if not terms:
            raise JobSpecError(f"{field}.{REQUIRED}.nodeSelectorTerms", "must have at least one node selector term")
        for i, term in enumerate(terms):
            _node_selector_term(f"{field}.{REQUIRED}.nodeSelectorTerms[{i}]", term)
    _preferred(field, given, "preference", _node_selector_term)


def _node_selector_term(field: str, value: Any) -> None:
    given = _fields(field, value, ("matchExpressions", "matchFields"))
    for j, requirement in enumerate(check.list_of(f"{field}.matchExpressions", given.get("matchExpressions") or [])):
        _requirement(f"{field}.matchExpressions[{j}]", requirement, NODE_SELECTOR_OPERATORS)
    for j, requirement in enumerate(check.list_of(f"{field}.matchFields", given.get("matchFields") or [])):
        where = f"{field}.matchFields[{j}]"
        req = _fields(where, requirement, ("key", "operator", "values"))
        if req.get("operator") not in ("In", "NotIn"):
            raise JobSpecError(
                f"{where}.operator", f"{check.shown(req.get('operator'))} is not a valid selector operator"
            )
        if len(_strings(f"{where}.values", req.get("values"))) != 1:
            raise JobSpecError(
                f"{where}.values", "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"
            )
        if req.get("key") not in NODE_FIELD_KEYS:
            raise JobSpecError(f"{where}.key", f"{check.shown(req.get('key'))} is not a valid field selector key")


def _requirement(field: str, value: Any, operators: Sequence[str]) -> None:
    """A node selector's or a label selector's requirement: a label key, an operator, the values it takes."""
    given = _fields(field, value, ("key", "operator", "values"))
    check.qualified_name(f"{field}.key", given.get("key") or "")
    operator = given.get("operator")
    values = _strings(f"{field}.values", given.get("values"))
    if operator in ("In", "NotIn") and not values:
        raise JobSpecError(f"{field}.values", "must be specified when `operator` is 'In' or 'NotIn'")
    if operator in ("Exists", "DoesNotExist") and values:
        raise JobSpecError(f"{field}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
    if operator in ("Gt", "Lt") and len(values) != 1:
        raise JobSpecError(f"{field}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'")
    if operator not in operators:
        raise JobSpecError(
            f"{field}.operator", f"{check.shown(operator)} is not a valid selector operator ({', '.join(operators)})"
        )
    for i, item in enumerate(values):  # a node's or a pod's label value is all a value can match
        check.label_value(f"{field}.values[{i}]", item)


def _label_selector(field: str, value: Any) -> None:
    given = _fields(field, value, ("matchLabels", "matchExpressions"))
    if given.get("matchLabels") is not None:
        check.labels(f"{field}.matchLabels", given["matchLabels"])
    for j, requirement in enumerate(check.list_of(f"{field}.matchExpressions", given.get("matchExpressions") or [])):
        _requirement(f"{field}.matchExpressions[{j}]", requirement, LABEL_SELECTOR_OPERATORS)


def _pod_affinity(field: str, value: Any) -> None:
    given = _fields(field, value, (REQUIRED, PREFERRED))
    for i, term in enumerate(check.list_of(f"{field}.{REQUIRED}", given.get(REQUIRED) or [])):
        _pod_affinity_term(f"{field}.{REQUIRED}[{i}]", term)
    _preferred(field, given, "podAffinityTerm", _pod_affinity_term)


def _pod_affinity_term(field: str, value: Any) -> None:
    known = ("labelSelector", "namespaceSelector", "namespaces", "topologyKey", "matchLabelKeys", "mismatchLabelKeys")
    given = _fields(field, value, known)
    for part in ("labelSelector", "namespaceSelector"):
        if given.get(part) is not None:
            _label_selector(f"{field}.{part}", given[part])
    for i, namespace in enumerate(_strings(f"{field}.namespaces", given.get("namespaces"))):
        if not check.is_dns1123_label(namespace):
            raise JobSpecError(f"{field}.namespaces[{i}]", f"{check.shown(namespace)} is not a valid namespace name")
    keys = {}
    for part in ("matchLabelKeys", "mismatchLabelKeys"):
        keys[part] = _strings(f"{field}.{part}", given.get(part))
        if keys[part] and given.get("labelSelector") is None:
            raise JobSpecError(f"{field}.{part}", "must not be specified when labelSelector is not set")
        for i, key in enumerate(keys[part]):
            check.qualified_name(f"{field}.{part}[{i}]", key)
    both = sorted(set(keys["matchLabelKeys"]) & set(keys["mismatchLabelKeys"]))
    if both:
        raise JobSpecError(
            f"{field}.matchLabelKeys", f"{both[0]!r} exists in both matchLabelKeys and mismatchLabelKeys"
        )
    topology_key = check.text(f"{field}.topologyKey", given.get("topologyKey") or "")
    if not topology_key:
        raise JobSpecError(f"{field}.topologyKey", "can not be empty (e.g. kubernetes.io/hostname)")
    check.qualified_name(f"{field}.topologyKey", topology_key)
