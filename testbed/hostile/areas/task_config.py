"""The launch task's own settings (``dsl.TaskConfig``: kftrain/job/pod_settings.py), through a launch component's
body as KFP's executor calls it (testbed.launch_harness.render_launch: everything but the job's run): env PET_NNODES /
DMLC_TRACKER_URI / OMPI_MCA_orte_default_hostfile, KFTRAIN_MODEL_URI, limits as a string, requests above limits, a
task volume named like the manifest's, a mount of an undefined volume, malformed affinity, and what Kubernetes takes.

The settings are testbed/task_config_cases.py's ``REFUSED`` and ``TAKEN``, taken by name when the case runs; the
variants below them are this module's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from testbed.hostile.case import CLEAR, FINE, Case, Sandbox

AREA = "task-config"
SURFACE = "<kind>job_launch_task_config(task_config=TaskConfig(...))"


def _cases() -> Any:
    from testbed import task_config_cases

    return task_config_cases


def _render(component: Any, task: dict[str, Any], inputs: dict[str, Any], sb: Sandbox) -> None:
    import pytest
    from kfp import dsl

    from testbed.launch_harness import render_launch

    sb.ready()
    with pytest.MonkeyPatch.context() as patch:
        render_launch(component, patch, sb.work, task_config=dsl.TaskConfig(**task), **inputs)


def _refused(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        component, task, inputs, _ = _cases().REFUSED[key]
        _render(component, task, inputs, sb)

    return run


def _taken(key: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        task, inputs, _ = _cases().TAKEN[key]
        _render(_cases().pytorchjob_launch_task_config, task, inputs, sb)

    return run


def _variant(task: dict[str, Any], **inputs: Any) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        _render(_cases().pytorchjob_launch_task_config, task, inputs, sb)

    return run


# (REFUSED's key, what the one line must name)
REFUSED = {
    "a torch runtime's reserved env": "PET_NNODES",
    "an xgboost runtime's reserved env": "DMLC_TRACKER_URI",
    "an MPI runtime's reserved env": "OMPI_MCA_orte_default_hostfile",
    "the model URI the step sets": "KFTRAIN_MODEL_URI",
    "an env name the API server refuses": "task_config.env[0]",
    "an env name set twice": "task_config.env[1]",
    "an env value from two sources": "task_config.env[0].valueFrom",
    "limits given as a string": "task_config.resources.limits",
    "a request above its limit": "task_config.resources.requests.cpu",
    "a request above the job's own limit": "resources.requests.cpu",
    "a volume named as the job's, another source": "task_config.volumes[0].name",
    "a volume named as an explicit input's": "task_config.volumes[0].name",
    "a mount of a volume the pod lacks": "task_config.volume_mounts[0].name",
    "an affinity not a mapping": "task_config.affinity.nodeAffinity",
    "an affinity operator": "operator",
    "a pod affinity without its topology key": "topologyKey",
    "a node selector key": "task_config.node_selector",
    "a toleration": "task_config.tolerations[0].operator",
}
TAKEN = ("the job's own volume, given again", "an affinity the API server takes")
# (name, the task's settings, the explicit inputs, what the one line must name): this module's variants.
VARIANTS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("env a mapping, not a list", {"env": {"A": "1"}}, {}, "task_config.env"),
    ("a limit that is no quantity", {"resources": {"limits": {"cpu": "lots"}}}, {}, "task_config.resources.limits.cpu"),
    ("a volume named twice", {"volumes": [{"name": "a", "emptyDir": {}}] * 2}, {}, "task_config.volumes[1]"),
    (
        "a mount without a path",
        {"volumes": [{"name": "a", "emptyDir": {}}], "volume_mounts": [{"name": "a"}]},
        {},
        "task_config.volume_mounts[0]",
    ),
]
FINE_VARIANTS: list[tuple[str, dict[str, Any]]] = [("an empty TaskConfig", {})]

CASES: list[Case] = [
    *(Case(AREA, key, CLEAR, SURFACE, _refused(key), names=(name,)) for key, name in REFUSED.items()),
    *(Case(AREA, f"{key} (taken)", FINE, SURFACE, _taken(key)) for key in TAKEN),
    *(Case(AREA, key, CLEAR, SURFACE, _variant(task, **inputs), names=(name,)) for key, task, inputs, name in VARIANTS),
    *(Case(AREA, key, FINE, SURFACE, _variant(task)) for key, task in FINE_VARIANTS),
]
