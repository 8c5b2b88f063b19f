"""A TrainJob is held to its CRD's bounds (Kubeflow Trainer v2.3.0's maxItems, maxLength, minLength, minimum and
storageUri rule: kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/trainjob_types.go) whether or not
``kftrain validate`` is given the CRD files (``--crd-dir``); the bounds kftrain keeps are the CRD file's."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kftrain.cli.app import main as kftrain_main
from kftrain.errors import JobSpecError
from kftrain.job import load_manifest
from kftrain.job.kinds.trainjob import bounds
from kftrain.job.manifest.schema import CRDSchemas
from testbed import reference
from testbed.manifests import set_path, trainjob

TRAINJOB = trainjob(trainer={"numNodes": 2})


def changed(path: str, value: Any) -> dict[str, Any]:
    return set_path(copy.deepcopy(TRAINJOB), path, value)


def keywords(schema: Mapping[str, Any], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str, Any]]:
    """(schema path, keyword, value) of every bound in ``schema`` (``properties`` and ``items`` walked)."""
    out = []
    for key, value in schema.items():
        if key == "properties":
            for name, sub in value.items():
                out += keywords(sub, (*path, name))
        elif key == "items":
            out += keywords(value, (*path, "[]"))
        else:
            out.append((path, key, value))
    return out


def at(schema: Mapping[str, Any], path: tuple[str, ...]) -> Mapping[str, Any]:
    for step in path:
        schema = schema["items"] if step == "[]" else schema["properties"][step]
    return schema


def test_every_bound_kept_is_the_trainjob_crds(crd_schemas: CRDSchemas) -> None:
    crd = crd_schemas.get("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert crd is not None
    kept = keywords(bounds.SCHEMA)
    assert len(kept) >= 16
    for path, keyword, value in kept:
        theirs = at(crd.schema, path).get(keyword)
        if keyword == "x-kubernetes-validations":
            assert isinstance(theirs, list)
            assert all(rule in theirs for rule in value), (path, value)
            assert all(rule["rule"] in bounds._HOLDS for rule in value)
        else:
            assert theirs == value, (path, keyword)


# storageUri values, and whether the CRD's CEL rule holds for each (cel-python's evaluation of the rule decides).
STORAGE_URIS = [
    "",
    "hf://org/model",
    "s3://bucket/path",
    "a+b.c-d://x",
    "hf://",
    "hf:/x",
    "1s3://bucket",
    "://x",
    "s3://bucket\n",
    "s3://\nbucket",
    "S3://B",
    "s3 ://x",
    "s3://ünïcode",
]


@pytest.mark.parametrize("uri", STORAGE_URIS)
def test_the_storage_uri_rule_holds_where_cel_says_it_does(uri: str) -> None:
    celpy = pytest.importorskip("celpy", reason="the [crd] extra evaluates CEL")
    env = celpy.Environment()
    program = env.program(env.compile(bounds.STORAGE_URI_RULE))
    assert bounds._HOLDS[bounds.STORAGE_URI_RULE](uri) is bool(program.evaluate({"self": celpy.json_to_cel(uri)}))


# (case, manifest, the field named, what is said of it): each the API server refuses.
REFUSED = [
    (
        "400,001 args",
        changed("spec.trainer.args", ["x"] * 400_001),
        "spec.trainer.args",
        "Too many: 400001: must have at most 128 items",
    ),
    ("129 command words", changed("spec.trainer.command", ["x"] * 129), "spec.trainer.command", "Too many: 129"),
    (
        "an arg over 1 MiB",
        changed("spec.trainer.args", ["x" * (1024 * 1024 + 1)]),
        "spec.trainer.args[0]",
        "Too long: may not be more than 1048576 bytes",
    ),
    ("129 env", changed("spec.trainer.env", [{"name": f"V{i}"} for i in range(129)]), "spec.trainer.env", "Too many"),
    ("a long image", changed("spec.trainer.image", "i" * 501), "spec.trainer.image", "Too long"),
    (
        "hf:// for a dataset",
        changed("spec.initializer", {"dataset": {"storageUri": "hf://"}}),
        "spec.initializer.dataset.storageUri",
        bounds.STORAGE_URI_MESSAGE,
    ),
    (
        "no scheme for a model",
        changed("spec.initializer", {"model": {"storageUri": "org/model"}}),
        "spec.initializer.model.storageUri",
        bounds.STORAGE_URI_MESSAGE,
    ),
    (
        "a long storageUri",
        changed("spec.initializer", {"model": {"storageUri": "s3://" + "b" * 2044}}),
        "spec.initializer.model.storageUri",
        "Too long: may not be more than 2048 bytes",
    ),
    ("a long runtime name", changed("spec.runtimeRef.name", "r" * 254), "spec.runtimeRef.name", "Too long"),
    ("a long managedBy", changed("spec.managedBy", "m" * 254), "spec.managedBy", "Too long"),
    (
        "17 runtime patches",
        changed("spec.runtimePatches", [{"manager": f"m{i}"} for i in range(17)]),
        "spec.runtimePatches",
        "Too many: 17: must have at most 16 items",
    ),
    (
        "a zero deadline",
        changed("spec.activeDeadlineSeconds", 0),
        "spec.activeDeadlineSeconds",
        "0 is less than",
    ),
]


@pytest.mark.parametrize(("manifest", "field", "said"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_a_trainjob_out_of_its_crds_bounds_is_refused_without_the_crd_files(
    manifest: dict[str, Any], field: str, said: str
) -> None:
    with pytest.raises(JobSpecError) as raised:
        load_manifest(manifest)
    assert raised.value.field == field
    assert raised.value.message.startswith(said) and "Kubeflow Trainer v2.3.0" in raised.value.message


@pytest.mark.parametrize(("manifest", "field", "said"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_the_crd_files_refuse_the_same(
    crd_schemas: CRDSchemas, manifest: dict[str, Any], field: str, said: str
) -> None:
    errors = crd_schemas.errors(manifest)
    assert any(e.startswith(f"{field}: {said}") for e in errors), errors


# (case, manifest): kftrain validate, with and without --crd-dir, names the field in one line.
CLI = [("400,001 args", REFUSED[0]), ("hf://", REFUSED[5])]


@pytest.mark.parametrize("with_crds", [False, True], ids=["without --crd-dir", "with --crd-dir"])
@pytest.mark.parametrize(("manifest", "field"), [(c[1][1], c[1][2]) for c in CLI], ids=[c[0] for c in CLI])
def test_kftrain_validate_refuses_it_with_and_without_the_crd_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: dict[str, Any], field: str, with_crds: bool
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(manifest))  # JSON is YAML: ["x", "x", ...] is 2 MB, within what the API server takes
    crds = ["--crd-dir", str(reference.required(reference.CRD_DIR))] if with_crds else []
    assert kftrain_main(["validate", "-f", str(path), *crds]) == 2
    said = capsys.readouterr().err.strip()
    assert said.startswith(f"kftrain: error: {field}: ") and "\n" not in said and len(said) < 1024


def test_a_trainjob_within_its_bounds_loads() -> None:
    job = load_manifest(changed("spec.trainer", {"numNodes": 1, "args": ["--x"] * 128, "command": ["python"] * 128}))
    assert job.kind == "TrainJob"
