"""A TrainJob's fields checked with Kubeflow Trainer's API models (kftrain/job/kinds/trainjob/api.py): a value of the
wrong type, and a value the TrainJob merges into its runtime's containers, are named by the TrainJob's own path.

The fields merged, and how: kubeflow/trainer@v2.3.0 ``pkg/runtime/framework/plugins/jobset/builder.go`` (the
trainer's image, command, args and env on the ``node`` container; an initializer's env on its container) and
``pkg/runtime/core/trainingruntime.go`` (resourcesPerNode's limits and requests merged over the container's,
MergeResourceRequirements).
"""

from __future__ import annotations

from typing import Any

import pytest

from kftrain.errors import JobSpecError
from kftrain.job import load_manifest
from testbed.manifests import trainjob

HUGE = "x" * (2 << 20)

# (id, the TrainJob's spec beside its runtimeRef, the field named, what the message says)
TYPE_ERRORS: list[tuple[str, dict[str, Any], str, str]] = [
    ("numNodes not an integer", {"trainer": {"numNodes": "abc"}}, "spec.trainer.numNodes", "valid integer, got 'abc'"),
    (
        "numNodes a 2 MB string: quoted cut, with its length",
        {"trainer": {"numNodes": HUGE}},
        "spec.trainer.numNodes",
        f"({len(HUGE) + 2} characters)",
    ),
    (
        "numProcPerNode not an integer",
        {"trainer": {"numProcPerNode": "many"}},
        "spec.trainer.numProcPerNode",
        "valid integer",
    ),
    (
        "an env value a number",
        {"trainer": {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": 3}]}},
        "spec.trainer.env[1].value",
        "valid string, got 3",
    ),
    ("a command word a number", {"trainer": {"command": ["python", 1]}}, "spec.trainer.command[1]", "valid string"),
    ("env a mapping", {"trainer": {"env": {"name": "A"}}}, "spec.trainer.env", "valid list"),
    ("env items not mappings", {"trainer": {"env": ["A=1"]}}, "spec.trainer.env[0]", "valid dictionary"),
    (
        "limits a list",
        {"trainer": {"resourcesPerNode": {"limits": ["cpu"]}}},
        "spec.trainer.resourcesPerNode.limits",
        "valid dictionary",
    ),
    (
        "a limit a list",
        {"trainer": {"resourcesPerNode": {"limits": {"cpu": [1]}}}},
        "spec.trainer.resourcesPerNode.limits.cpu",
        "got [1]",
    ),
    ("suspend not a boolean", {"suspend": "yes"}, "spec.suspend", "valid boolean"),
    ("a runtime patch's manager", {"runtimePatches": [{"manager": 1}]}, "spec.runtimePatches[0].manager", "string"),
    (
        "an initializer's env name",
        {"initializer": {"model": {"env": [{"name": 1}]}}},
        "spec.initializer.model.env[0].name",
        "valid string",
    ),
]


@pytest.mark.parametrize(("spec", "field", "said"), [c[1:] for c in TYPE_ERRORS], ids=[c[0] for c in TYPE_ERRORS])
def test_a_value_of_the_wrong_type_is_named_by_its_whole_path(spec, field, said):
    with pytest.raises(JobSpecError) as caught:
        load_manifest(trainjob(**spec))
    assert caught.value.field == field
    assert said in caught.value.message
    assert len(str(caught.value)) < 1024


# (id, the trainer's fields (or the spec's, with "spec"), the field named): each value alone breaks a rule the
# resolved pod is checked by (kftrain.job.pod_checks), and is refused on the TrainJob's path, not the runtime's.
MERGED: list[tuple[str, dict[str, Any], str]] = [
    ("a limit not a quantity", {"resourcesPerNode": {"limits": {"cpu": "one"}}}, "limits.cpu"),
    ("a request not a quantity", {"resourcesPerNode": {"requests": {"memory": "lots"}}}, "requests.memory"),
    ("a resource name with a space", {"resourcesPerNode": {"limits": {"bad key!": "1"}}}, "limits.bad key!"),
    ("a negative limit", {"resourcesPerNode": {"limits": {"cpu": "-1"}}}, "limits.cpu"),
    ("half a GPU", {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "0.5"}}}, "limits.nvidia.com/gpu"),
    ("an image with a space", {"image": "my image"}, "spec.trainer.image"),
    ("a NUL in the command", {"command": ["python", "a\0b"]}, "spec.trainer.command[1]"),
    ("a NUL in the args", {"args": ["a\0b"]}, "spec.trainer.args[0]"),
    # The trainer's env is merged into the runtime's: the index is the TrainJob's, not the container's.
    ("an env name", {"env": [{"name": "A", "value": "1"}, {"name": "1 x", "value": "v"}]}, "spec.trainer.env[1].name"),
    ("an env var without a name", {"env": [{"value": "v"}]}, "spec.trainer.env[0].name"),
    ("a NUL in an env value", {"env": [{"name": "A", "value": "a\0b"}]}, "spec.trainer.env[0].value"),
    (
        "an env var from a secret of no valid name",
        {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "Bad_Name", "key": "k"}}}]},
        "spec.trainer.env[0].valueFrom.secretKeyRef.name",
    ),
    (
        "an initializer's env name",
        {"spec": {"initializer": {"dataset": {"env": [{"name": "1x", "value": "v"}]}}}},
        "spec.initializer.dataset.env[0].name",
    ),
]


@pytest.mark.parametrize(("trainer", "field"), [c[1:] for c in MERGED], ids=[c[0] for c in MERGED])
def test_a_value_merged_into_the_runtime_is_named_on_the_trainjobs_path(trainer, field):
    spec = trainer.pop("spec") if "spec" in trainer else {"trainer": trainer}
    if not field.startswith("spec."):
        field = f"spec.trainer.resourcesPerNode.{field}"
    with pytest.raises(JobSpecError) as caught:
        load_manifest(trainjob(**spec))
    assert caught.value.field == field


def test_a_huge_resource_name_is_named_on_the_trainjobs_path_in_one_short_line():
    with pytest.raises(JobSpecError) as caught:
        load_manifest(trainjob(trainer={"resourcesPerNode": {"limits": {HUGE: "1"}}}))
    assert caught.value.field.startswith("spec.trainer.resourcesPerNode.limits.xxx")
    assert len(str(caught.value)) < 1024 and "\n" not in str(caught.value)


# (id, the trainer's fields): what only the merge decides is not refused before it.
ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    # builder.go upserts the trainer's env by name: the last of two settings wins.
    ("an env var set twice", {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}),
    ("a request within its limit", {"resourcesPerNode": {"limits": {"cpu": "2"}, "requests": {"cpu": "1"}}}),
    ("a quantity as a number", {"resourcesPerNode": {"limits": {"cpu": 2, "memory": "1Gi"}}}),
]


@pytest.mark.parametrize("trainer", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_what_the_merge_decides_is_left_to_it(trainer):
    load_manifest(trainjob(trainer=trainer))
