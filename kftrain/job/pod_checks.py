"""Kubernetes' own field rules, checked before anything is created: each function checks one kind of value as the
API server (or, for an image, the kubelet) would, and refuses it with a :class:`JobSpecError` naming the field and
saying what a valid value looks like; a value that may be a secret is never quoted (security contexts:
:mod:`.security_checks`; volumes: :mod:`.volume_checks`). Sources: ``kubernetes/apimachinery@v0.30.0:pkg/util/
validation/validation.go`` (names, labels, env names, keys) and ``pkg/api/resource/quantity.go`` (quantities);
``distribution/reference@v0.6.0:regexp.go`` (images); ``kubernetes/kubernetes@v1.36.3:pkg/apis/core/validation/
validation.go`` (ValidatePodSpec, ValidateTolerations, ValidateEnv, ValidateContainerResourceRequirements).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.model import EnvVar

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# apimachinery validation.go: qualifiedNameFmt, labelValueFmt, dns1123LabelFmt, dns1123SubdomainFmt, envVarNameFmt,
# configMapKeyFmt. Matched with fullmatch: "$" would also match before a trailing newline.
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
LABEL_MAX = 63
# What the API server appends to a generateName (apiserver's names.SimpleNameGenerator: 5 random characters).
GENERATED_NAME_SUFFIX = 5
SUBDOMAIN_MAX = 253
# quantity.go's grammar: <signedNumber><suffix>, a number being digits, digits.digits, digits. or .digits.
_QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?")
# distribution/reference regexp.go: a domain with an optional port, then path components, then :tag and @digest.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_IMAGE = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
IMAGE_NAME_MAX = 255
# quantity.go's suffixes, as the power of their base: binary (Ki = 2**10) and decimal (k = 10**3; n = 10**-9).
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# helper.IsStandardContainerResourceName: the resources a container may name without a domain (and hugepages-<size>).
STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
RESOURCE_SECTIONS = ("limits", "requests")
RESOURCE_FIELDS = (*RESOURCE_SECTIONS, "claims")  # claims: the pod's resourceClaims this container uses, by name
# validateEnvVarValueFrom: a valueFrom names exactly one source (fileKeyRef behind the EnvFiles gate).
ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")
TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def shown(value: Any) -> str:
    """``value`` quoted for a one-line message, shortened when long (never for a secret's value)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def integer(field: str, value: Any, *, low: int | None = None, high: int = INT64_MAX) -> int:
    """A whole number within [low, high]. KFP hands int parameters as numbers, and through JSON or a list as doubles:
    a whole float is the int it means."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobSpecError(field, f"expected an integer, got {type(value).__name__} {shown(value)}")
    if low is not None and value < low:
        raise JobSpecError(field, f"must be >= {low}, got {value}")
    if value > high:
        raise JobSpecError(field, f"must be at most {high}, got {value}")
    return value


def text(field: str, value: Any, *, secret: bool = False) -> str:
    """A string input; a number is taken as the string it means (KFP passes maps and lists as JSON, where ``5`` is a
    number and an int may arrive as ``5.0``). Anything else is refused, naming the input."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    what = type(value).__name__ if secret else f"{type(value).__name__} {shown(value)}"
    raise JobSpecError(field, f"expected a string, got {what}")


def quantity(field: str, value: Any) -> str:
    """A resource quantity (``2``, ``500m``, ``4Gi``, ``1e3``), not negative; empty: none."""
    given = text(field, value).strip()
    if given and not _QUANTITY.fullmatch(given):
        raise JobSpecError(field, f"{shown(value)} is not a Kubernetes quantity (e.g. 2, 500m, 4Gi)")
    if given.startswith("-") and given.strip("-0.") != "":
        raise JobSpecError(field, f"{shown(value)} must not be negative")
    return given


def dns1123_subdomain(field: str, value: Any) -> str:
    """An object's name (a secret, claim, service account, priority class...): a lower-case RFC 1123 subdomain."""
    name = text(field, value)
    if len(name) > SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.fullmatch(name):
        raise JobSpecError(
            field,
            f"{shown(name)} is not a valid name: lower-case letters, digits, '-' and '.', starting and ending with a "
            f"letter or digit, at most {SUBDOMAIN_MAX} characters",
        )
    return name


def name(field: str, value: Any) -> str:
    """An optional object name: empty, or a DNS subdomain."""
    given = text(field, value)
    return dns1123_subdomain(field, given) if given else given


def is_dns1123_label(value: str) -> bool:
    return len(value) <= LABEL_MAX and bool(_DNS1123_LABEL.fullmatch(value))


def qualified_name(field: str, value: Any) -> str:
    """A label key (also a toleration's key): an optional DNS-subdomain prefix and '/', then a name of at most 63
    alphanumerics, '-', '_' or '.' that starts and ends alphanumeric."""
    key = text(field, value)
    prefix, slash, rest = key.rpartition("/") if key.count("/") == 1 else ("", "", key)
    ok = key.count("/") <= 1 and 0 < len(rest) <= LABEL_MAX and bool(_QUALIFIED_NAME.fullmatch(rest))
    if slash and (not prefix or len(prefix) > SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        ok = False
    if not ok:
        raise JobSpecError(
            field,
            f"{shown(key)} is not a valid label key: [prefix/]name, the name at most {LABEL_MAX} letters, digits, "
            "'-', '_' or '.' starting and ending with a letter or digit, the prefix a DNS subdomain "
            "(e.g. nvidia.com/gpu.present)",
        )
    return key


def label_value(field: str, value: Any) -> str:
    """A label value: empty, or at most 63 letters, digits, '-', '_' or '.' starting and ending alphanumeric."""
    given = text(field, value)
    if given and (len(given) > LABEL_MAX or not _QUALIFIED_NAME.fullmatch(given)):
        raise JobSpecError(
            field,
            f"{shown(given)} is not a valid label value: at most {LABEL_MAX} letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit",
        )
    return given


def labels(field: str, value: Any) -> dict[str, str]:
    """A label map (a node selector): every key a qualified name, every value a label value."""
    out: dict[str, str] = {}
    for key, item in mapping(field, value).items():
        key = qualified_name(f"{field}.{key}" if isinstance(key, str) else field, key)
        out[key] = label_value(f"{field}.{key}", item)
    return out


def env_name(field: str, value: Any) -> str:
    """An environment variable name as the API server accepts it (IsEnvVarName): letters, digits, '_', '-', '.',
    not starting with a digit, and not '.', '..' or starting with '..'."""
    given = text(field, value)
    if not _ENV_NAME.fullmatch(given) or given in (".", "..") or given.startswith(".."):
        raise JobSpecError(
            field,
            f"{shown(given)} is not a valid variable name (letters, digits, '_', '-', '.'; not starting with a digit "
            "or '..')",
        )
    return given


def secret_key(field: str, value: str) -> str:
    """A key of a secret (IsConfigMapKey)."""
    if len(value) > SUBDOMAIN_MAX or not _CONFIG_KEY.fullmatch(value) or value in (".", "..") or value.startswith(".."):
        raise JobSpecError(field, "the key must be letters, digits, '-', '_' or '.' (not '..'), at most 253 characters")
    return value


def secret_ref(field: str, value: Any) -> tuple[str, str]:
    """``SECRET_NAME/KEY``: where a variable's value is read from. What was given may be a secret value by mistake,
    so no message quotes it."""
    ref = text(field, value, secret=True)
    secret, sep, key = ref.partition("/")
    if not sep or not secret or not key:
        raise JobSpecError(
            field,
            "must be SECRET_NAME/KEY, a reference to a key of a secret, never a literal value (the value given is "
            "not shown)",
        )
    if len(secret) > SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.fullmatch(secret):
        raise JobSpecError(
            field,
            "the secret's name (before '/') must be lower-case letters, digits, '-' and '.' (the value given is not "
            "shown)",
        )
    return secret, secret_key(field, key)


def mount_path(field: str, path: Any) -> str:
    """An absolute path, without ':' or '..' components; compared with others in its normal form."""
    given = text(field, path)
    if not given.startswith("/") or ":" in given or ".." in given.split("/"):
        raise JobSpecError(field, f"{shown(given)}: the mount path must be absolute, without ':' or '..'")
    return posixpath.normpath(given)


def image(field: str, value: Any) -> str:
    """An image reference the kubelet can pull: ``[registry[:port]/]path[:tag][@digest]``, lower-case path; empty:
    none given."""
    given = text(field, value)
    if not given:
        return given
    match = _IMAGE.fullmatch(given)
    if match is None:
        raise JobSpecError(
            field,
            f"{shown(given)} is not an image reference: [registry[:port]/]name[:tag][@digest], the name in lower "
            "case, no spaces (e.g. docker.io/kftrain/python-launch:0.1.0)",
        )
    if len(match.group("path")) + len(match.group("domain") or "") + 1 > IMAGE_NAME_MAX:
        raise JobSpecError(field, f"{shown(given)}: the repository name is over {IMAGE_NAME_MAX} characters")
    return given


def list_of(field: str, value: Any) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise JobSpecError(field, f"expected a list, got {type(value).__name__}")
    return list(value)


def mapping(field: str, value: Any) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise JobSpecError(field, f"expected a mapping, got {type(value).__name__}")
    return value


def string_map(field: str, value: Any, *, secret: bool = False) -> dict[str, str]:
    """A mapping of strings to strings (numbers taken as the strings they mean)."""
    return {text(field, k): text(f"{field}.{k}", v, secret=secret) for k, v in mapping(field, value).items()}


def toleration(field: str, value: Any) -> dict[str, Any]:
    """One toleration as ValidateTolerations checks it."""
    given = mapping(field, value)
    unknown = sorted(str(k) for k in given if k not in TOLERATION_FIELDS)
    if unknown:
        raise JobSpecError(f"{field}.{unknown[0]}", f"unknown field (known: {', '.join(TOLERATION_FIELDS)})")
    key = text(f"{field}.key", given.get("key") or "")
    operator = text(f"{field}.operator", given.get("operator") or "")
    value_ = text(f"{field}.value", given.get("value") or "")
    effect = text(f"{field}.effect", given.get("effect") or "")
    if key:
        qualified_name(f"{field}.key", key)
    if operator not in ("", *TOLERATION_OPERATORS):
        raise JobSpecError(f"{field}.operator", f"{shown(operator)} must be Exists or Equal")
    if not key and operator != "Exists":
        raise JobSpecError(f"{field}.operator", "must be Exists when the key is empty (which matches every taint)")
    if operator == "Exists" and value_:
        raise JobSpecError(f"{field}.value", "must be empty when the operator is Exists")
    if operator != "Exists":
        label_value(f"{field}.value", value_)
    if effect and effect not in TAINT_EFFECTS:
        raise JobSpecError(f"{field}.effect", f"{shown(effect)} must be NoSchedule, PreferNoSchedule or NoExecute")
    if given.get("tolerationSeconds") is not None:
        integer(f"{field}.tolerationSeconds", given["tolerationSeconds"], low=-INT64_MAX - 1)
        if effect != "NoExecute":
            raise JobSpecError(f"{field}.effect", "must be NoExecute when tolerationSeconds is set")
    return dict(given)


def tolerations(field: str, value: Any) -> list[dict[str, Any]]:
    """A list of tolerations, each as :func:`toleration` checks it."""
    return [toleration(f"{field}[{i}]", t) for i, t in enumerate(list_of(field, value))]


def env_source(field: str, value: Any) -> dict[str, Any]:
    """A variable's ``valueFrom`` as validateEnvVarValueFrom checks it: exactly one source; a secret's or a
    ConfigMap's name and key valid; a field's path and a resource named."""
    given = mapping(field, value)
    unknown = sorted(str(k) for k in given if k not in ENV_SOURCES)
    if unknown:
        raise JobSpecError(f"{field}.{unknown[0]}", f"unknown field (known: {', '.join(ENV_SOURCES)})")
    if len(given) != 1:
        raise JobSpecError(field, f"must name exactly one source ({', '.join(ENV_SOURCES)}), got {len(given)}")
    (source,) = given
    ref = mapping(f"{field}.{source}", given[source])
    required = {
        "secretKeyRef": "key",
        "configMapKeyRef": "key",
        "fieldRef": "fieldPath",
        "resourceFieldRef": "resource",
    }
    if source in required and not text(f"{field}.{source}.{required[source]}", ref.get(required[source]) or ""):
        raise JobSpecError(f"{field}.{source}.{required[source]}", "missing")
    if source in ("secretKeyRef", "configMapKeyRef"):
        dns1123_subdomain(f"{field}.{source}.name", ref.get("name") or "")
        secret_key(f"{field}.{source}.key", text(f"{field}.{source}.key", ref["key"]))
    return dict(given)


def quantity_value(value: str) -> Decimal:
    """The number a quantity (checked by :func:`quantity`) stands for: ``500m`` is 0.5, ``1Ki`` 1024, ``1e3`` 1000."""
    match = re.fullmatch(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(.*)", value)
    if match is None:
        raise ValueError(value)
    number, suffix = Decimal(match.group(1)), match.group(2)
    if suffix in _BINARY_SUFFIXES:
        return number * 2 ** _BINARY_SUFFIXES[suffix]
    if suffix in _DECIMAL_SUFFIXES:
        return number.scaleb(_DECIMAL_SUFFIXES[suffix])
    return number.scaleb(int(suffix[1:]))  # e<exponent>


def _native(resource: str) -> bool:
    """helper.IsNativeResource: no domain, or a kubernetes.io one."""
    return "/" not in resource or "kubernetes.io/" in resource


def _overcommit_allowed(resource: str) -> bool:
    """helper.IsOvercommitAllowed: a native resource other than hugepages (a GPU's request must equal its limit)."""
    return _native(resource) and not resource.startswith("hugepages-")


def resource_name(field: str, value: Any) -> str:
    """A container resource's name (validateContainerResourceName): cpu, memory, ephemeral-storage or hugepages-<size>
    without a domain; else a qualified name, and outside kubernetes.io an extended resource (IsExtendedResourceName:
    ``requests.<name>`` a qualified name too)."""
    given = text(field, value)
    if "/" not in given:
        if given not in STANDARD_CONTAINER_RESOURCES and not given.startswith("hugepages-"):
            raise JobSpecError(
                field,
                f"{shown(given)} must be a standard resource for containers "
                f"({', '.join(STANDARD_CONTAINER_RESOURCES)}, hugepages-<size>) or a domain-qualified one "
                "(e.g. nvidia.com/gpu)",
            )
        return given
    qualified_name(field, given)
    if not _native(given) and not given.startswith("requests."):
        qualified_name(field, f"requests.{given}")
    return given


def resources(field: str, value: Any) -> dict[str, Any]:
    """A container's ``resources`` as ValidateContainerResourceRequirements checks them: each value by
    :func:`resource_values`, then a request at most its limit, equal to it for a resource that cannot be overcommitted
    (a GPU, hugepages), and such a request needs a limit. The quantities come back as strings (KFP hands a number as
    a double)."""
    out = resource_values(field, value)
    limits = out.get("limits", {})
    for resource, amount in out.get("requests", {}).items():
        where = f"{field}.requests.{resource}"
        if resource not in limits:
            if not _overcommit_allowed(resource):
                raise JobSpecError(f"{field}.limits.{resource}", "Limit must be set for non overcommitable resources")
            continue
        requested, limit = quantity_value(amount), quantity_value(limits[resource])
        if requested != limit and not _overcommit_allowed(resource):
            raise JobSpecError(where, f"{amount} must be equal to {resource} limit of {limits[resource]}")
        if requested > limit:
            raise JobSpecError(where, f"{amount} must be less than or equal to {resource} limit of {limits[resource]}")
    return out


def resource_values(field: str, value: Any) -> dict[str, Any]:
    """The rules of :func:`resources` that hold for each value alone: ``limits`` and ``requests`` each a mapping of
    resource names to quantities (an extended resource's a whole number), ``claims`` a list of claims each named.
    Alone, for resources merged into others before they are used (a TrainJob's resourcesPerNode): how a request
    and its limit agree is for the merged whole."""
    given = mapping(field, value)
    unknown = sorted(str(k) for k in given if k not in RESOURCE_FIELDS)
    if unknown:
        raise JobSpecError(f"{field}.{unknown[0]}", f"unknown field (known: {', '.join(RESOURCE_FIELDS)})")
    out: dict[str, Any] = {}
    for i, claim in enumerate(list_of(f"{field}.claims", given.get("claims") or [])):
        if not text(f"{field}.claims[{i}].name", mapping(f"{field}.claims[{i}]", claim).get("name") or ""):
            raise JobSpecError(f"{field}.claims[{i}].name", "missing: the name of one of the pod's resourceClaims")
    if given.get("claims"):
        out["claims"] = [dict(claim) for claim in given["claims"]]
    for section in RESOURCE_SECTIONS:
        if given.get(section) is None:
            continue
        out[section] = {}
        for resource, amount in mapping(f"{field}.{section}", given[section]).items():
            where = f"{field}.{section}.{resource}"
            name_ = resource_name(where, resource)
            amount_ = quantity(where, amount)
            if not amount_:
                raise JobSpecError(where, "missing: a quantity (e.g. 2, 500m, 4Gi)")
            if not _native(name_) and quantity_value(amount_) % 1:
                raise JobSpecError(where, f"{shown(amount_)} must be an integer (an extended resource is counted)")
            out[section][name_] = amount_
    return out


def program(path: str, words: list[str] | None) -> None:
    """A command or args: no word holds a NUL."""
    for k, word in enumerate(words or []):
        if "\0" in word:
            raise JobSpecError(f"{path}[{k}]", "contains a NUL character, which no program argument can hold")


def env_var(path: str, var: EnvVar) -> None:
    """One variable: a name as the API server accepts it, no NUL in its value."""
    if not var.name:
        raise JobSpecError(f"{path}.name", "missing")
    env_name(f"{path}.name", var.name)
    if var.value is not None and "\0" in var.value:
        raise JobSpecError(f"{path}.value", f"{var.name}: contains a NUL character, which no variable can hold")
