"""CEL validation rules are charged what the API server charges them, and stopped where it stops them
(k8s.io/apiserver@v0.36.3:pkg/apis/cel/config.go, PerCallLimit and RuntimeCELCostBudget;
k8s.io/apiextensions-apiserver@v0.36.3:pkg/apiserver/schema/cel/validation.go), within seconds here whatever the
manifest; a rule that does not parse names its CRD, and no message quotes a huge value whole."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain.cli.app import main as kftrain_main
from kftrain.errors import JobSpecError
from kftrain.job import load_manifest
from kftrain.job.manifest import cel
from kftrain.job.manifest.parse import parse_yaml_documents
from kftrain.job.manifest.schema import NOT_CHECKED, CRDSchemas
from testbed import reference
from testbed.manifests import set_path, trainjob
from testbed.needs import requires

pytestmark = requires("celpy", reason="the [crd] extra evaluates the CRDs' rules")  # imported when a test runs

# (rule, self, what cel-go charges): github.com/google/cel-go@v0.26.0 evaluating the rule with the API server's
# program options (cel.OptOptimize, cel.OptTrackCost, interpreter.PresenceTestHasCost(false):
# k8s.io/apiserver@v0.36.3:pkg/cel/environment/base.go), ActualCost() of the evaluation.
COST_AS_CEL_GO = [
    ("self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')", "hf://", 10),
    ("self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')", "", 1),
    ("self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')", "s3://bucket/" + "x" * 3000, 2418),
    ("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')", {"metadata": {"name": "tj"}}, 10),
    ("size(self.metadata.name) <= 63", {"metadata": {"name": "tj"}}, 5),
    ("!self.exists(c, c == 'node')", ["a", "b", "c"], 21),
    ("!self.exists(c, c == 'node')", ["node", "b", "c"], 12),
    ("!self.exists(c, c == 'node')", ["a", "node"], 15),
    ("self.all(c, c != 'x')", ["a"] * 50, 252),
    ("self.all(c, c != 'x')", ["x"] + ["a"] * 50, 9),
    (
        "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)].filter(x, x).size() <= 1",
        {"torch": {}},
        36,
    ),
    (
        "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
        "self.replicatedJobs.exists(x, has(x.dependsOn)))",
        {"startupPolicy": {"startupPolicyOrder": "InOrder"}, "replicatedJobs": [{"name": "a"}, {"dependsOn": []}]},
        19,
    ),
    (
        "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)",
        {"templates": [{"metadata": {"name": "a"}}] * 10},
        63,
    ),
    ("self.exists_one(x, x > 1)", [1, 2, 3], 13),
    ("self.x.startsWith('ab') && self.x.endsWith('z') && self.x.contains('q')", {"x": "ab" + "q" * 100 + "z"}, 39),
    ("{'a': self}['a']", 1, 33),
    ("[1, 2].map(x, x)", 1, 27),
    ("self.l.map(x, [x]).size() > 0", {"l": [1, 2]}, 51),
    ("self.x.all(a, self.y.exists(b, a == b))", {"x": [1, 2], "y": [2, 1]}, 39),
    ("self.a + self.b == 'xy'", {"a": "x", "b": "y"}, 6),
]


def cost_of(rule: str, value: Any) -> int:
    import celpy

    return cel.CompiledRule(celpy, rule).holds(celpy.json_to_cel(value), cel.Budget())[1]


@pytest.mark.parametrize(
    ("rule", "value", "cel_go"), COST_AS_CEL_GO, ids=[f"{c[0][:40]}:{c[2]}" for c in COST_AS_CEL_GO]
)
def test_a_rule_costs_what_cel_go_charges_it(rule: str, value: Any, cel_go: int) -> None:
    assert cost_of(rule, value) == cel_go


# Where cel-python's evaluation does more than cel-go's, the charge is higher, never lower (cel.py's docstring):
# (rule, self, cel-go's cost).
COST_ABOVE_CEL_GO = [
    ("self.size() > 2 ? self[0] : self[1]", [5, 6, 7], 4),  # a conditional's attribute branch
    ("self.l[self.i]", {"l": [1, 2], "i": 1}, 4),  # an index that is not a constant
]


@pytest.mark.parametrize(("rule", "value", "cel_go"), COST_ABOVE_CEL_GO, ids=[c[0] for c in COST_ABOVE_CEL_GO])
def test_where_the_charge_differs_it_is_higher(rule: str, value: Any, cel_go: int) -> None:
    assert cost_of(rule, value) > cel_go


def widget_crd(folder: Path, rule: str, *, names_max: int | None = None) -> CRDSchemas:
    """A CRD whose ``spec.items[*]`` (no maxItems) each carry ``rule``, their ``names`` a list of strings."""
    names: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
    if names_max is not None:
        names["maxItems"] = names_max
    item = {
        "type": "object",
        "x-kubernetes-validations": [{"rule": rule, "message": "a bad item"}],
        "properties": {"names": names, "note": {"type": "string", "maxLength": 5}},
    }
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"items": {"type": "array", "items": item}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    folder.mkdir(exist_ok=True)
    (folder / "widgets.yaml").write_text(yaml.safe_dump(crd))
    return CRDSchemas.from_dir(folder)


def alias_bomb(items: int, names: int, name: str) -> str:
    """A Widget of ``items`` aliases of one item whose ``names`` are ``names`` aliases of ``name``: a few KB that
    expand to ``items * names`` strings."""
    return (
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec:\n"
        f"  items: [&i {{names: [&n {name}{', *n' * (names - 1)}]}}{', *i' * (items - 1)}]\n"
    )


# (case, rule, items, names, the name repeated, the error): each within the schema's bounds, so its rules run.
BOMBS = [
    (
        # 100 matches on 2,000 characters with a 58-character pattern cost ~300,000 an item: the 34th runs out of
        # the 10,000,000 the API server allows one object.
        "out of budget",
        "self.names.all(n, n.matches('^(a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p|q|r|s|t|u|v|w|x|y|z)+$'))",
        500,
        100,
        "a" * 2000,
        cel.OUT_OF_BUDGET,
    ),
    (
        # 900 items of 900 names: the API server's cost (5 a name, 4,050,000 in all) is within its budget, but
        # cel-python takes minutes over it.
        "too costly here",
        "self.names.all(n, n != 'x')",
        900,
        900,
        "a",
        cel.TOO_COSTLY_HERE,
    ),
]


@pytest.mark.parametrize(("rule", "items", "names", "name", "error"), [b[1:] for b in BOMBS], ids=[b[0] for b in BOMBS])
def test_an_alias_bomb_is_refused_within_seconds(
    tmp_path: Path, rule: str, items: int, names: int, name: str, error: str
) -> None:
    schemas = widget_crd(tmp_path / "crds", rule)
    text = alias_bomb(items, names, name)
    assert len(text) < 8 * 1024
    manifest = parse_yaml_documents(text)[0]
    started = time.monotonic()
    errors = schemas.errors(manifest)
    assert time.monotonic() - started < 30  # minutes without the bounds; a few seconds with them
    assert len(errors) == 1 and errors[0].startswith("spec.items[") and errors[0].endswith(f": {error}"), errors


def test_an_exists_stops_at_the_first_match_as_cel_go_does(tmp_path: Path) -> None:
    """810,000 names, each item's first a match: one name an item is evaluated (and charged)."""
    schemas = widget_crd(tmp_path / "crds", "self.names.exists(n, n == 'a')")
    started = time.monotonic()
    assert schemas.errors(parse_yaml_documents(alias_bomb(900, 900, "a"))[0]) == []
    assert time.monotonic() - started < 30


