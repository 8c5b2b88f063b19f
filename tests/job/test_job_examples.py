"""The operators' official example manifests load, render back unchanged and validate against their CRDs; the CRD
validator refuses what the API server would."""

from __future__ import annotations

import pytest
import yaml

from kftrain.errors import JobSpecError
from kftrain.job import (
    RestartPolicy,
    load_manifest,
    load_manifest_file,
    render_manifest,
    render_yaml,
)
from testbed.manifests import mpijob_v2, replica, tfjob


def test_every_official_example_loads_round_trips_and_validates(example_manifests, crd_schemas):
    assert len(example_manifests) >= 6
    for name, path in example_manifests.items():
        raw = yaml.safe_load(path.read_text())
        job = load_manifest_file(path)
        rendered = render_manifest(job)
        assert rendered == raw, name
        assert crd_schemas.errors(rendered) == [], name
        # and once more through YAML text, as kubectl would read it
        assert render_manifest(load_manifest(render_yaml(job))) == raw, name


def test_examples_cover_every_kind_and_version(example_manifests):
    seen = {(j.kind, j.api_version) for j in map(load_manifest_file, example_manifests.values())}
    assert seen == {
        ("TFJob", "kubeflow.org/v1"),
        ("PyTorchJob", "kubeflow.org/v1"),
        ("MPIJob", "kubeflow.org/v1"),
        ("MPIJob", "kubeflow.org/v2beta1"),
    }


def test_example_typed_fields(example_manifests):
    job = load_manifest_file(example_manifests["training-operator-v1.9.0_pytorch_simple.yaml"])
    assert job.name == "pytorch-simple"
    assert job.metadata.namespace == "kubeflow"
    assert list(job.replica_specs) == ["Master", "Worker"]
    master = job.replica_specs["Master"]
    assert master.restart_policy is RestartPolicy.ON_FAILURE
    c = master.template.spec.containers[0]
    assert (c.name, c.command) == ("pytorch", ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"])
    assert c.extra == {"imagePullPolicy": "Always"}


def test_crd_schema_validator_rejects_invalid_manifests(crd_schemas):
    bad = tfjob({"Worker": replica(1, "tensorflow")}, name="bad")
    bad["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "x"
    errors = crd_schemas.errors(bad)
    assert len(errors) == 1
    assert errors[0].startswith("spec.tfReplicaSpecs.Worker.replicas: ")
    with pytest.raises(JobSpecError) as exc:
        crd_schemas.validate(bad)
    assert exc.value.field == "spec.tfReplicaSpecs.Worker.replicas"

    bad_impl = mpijob_v2({"Launcher": 1, "Worker": 1}, mpiImplementation="LAM")
    assert [e.split(":")[0] for e in crd_schemas.errors(bad_impl)] == ["spec.mpiImplementation"]

    unknown = {"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "spec": {}}
    assert crd_schemas.errors(unknown)[0].startswith("apiVersion/kind:")
