"""The CRDs' CEL rules and bounds (kftrain/job/manifest/schema.py, cel.py; kftrain/job/kinds/trainjob/bounds.py): an
8 KiB aliased runtime with ``--crd-dir`` (the cost budget), a CRD rule that does not parse, a TrainJob with 400,001
args, a storageUri of "hf://", error lines that would echo a 2 MB input, and the ``--crd-dir`` folder itself.

Setups from tests/job/manifest/test_cel_budget.py (``runtime_bomb``, ``widget_crd``, ``alias_bomb``, ``BOMBS``,
``trainjob_crd_with_rule``, ``BROKEN_RULES``, ``HUGE_VALUES``) and tests/job/kinds/trainjob/test_trainjob_crd_bounds.py
(``REFUSED``), taken by name when the case runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from testbed.hostile.case import CLEAR, FINE, Case, Refused, Sandbox

AREA = "cel"
NEEDS = ("celpy", "crds")


def _budget() -> Any:
    from tests.job.manifest import test_cel_budget

    return test_cel_budget


def _bounds() -> Any:
    from tests.job.kinds.trainjob import test_trainjob_crd_bounds

    return test_trainjob_crd_bounds


def _crd_dir() -> Path:
    from testbed.reference import CRD_DIR

    return CRD_DIR


def _validate(sb: Sandbox, manifest: dict[str, Any] | str, *, crds: bool, as_yaml: bool = False) -> int:
    """``kftrain validate`` of ``manifest``, written as JSON (YAML, and compact), or as YAML where a key is over the
    1,024 characters a YAML reader takes for a key in JSON's flow style."""
    if isinstance(manifest, str):
        text = manifest
    else:
        text = yaml.safe_dump(manifest, width=1 << 30) if as_yaml else json.dumps(manifest)
    path = sb.write("job.yaml", text)
    return sb.cli("validate", "-f", path, *(["--crd-dir", str(_crd_dir())] if crds else []))


def _aliased_runtime(targets: int, names: int) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        budget = _budget()
        return _validate(sb, budget.TRAINJOB_ON_RT + "---\n" + budget.runtime_bomb(targets, names), crds=True)

    return run


def _widget_bomb(key: str) -> Callable[[Sandbox], None]:
    """A CRD of the test's own whose rule runs on every item of a few KB that expand to hundreds of thousands."""

    def run(sb: Sandbox) -> None:
        from kftrain.job.manifest.parse import parse_yaml_documents

        budget = _budget()
        rule, items, names, name, _ = next(b[1:] for b in budget.BOMBS if b[0] == key)
        schemas = budget.widget_crd(sb.work / "crds", rule)
        sb.ready()
        errors = schemas.errors(parse_yaml_documents(budget.alias_bomb(items, names, name))[0])
        if errors:
            raise Refused(f"{len(errors)} error(s): {errors[0]}")

    return run


def _exists_stops(sb: Sandbox) -> None:
    from kftrain.job.manifest.parse import parse_yaml_documents

    budget = _budget()
    schemas = budget.widget_crd(sb.work / "crds", "self.names.exists(n, n == 'a')")
    sb.ready()
    errors = schemas.errors(parse_yaml_documents(budget.alias_bomb(900, 900, "a"))[0])
    if errors:
        raise Refused(errors[0])


def _huge_name(sb: Sandbox) -> None:
    """A 2 MB name: matches() costs more than the 1,000,000 one evaluation may (the API server's per-call limit)."""
    from kftrain.job.manifest.schema import CRDSchemas

    schemas = CRDSchemas.from_dir(_crd_dir())
    sb.ready()
    schemas.validate({**_bounds().TRAINJOB, "metadata": {"name": "a" * 2 * 1024 * 1024}})


def _broken_rule(key: str) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        where, _, rule, _ = next(b[1:] for b in _budget().BROKEN_RULES if b[0] == key)
        crd = _budget().trainjob_crd_with_rule(sb.work / "crds", where, rule)
        path = sb.write("job.yaml", json.dumps(_bounds().TRAINJOB))
        return sb.cli("validate", "-f", path, "--crd-dir", crd.parent)

    return run


def _refused(key: str, crds: bool) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        manifest = next(r[1] for r in _bounds().REFUSED if r[0] == key)
        return _validate(sb, manifest, crds=crds)

    return run


def _huge(key: str) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        budget = _budget()
        manifest = next(h[1] for h in [*budget.HUGE_VALUES, *budget.HUGE_WITHOUT_CRDS] if h[0] == key)
        return _validate(sb, manifest, crds=True, as_yaml=True)

    return run


