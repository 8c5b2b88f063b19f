"""What kube-apiserver does to a custom resource it is asked to store, and which field selectors it serves: the
fake API server's rules, each from kube-apiserver 1.36.3's code (tests/controlplane/test_fake_api_server.py sends
the same requests to both servers and compares the answers).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

from kftrain.job.manifest.schema import CRDVersion

# apimachinery@v0.36.3:pkg/util/validation/validation.go (IsDNS1123Subdomain): what a custom resource's name must
# be (apiextensions-apiserver@v0.36.3:pkg/registry/customresource/validator.go, NameIsDNSSubdomain).
_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
DNS1123_SUBDOMAIN_MAX = 253
DNS1123_SUBDOMAIN_WHY = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character"
)

# The fields each resource can be selected on (kubernetes@v1.36.3:pkg/apis/core/v1/conversion.go,
# AddFieldLabelConversionsForPod and ...ForEvent; a custom resource: metadata.name and metadata.namespace, plus its
# CRD's selectableFields, which none of the operators' CRDs has). Any other field: 400, "field label not supported".
FIELD_LABELS: dict[str, frozenset[str]] = {
    "pods": frozenset(
        {
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        }
    ),
    "events": frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name",
        }
    ),
}
CUSTOM_RESOURCE_FIELD_LABELS = frozenset({"metadata.name", "metadata.namespace"})


def unsupported_field(plural: str, fields: Iterable[str]) -> str | None:
    """The first field of a field selector that ``plural`` cannot be selected on, or None."""
    known = FIELD_LABELS.get(plural, CUSTOM_RESOURCE_FIELD_LABELS)
    return next((f for f in fields if f not in known), None)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a custom resource, or None."""
    if len(name) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
    if not DNS1123_SUBDOMAIN.fullmatch(name):
        return DNS1123_SUBDOMAIN_WHY
    return None


_META_FIELDS = ("apiVersion", "kind", "metadata")


def pruned(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the custom resource ``obj`` without the fields its structural ``schema`` does not specify, as the
    API server drops them before it stores the object (apiextensions-apiserver@v0.36.3:pkg/apiserver/schema/pruning/
    algorithm.go: the root is an embedded resource, so its apiVersion, kind and metadata stay; a node with
    x-kubernetes-preserve-unknown-fields keeps its unknown fields, and its known ones are pruned by their schemas)."""
    out = copy.deepcopy(dict(obj))
    _prune(out, schema, embedded=True)
    return out


def _prune(value: Any, schema: Mapping[str, Any] | None, *, embedded: bool = False) -> None:
    if schema is not None and schema.get("x-kubernetes-preserve-unknown-fields"):
        _prune_known(value, schema)
        return
    embedded = embedded or bool(schema and schema.get("x-kubernetes-embedded-resource"))
    if isinstance(value, dict):
        props = (schema or {}).get("properties") or {}
        extra = (schema or {}).get("additionalProperties")
        for key in list(value):
            if embedded and key in _META_FIELDS:
                continue
            if key in props:
                _prune(value[key], props[key])
            elif isinstance(extra, Mapping):
                _prune(value[key], extra)
            else:
                del value[key]
    elif isinstance(value, list):
        for item in value:
            _prune(item, (schema or {}).get("items"))


def _prune_known(value: Any, schema: Mapping[str, Any]) -> None:
    """skipPrune: under x-kubernetes-preserve-unknown-fields, only what the schema names is pruned."""
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if embedded and key in _META_FIELDS:
                continue
            if key in props:
                _prune(item, props[key])
            elif isinstance(extra, Mapping):
                _prune(item, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _prune_known(item, schema["items"])


def prepared_for_create(obj: dict[str, Any], crd: CRDVersion) -> dict[str, Any]:
    """The object as stored by a create: pruned, and without a status when status is a subresource
    (apiextensions-apiserver@v0.36.3:pkg/registry/customresource/strategy.go, PrepareForCreate)."""
    out = pruned(obj, crd.schema)
    if crd.status_subresource:
        out.pop("status", None)
    out.setdefault("metadata", {})["generation"] = 1
    return out


def prepared_for_update(new: dict[str, Any], old: Mapping[str, Any], crd: CRDVersion) -> dict[str, Any]:
    """The object as stored by an update or a patch of the object itself: pruned; its status the old one when status
    is a subresource; its generation one more when anything but its metadata changed (strategy.go,
    PrepareForUpdate)."""
    out = pruned(new, crd.schema)
    if crd.status_subresource:
        if "status" in old:
            out["status"] = copy.deepcopy(old["status"])
        else:
            out.pop("status", None)
    generation = (old.get("metadata") or {}).get("generation", 1)
    changed = {k: v for k, v in out.items() if k != "metadata"} != {k: v for k, v in old.items() if k != "metadata"}
    out.setdefault("metadata", {})["generation"] = generation + 1 if changed else generation
    return out