def test_one_rule_over_the_per_call_limit_stops_validation_with_the_servers_message(crd_schemas: CRDSchemas) -> None:
    """A 2 MB name: matches() costs ceil(2,097,153 / 10) * ceil(31 / 4) = 1,677,728, over the 1,000,000 one
    evaluation may cost; the name's length rule is not evaluated after it."""
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "a" * 2 * 1024 * 1024},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    rule = "metadata.name must match RFC 1035 DNS label format"
    assert crd_schemas.errors(job) == [f"<root>: {cel.CALL_LIMIT.format(rule=rule)}"]


def test_no_rule_runs_on_an_object_the_schema_refuses_for_a_bound(tmp_path: Path) -> None:
    """hasBlockingErr (apiextensions-apiserver's registry/customresource/strategy.go): a value over its maxLength
    (Too long) leaves every rule unevaluated, and says so."""
    schemas = widget_crd(tmp_path / "crds", "self.names.all(n, n != 'x')")
    item: dict[str, Any] = {"names": ["x"], "note": "long"}
    manifest = {"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"items": [item]}}
    assert schemas.errors(manifest) == ["spec.items[0]: a bad item"]
    item["note"] = "too long"
    assert schemas.errors(manifest) == [
        "spec.items[0].note: Too long: may not be more than 5 bytes",
        f"<root>: {NOT_CHECKED}",
    ]


def runtime_bomb(targets: int, names: int) -> str:
    """A TrainingRuntime of 7 KB whose envInjection targets and their containerNames are YAML aliases: 810,000
    names for ``!self.exists(c, c == 'node')`` (Trainer v2.3.0's rule on containerNames) once expanded."""
    listed = "[&n sidecar" + ", *n" * (names - 1) + "]"
    target = f"&t {{jobName: node, containerNames: {listed}}}"
    return (
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\nmetadata: {name: rt}\nspec:\n"
        f"  mlPolicy: {{numNodes: 1, torch: {{envInjection: {{targets: [{target}{', *t' * (targets - 1)}]}}}}}}\n"
        "  template: {spec: {replicatedJobs: [{name: node, template: {metadata: {labels: "
        "{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}, spec: {template: {spec: {containers: "
        "[{name: node, image: x}, {name: sidecar, image: y}]}}}}}]}}\n"
    )


TRAINJOB_ON_RT = (
    "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec:\n"
    "  runtimeRef: {name: rt, kind: TrainingRuntime}\n  trainer: {numNodes: 1, image: x, command: [python, t.py]}\n"
)


def test_an_aliased_training_runtime_is_refused_by_kftrain_validate_within_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Over its maxItems (16 targets, 8 names), the runtime's rules are not evaluated, as the API server does not:
    one line, at once, where evaluating them took minutes."""
    path = tmp_path / "job.yaml"
    path.write_text(TRAINJOB_ON_RT + "---\n" + runtime_bomb(900, 900))
    assert path.stat().st_size < 8 * 1024
    crd_dir = reference.required(reference.CRD_DIR)
    started = time.monotonic()
    code = kftrain_main(["validate", "-f", str(path), "--crd-dir", str(crd_dir)])
    assert time.monotonic() - started < 30
    said = capsys.readouterr().err.strip()
    assert code == 2
    assert said == (
        "kftrain: error: spec.mlPolicy.torch.envInjection.targets: rejected by the CRD schema: Too many: 900: must "
        "have at most 16 items (and 1 more)"
    )


def trainjob_crd_with_rule(folder: Path, where: tuple[str, ...], rule: str) -> Path:
    """A copy of Trainer v2.3.0's TrainJob CRD in ``folder`` whose first rule at schema path ``where`` is ``rule``."""
    source = reference.required(reference.CRD_DIR) / "trainer.kubeflow.org_trainjobs.v2.3.0.yaml"
    crd = yaml.load(source.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for key in where:
        node = node["properties"][key]
    node["x-kubernetes-validations"][0]["rule"] = rule
    folder.mkdir()
    path = folder / source.name
    path.write_text(yaml.dump(crd, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
    return path


# (case, the rule's place in the schema, as kftrain names it, the broken rule, where it stops parsing)
BROKEN_RULES = [
    ("no right operand", (), "<root>", "size(self.metadata.name) <=", "line 1, column 26"),
    (
        "an unclosed call",
        ("spec", "initializer", "dataset", "storageUri"),
        "spec.initializer.dataset.storageUri",
        "self == '' || self.matches('^[a-z]+://.+$'",
        "line 1, column 28",
    ),
]


@pytest.mark.parametrize(
    ("where", "shown", "rule", "stops"), [b[1:] for b in BROKEN_RULES], ids=[b[0] for b in BROKEN_RULES]
)
def test_a_rule_that_does_not_parse_names_its_crd_field_and_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: tuple[str, ...], shown: str, rule: str, stops: str
) -> None:
    """kftrain validate --crd-dir with such a CRD: one line naming the CRD file, the rule's place and its text, where
    cel-python's CELParseError went up as a traceback."""
    crd = trainjob_crd_with_rule(tmp_path / "crds", where, rule)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(TRAINJOB))  # every rule is compiled first: the field need not be there
    assert kftrain_main(["validate", "-f", str(path), "--crd-dir", str(crd.parent)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"kftrain: error: {crd}: the TrainJob CRD's x-kubernetes-validations rule at {shown} does not parse "
        f"({stops}): {rule!r}; the API server refuses such a CRD"
    )


HUGE = "x" * 2 * 1024 * 1024
TRAINJOB = trainjob(trainer={"numNodes": 2})


TFJOB: dict[str, Any] = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf"}}
PYTORCHJOB: dict[str, Any] = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt"}}


def with_value(path: str, value: Any) -> dict[str, Any]:
    return set_path(copy.deepcopy(TRAINJOB), path, value)


# (case, manifest, the field the message names): each quotes (or would quote) a 2 MB value.
HUGE_VALUES = [
    ("over maxLength", with_value("spec.managedBy", HUGE), "spec.managedBy"),
    ("not of its type", with_value("spec.trainer.numNodes", HUGE), "spec.trainer.numNodes"),
    ("over maxItems", with_value("spec.trainer.args", [HUGE[:1000]] * 2000), "spec.trainer.args"),
    (
        "a huge key",
        with_value(f"spec.trainer.resourcesPerNode.limits.{HUGE}", "one"),
        "spec.trainer.resourcesPerNode.limits.xxx",
    ),
]


@pytest.mark.parametrize(("manifest", "field"), [h[1:] for h in HUGE_VALUES], ids=[h[0] for h in HUGE_VALUES])
def test_a_huge_value_makes_a_message_under_one_kilobyte(
    crd_schemas: CRDSchemas, manifest: dict[str, Any], field: str
) -> None:
    errors = crd_schemas.errors(manifest)
    assert errors and all(len(e) < 1024 for e in errors), [len(e) for e in errors]
    with pytest.raises(JobSpecError) as raised:
        crd_schemas.validate(manifest)
    assert str(raised.value).startswith(field) and len(str(raised.value)) < 1024


# (case, manifest): kftrain's own checks, without the CRD files, each quoting the 2 MB value it refuses.
HUGE_WITHOUT_CRDS = [
    ("a TrainJob's name", with_value("metadata.name", HUGE)),
    ("a TFJob's restart policy", {**TFJOB, "spec": {"tfReplicaSpecs": {"Worker": {"restartPolicy": HUGE}}}}),
    ("a replica type", {**PYTORCHJOB, "spec": {"pytorchReplicaSpecs": {HUGE: {"replicas": 1}}}}),
]


@pytest.mark.parametrize("manifest", [h[1] for h in HUGE_WITHOUT_CRDS], ids=[h[0] for h in HUGE_WITHOUT_CRDS])
def test_a_huge_value_makes_a_message_under_one_kilobyte_without_the_crd_files(manifest: dict[str, Any]) -> None:
    with pytest.raises(JobSpecError) as raised:
        load_manifest(manifest)
    assert len(str(raised.value)) < 1024