def _example(kind: str) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        from testbed import REPO_ROOT

        return sb.cli("validate", "-f", REPO_ROOT / "examples" / "manifests" / f"{kind}.yaml", "--crd-dir", _crd_dir())

    return run


def _crd_folder(make: Callable[[Sandbox], Path]) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        folder = make(sb)
        path = sb.write("job.yaml", json.dumps(_bounds().TRAINJOB))
        return sb.cli("validate", "-f", path, "--crd-dir", folder)

    return run


def _with_fifo(sb: Sandbox) -> Path:
    (sb.work / "crds").mkdir()
    os.mkfifo(sb.work / "crds" / "pipe.yaml")
    return sb.work / "crds"


def _with_bomb(sb: Sandbox) -> Path:
    levels = ["a0: &a0 [" + ", ".join(["x"] * 50) + "]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 50) + "]" for i in range(1, 9)]
    sb.write("crds/bomb.yaml", "".join(f"{line}\n" for line in levels))
    return sb.work / "crds"


def _case(name: str, expect: str, surface: str, run: Callable[[Sandbox], int | None], *names: str, **kw: Any) -> Case:
    return Case(AREA, name, expect, surface, run, names=names, needs=kw.pop("needs", NEEDS), **kw)


VALIDATE_CRDS = "kftrain validate -f FILE --crd-dir DIR"
CASES: list[Case] = [
    _case(
        "an 8 KiB aliased runtime (--crd-dir)",
        CLEAR,
        VALIDATE_CRDS,
        _aliased_runtime(900, 900),
        "envInjection.targets",
        timeout_s=90,
    ),
    _case(
        "a rule out of the cost budget",
        CLEAR,
        "CRDSchemas.errors",
        _widget_bomb("out of budget"),
        "spec.items[",
        timeout_s=120,
    ),
    _case(
        "a rule too costly to evaluate here",
        CLEAR,
        "CRDSchemas.errors",
        _widget_bomb("too costly here"),
        "spec.items[",
        timeout_s=120,
    ),
    _case("exists() stops at its first match", FINE, "CRDSchemas.errors", _exists_stops, timeout_s=120),
    _case("a 2 MB name over the per-call limit", CLEAR, "CRDSchemas.validate", _huge_name, "<root>", timeout_s=90),
    *(
        _case(
            f"a CRD rule that does not parse: {key}", CLEAR, VALIDATE_CRDS, _broken_rule(key), "does not parse", "crd"
        )  # the CRD file is named
        for key in ("no right operand", "an unclosed call")
    ),
    *(
        _case(f"{key} (validate)", CLEAR, "kftrain validate -f FILE", _refused(key, crds=False), field, needs=())
        for key, field in (
            ("400,001 args", "spec.trainer.args"),
            ("129 command words", "spec.trainer.command"),
            ("hf:// for a dataset", "spec.initializer.dataset.storageUri"),
            ("a long storageUri", "spec.initializer.model.storageUri"),
            ("17 runtime patches", "spec.runtimePatches"),
        )
    ),
    *(
        _case(f"{key} (--crd-dir)", CLEAR, VALIDATE_CRDS, _refused(key, crds=True), field)
        for key, field in (
            ("400,001 args", "spec.trainer.args"),
            ("hf:// for a dataset", "spec.initializer.dataset.storageUri"),
            ("no scheme for a model", "spec.initializer.model.storageUri"),
        )
    ),
    *(
        _case(f"a 2 MB value {key}: one short line", CLEAR, VALIDATE_CRDS, _huge(key), field)
        for key, field in (
            ("over maxLength", "spec.managedBy"),
            ("not of its type", "spec.trainer.numNodes"),
            ("a huge key", "spec.trainer.resourcesPerNode.limits"),
            ("a TrainJob's name", "metadata.name"),
            ("a replica type", "spec.pytorchReplicaSpecs"),
        )
    ),
    *(_case(f"the {kind} example (control)", FINE, VALIDATE_CRDS, _example(kind)) for kind in ("mpijob", "trainjob")),
    _case("--crd-dir missing", CLEAR, VALIDATE_CRDS, _crd_folder(lambda sb: sb.work / "none"), "--crd-dir", needs=()),
    _case(
        "--crd-dir holding a FIFO", CLEAR, VALIDATE_CRDS, _crd_folder(_with_fifo), "pipe.yaml", needs=(), timeout_s=30
    ),
    _case(
        "--crd-dir holding an alias bomb",
        CLEAR,
        VALIDATE_CRDS,
        _crd_folder(_with_bomb),
        "bomb.yaml",
        needs=(),
        timeout_s=60,
    ),
]
