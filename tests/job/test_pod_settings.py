"""One declaration per pod setting (kftrain/job/pod_settings.py): a setting made up here, declared once as a field,
is a launch input of every kind's component and a pipeline parameter, checked from either source, passed through
the TaskConfig and applied to every kind's pods, the explicit input first; and the shipped settings' passthroughs,
step placements and pipeline parameters are what their declarations say."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from kftrain.errors import JobSpecError
from kftrain.job import KINDS, TrainingJob, apply_pod_settings, kind_for
from kftrain.job import pod_checks as check
from kftrain.job.pod_apply import Replica
from kftrain.job.pod_settings import (
    PodSettings,
    pipeline_settings,
    setting,
    settings_of,
    step_placements,
    task_config_passthroughs,
)
from kftrain.launch.inputs import launch_inputs, parse_launch_inputs, pipeline_inputs

PROGRAM = ["python", "-c", "print(1)"]
# A pod field every kind can carry (a TrainJob's only through Trainer's PodSpecPatch, which has this one and lacks
# others, such as runtimeClassName: kftrain/job/kinds/trainjob/patch.py refuses those, naming them).
FIELD = "terminationGracePeriodSeconds"


def _grace(r: Replica, value: int, field: str) -> None:
    if value >= 0:
        r.pod.extra.setdefault(FIELD, value)


@dataclass(frozen=True)
class WithGracePeriod(PodSettings):
    """The shipped settings and one made up, declared in this one place."""

    grace_seconds: int = setting(
        -1,
        "Seconds every replica's pod gets to stop; -1: the cluster's default.",
        check=lambda field, value: check.integer(field, value, low=-1),
        on_pod=_grace,
        task_config="KUBERNETES_GRACE_PERIOD",
        to_launch_pod=True,
        step="set_grace_period_json",
    )


def job_of(kind: str, settings: type[PodSettings] = WithGracePeriod, **inputs: Any) -> tuple[TrainingJob, Any]:
    """A job of ``kind`` built from ``inputs`` as the launch step builds it, and its parsed explicit settings."""
    step_kind = kind_for(kind)
    parsed = parse_launch_inputs(step_kind, {"command": PROGRAM, **inputs}, settings)
    return parsed.request.to_job(runtimes=step_kind.runtimes_from_env()), parsed.pods


def grace_periods(job: TrainingJob) -> dict[str, Any]:
    return {rtype: spec.template.spec.extra.get(FIELD) for rtype, spec in job.replica_specs.items()}


@pytest.mark.parametrize("kind", KINDS.names())
def test_a_made_up_setting_is_an_input_of_every_kinds_launch_component(kind: str) -> None:
    inputs = {i.name: i for i in launch_inputs(kind_for(kind), WithGracePeriod)}
    assert inputs["grace_seconds"].default == -1 and inputs["grace_seconds"].type is int
    assert "grace_seconds" not in {i.name for i in launch_inputs(kind_for(kind))}  # only where declared


def test_a_made_up_setting_is_a_pipeline_parameter_placed_on_every_step() -> None:
    assert "grace_seconds" in {i.name for i in pipeline_inputs(WithGracePeriod)}
    assert step_placements(WithGracePeriod)["grace_seconds"] == "set_grace_period_json"


def test_a_made_up_setting_is_checked_from_either_source() -> None:
    with pytest.raises(JobSpecError) as given:
        job_of("PyTorchJob", grace_seconds=-2)
    assert given.value.field == "grace_seconds"
    with pytest.raises(JobSpecError) as passed:
        WithGracePeriod.from_task_config(SimpleNamespace(grace_seconds="soon"))
    assert passed.value.field == "task_config.grace_seconds"


def test_a_made_up_setting_passes_through_the_task_config() -> None:
    assert task_config_passthroughs(WithGracePeriod)["KUBERNETES_GRACE_PERIOD"] is True
    assert WithGracePeriod.from_task_config(SimpleNamespace(grace_seconds=5)).grace_seconds == 5


@pytest.mark.parametrize("kind", KINDS.names())
def test_a_made_up_setting_reaches_every_kinds_pods_the_explicit_input_first(kind: str) -> None:
    task = WithGracePeriod.from_task_config(SimpleNamespace(grace_seconds=5))
    job, explicit = job_of(kind, grace_seconds=30)
    assert set(grace_periods(apply_pod_settings(job, explicit)).values()) == {30}
    assert set(grace_periods(apply_pod_settings(job, explicit, task)).values()) == {30}
    job, none = job_of(kind)
    assert set(grace_periods(apply_pod_settings(job, none, task)).values()) == {5}
    assert set(grace_periods(apply_pod_settings(job, none)).values()) == {None}


def test_a_task_config_carries_only_what_it_passes_through() -> None:
    task = PodSettings.from_task_config(SimpleNamespace(node_selector={"pool": "gpu"}, env=None))
    assert [name for name, _, _ in task.declared()] == [
        name for name, declared in settings_of().items() if declared.task_config
    ]
    assert task.sets_any() and not PodSettings.from_task_config(SimpleNamespace()).sets_any()
    job, explicit = job_of("PyTorchJob", PodSettings, storage_secret="", shm_size="")
    applied = apply_pod_settings(job, explicit, task)
    assert all(not spec.template.spec.extra.get("volumes") for spec in applied.replica_specs.values())


def test_the_shipped_declarations() -> None:
    assert task_config_passthroughs() == {
        "KUBERNETES_NODE_SELECTOR": True,
        "KUBERNETES_TOLERATIONS": True,
        "RESOURCES": False,  # a GPU asked for the training replicas is never held by the launch pod
        "ENV": True,
        "KUBERNETES_AFFINITY": False,
        "KUBERNETES_VOLUMES": True,
    }
    assert step_placements() == {"node_selector": "add_node_selector_json", "tolerations": "add_toleration_json"}
    assert pipeline_settings() == [
        "storage_secret",
        "cpu",
        "memory",
        "gpus",
        "node_selector",
        "tolerations",
        "service_account",
        "image_pull_secrets",
        "priority_class",
        "queue_name",
    ]


def test_every_setting_has_an_effect_and_a_check() -> None:
    for name, declared in settings_of().items():
        assert (declared.on_pod is None) != (declared.on_job is None), name
        assert callable(declared.check), name
