"""Every kind of :data:`kftrain.job.kinds.KINDS` has everything docs/architecture.md's "Adding a job kind" lists:
its package (its Kind, its spec fields exactly the CRD's, its KindOptions reading this release's program from the one
catalog), its component folder (component.py, README, the compiled component.yaml taking exactly its launch inputs, a
test), the fake API server serving it and its simulated operator running it, the Role granting it, the launch tests
on the fake cluster covering it, and the docs' table of kinds (docs/trainer-v2.md) naming it. A kind registered
without one of them fails here, naming what is missing."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain.backends.base import JobPhase
from kftrain.cli.pipelines import defined_object
from kftrain.job.kinds import ISTIO_INJECT_ANNOTATION, KINDS, Kind, KindOptions, KindSpec, programs
from kftrain.job.model import JobSpec
from kftrain.job.request import JobRequest
from kftrain.launch.inputs import launch_inputs
from testbed.k8s_harness import make_backend, s_success
from testbed.launch_cluster import LAUNCHES
from testbed.reference import REPO

EVERY_KIND = pytest.mark.parametrize("kind", list(KINDS), ids=[f"{k.spec.kind}-{k.spec.version}" for k in KINDS])
KINDS_DIR = REPO / "kftrain/job/kinds"


def package_of(kind: Kind) -> str:
    return f"kftrain.job.kinds.{kind.spec.kind.lower()}"


def component_folder(kind: Kind) -> Path:
    return REPO / "components/training" / f"{kind.spec.kind.lower()}_launch"


def own_manifest_shape(kind: Kind) -> bool:
    """Whether the kind reads and renders its own manifest (a TrainJob) instead of the operators' replica specs."""
    return type(kind).load is not Kind.load and type(kind).render is not Kind.render


@EVERY_KIND
def test_its_package_holds_its_kind_spec_fields_and_options(kind: Kind) -> None:
    package = importlib.import_module(package_of(kind))
    assert any(value is kind for value in vars(package).values()), f"{package.__name__} does not export {kind}"
    assert KINDS.get(kind.spec.kind, kind.spec.api_version) is kind
    assert isinstance(kind.spec, KindSpec)
    assert type(kind) is not Kind and type(kind).__module__ == f"{package.__name__}.kind"
    assert issubclass(kind.options, KindOptions) and kind.options is not KindOptions
    assert kind.options.__module__ == f"{package.__name__}.options"
    # Each launch input declared once, with its description (launch_input).
    undocumented = [f.name for f in dataclasses.fields(kind.options) if not f.metadata.get("doc")]
    assert not undocumented, f"{kind.options.__name__}: declare {undocumented} with launch_input"
    if own_manifest_shape(kind):
        assert kind.spec.spec_type is JobSpec  # its manifest is its own: no spec fields of the operators' shape
    else:
        spec_type = kind.spec.spec_type
        assert issubclass(spec_type, JobSpec) and spec_type is not JobSpec, f"{kind}: no JobSpec subclass"
        assert spec_type.__module__ == f"{package.__name__}.spec"


@EVERY_KIND
def test_its_facts_are_its_crds(kind: Kind, crd_schemas: Any) -> None:
    """Its group, version, plural, replica key, spec fields and suspend field, as the CRD in the reference data has
    them (what a client uses on a cluster: a wrong plural is a 404)."""
    crd = crd_schemas.get(kind.spec.api_version, kind.spec.kind)
    assert crd is not None, f"no CRD in the reference data serves {kind.spec.api_version} {kind.spec.kind}"
    assert (crd.group, crd.version, crd.plural) == (kind.spec.group, kind.spec.version, kind.spec.plural)
    spec = crd.schema["properties"]["spec"]
    assert kind.spec.replica_key in spec["properties"]
    if not own_manifest_shape(kind):
        fields = {f.metadata["json"] for f in dataclasses.fields(kind.spec.spec_type) if kind.spec.accepts(f.name)}
        assert fields | {kind.spec.replica_key} == set(spec["properties"])
    node = crd.schema
    for key in kind.spec.suspend_field.split("."):
        node = node["properties"][key]
    assert node["type"] == "boolean"


@EVERY_KIND
def test_its_default_program_is_the_catalogs(kind: Kind) -> None:
    assert kind.options().default_program() in programs.CATALOG
    # No kind's options import another kind: what one runs of another's is an entry of the catalog.
    others = {f"kftrain.job.kinds.{p.name}" for p in KINDS_DIR.iterdir() if (p / "__init__.py").is_file()}
    others.discard(package_of(kind))
    source = KINDS_DIR / kind.spec.kind.lower() / "options.py"
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not {m for m in imported if any(m == o or m.startswith(f"{o}.") for o in others)}


@EVERY_KIND
def test_its_component_folder(kind: Kind) -> None:
    folder = component_folder(kind)
    for name in ("component.py", "README.md", "component.yaml", "test_component.py"):
        assert (folder / name).is_file(), f"{folder / name} is missing"
    component = defined_object(f"kftrain_components.training.{folder.name}.component", pipeline=False)
    assert component.name == folder.name.replace("_", "-")
    # The compiled component takes exactly the kind's launch inputs.
    compiled = yaml.safe_load((folder / "component.yaml").read_text())
    assert compiled["pipelineInfo"]["name"] == component.name
    (definition,) = compiled["components"].values()
    assert set(definition["inputDefinitions"]["parameters"]) == {i.name for i in launch_inputs(kind)}
    tests = ast.parse((folder / "test_component.py").read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name.startswith("test_") for n in tests.body)


@EVERY_KIND
def test_the_fake_cluster_serves_and_runs_it(kind: Kind, kube: Any, operator: Any) -> None:
    """The Kubernetes backend runs a job of the kind built from its default inputs on the fake API server, served at
    that version only, to success; the simulated operator's pods carry the label the backend finds them by."""
    kube.served[kind.spec.plural] = [kind.spec.version]
    preferred = KINDS.get(kind.spec.kind)
    request = JobRequest(kind.spec.kind, image="example.com/train:1", command=["python", "train.py"])
    request.options = preferred.options()
    job = preferred.convert(request.to_job("every-kind"), kind.spec.api_version)
    operator.scenario = s_success
    backend, out = make_backend(kube)
    result = backend.run(job)
    assert result.phase == JobPhase.SUCCEEDED, out.getvalue()
    (created,) = kube.created
    assert (created["apiVersion"], created["kind"]) == (kind.spec.api_version, kind.spec.kind)
    pods = list(kube.pods.values())
    assert pods and all(p["metadata"]["labels"][kind.spec.pod_job_label] == "every-kind" for p in pods)


def pod_annotations(created: dict[str, Any], kind: Kind) -> dict[str, Any]:
    """Each replica's (a TrainJob: each of its runtime's jobs') pod template annotations, as the created manifest gives
    them to the operator (a TrainJob's through its runtime patch: kubeflow/trainer@v2.3.0
    pkg/apis/trainer/v1alpha1/trainjob_types.go, PodTemplatePatch.metadata)."""
    spec = created["spec"]
    if own_manifest_shape(kind):
        (patch,) = [p for p in spec.get("runtimePatches") or [] if p["manager"] == "kftrain.io/launch"]
        jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        return {j["name"]: j["template"]["spec"]["template"].get("metadata", {}).get("annotations") for j in jobs}
    replicas = spec[kind.spec.replica_key]
    return {rtype: (r["template"].get("metadata") or {}).get("annotations") for rtype, r in replicas.items()}


@EVERY_KIND
@pytest.mark.parametrize("asked", [None, "true"], ids=["unset", "set-by-the-job"])
def test_its_pods_get_no_istio_sidecar_unless_the_job_asks(kind: Kind, asked: str | None, kube: Any, operator: Any):
    """In a profile namespace Istio injects its proxy into every pod, and a training pod with it never completes: every
    replica's pod template the cluster gets says ``sidecar.istio.io/inject: "false"``, unless the job set it."""
    kube.served[kind.spec.plural] = [kind.spec.version]
    preferred = KINDS.get(kind.spec.kind)
    request = JobRequest(kind.spec.kind, image="example.com/train:1", command=["python", "train.py"])
    request.options = preferred.options()
    job = preferred.convert(request.to_job("meshed"), kind.spec.api_version)
    if asked is not None:
        for rspec in job.replica_specs.values():
            rspec.template.metadata = {"annotations": {ISTIO_INJECT_ANNOTATION: asked}}
    operator.scenario = s_success
    backend, out = make_backend(kube)
    assert backend.run(job).phase == JobPhase.SUCCEEDED, out.getvalue()
    (created,) = kube.created
    annotations = pod_annotations(created, kind)
    assert set(annotations) == set(job.replica_specs)  # every replica type (every runtime job)
    assert all(a == {ISTIO_INJECT_ANNOTATION: asked or "false"} for a in annotations.values()), annotations


@EVERY_KIND
def test_the_role_grants_it(kind: Kind) -> None:
    """deploy/rbac/role.yaml names its plural (the verbs: tests/deploy/test_rbac.py)."""
    (role,) = [d for d in yaml.safe_load_all((REPO / "deploy/rbac/role.yaml").read_text()) if d]
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert (kind.spec.group, kind.spec.plural) in granted, f"deploy/rbac/role.yaml: no rule for {kind.spec.plural}"


@EVERY_KIND
def test_the_launch_tests_on_the_fake_cluster_cover_it(kind: Kind) -> None:
    covered = {launch.source for launch in LAUNCHES if launch.kind == kind.spec.kind}
    assert covered == {"typed", "manifest"}, f"testbed/launch_cluster.py: add {kind.spec.kind} to CASES"


@EVERY_KIND
def test_the_docs_table_of_kinds_names_it(kind: Kind) -> None:
    rows = [line for line in (REPO / "docs" / "trainer-v2.md").read_text().splitlines() if line.startswith("| `")]
    assert any(f"`{kind.spec.kind}`" in row.split("|")[1] and kind.spec.group in row for row in rows)
