"""KFP's driver: which inputs a task gets, whether it runs, and what its outputs will be called.

Each rule is the backend's; the rules, with their upstream lines, are in the comment below the imports.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from testbed.kfp_backend import expressions

# Each rule is the backend's, at the lines cited (A = kubeflow/pipelines@2.5.0:backend/src/v2/driver/driver.go,
# B = kubeflow/pipelines@2.17.0:backend/src/v2/driver/resolve.go):
#
# - A task's inputs resolve against its parent DAG's execution only: a ``componentInputParameter`` must name an
#   input of that DAG ("parent DAG does not have input parameter", A:1611, B:396); so must a
#   ``componentInputArtifact``, optional or not ("parent DAG does not have input artifact", A:1721, B:551): an
#   optional artifact the DAG lacks fails the task, there is no optional case.
# - A ``runtimeValue`` constant is replaced only when the whole string is one placeholder (A:1643-1656,
#   B:435-452: ``switch valStr``); ``{{$.pipeline_task_uuid}}`` is the parent DAG's execution id (A:1652,
#   B:444); a placeholder inside a longer string stays as written.
# - A null parameter of an optional input is skipped; otherwise an error (B:336-346).
# - Types are checked and STRING inputs take any value as its JSON text (B:171-262).
# - ``triggerPolicy.condition`` is evaluated on the resolved inputs; a task whose condition is false does not
#   run and has no outputs (A:287-294, 315).
# - Outputs are provisioned under the run's directory with a fresh salt (:mod:`testbed.kfp_backend.layout`).
# - A ``dsl.TaskConfig`` input is not resolved with the others (B:324-331); the container driver fills it from
#   the pod it builds (kubeflow/pipelines@2.17.0:backend/src/v2/driver/container.go:283-310).


NULL = object()  # a parameter whose value is null (an optional pipeline input given none)


class DriverError(Exception):
    """What the backend's driver fails the task with: the run stops there."""


@dataclass
class DagExecution:
    id: int
    name: str
    component: dict[str, Any]
    parameters: dict[str, Any]
    artifacts: dict[str, list[dict[str, Any]]]
    tasks: dict[str, TaskExecution] = field(default_factory=dict)


@dataclass
class TaskExecution:
    name: str
    triggered: bool
    dag: DagExecution | None = None  # a DAG task's own execution
    output_parameters: dict[str, Any] = field(default_factory=dict)
    output_artifacts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    record: Any = None  # what the launcher did (testbed.kfp_backend.launcher.LaunchRecord)


_ids = itertools.count(100)


def next_execution_id() -> int:
    return next(_ids)


@dataclass(frozen=True)
class RunContext:
    run_id: str
    run_name: str
    run_display_name: str


def placeholder_value(value: Any, dag: DagExecution, task_name: str, run: RunContext) -> Any:
    """A ``runtimeValue`` constant as the driver passes it: whole placeholders replaced, anything else as written."""
    if not isinstance(value, str):
        return value
    return {
        "{{$.pipeline_job_name}}": run.run_display_name,
        "{{$.pipeline_job_resource_name}}": run.run_name,
        "{{$.pipeline_job_uuid}}": run.run_id,
        "{{$.pipeline_task_name}}": task_name,
        "{{$.pipeline_task_uuid}}": str(dag.id),
    }.get(value, value)


def resolve_parameter(spec: dict[str, Any], dag: DagExecution, task_name: str, run: RunContext) -> Any:
    """One ``InputParameterSpec`` of a task in ``dag`` (also used for platform config parameters)."""
    if "componentInputParameter" in spec:
        name = spec["componentInputParameter"]
        if name not in dag.parameters:
            raise DriverError(f"{task_name}: parent DAG {dag.name} does not have input parameter {name}")
        return dag.parameters[name]
    if "taskOutputParameter" in spec:
        ref = spec["taskOutputParameter"]
        return upstream_parameter(dag, ref["producerTask"], ref["outputParameterKey"], task_name)
    if "runtimeValue" in spec:
        return placeholder_value(spec["runtimeValue"].get("constant"), dag, task_name, run)
    raise DriverError(f"{task_name}: parameter spec {spec} is not modelled by this harness")


def upstream_parameter(dag: DagExecution, producer: str, key: str, task_name: str) -> Any:
    task = dag.tasks.get(producer)
    if task is None or not task.triggered:
        raise DriverError(f"{task_name}: producer task, {producer}, not in tasks")
    if task.dag is not None:  # a DAG's output is one of its tasks' (B:610-680)
        spec = task.dag.component["dag"]["outputs"]["parameters"][key]["valueFromParameter"]
        return upstream_parameter(task.dag, spec["producerSubtask"], spec["outputParameterKey"], task_name)
    if key not in task.output_parameters:
        raise DriverError(f"{task_name}: producer {producer} has no output parameter {key}")
    return task.output_parameters[key]


def upstream_artifacts(dag: DagExecution, producer: str, key: str, task_name: str) -> list[dict[str, Any]]:
    task = dag.tasks.get(producer)
    if task is None or not task.triggered:
        raise DriverError(f"{task_name}: cannot find producer task {producer!r}")
    if task.dag is not None:
        selector = task.dag.component["dag"]["outputs"]["artifacts"][key]["artifactSelectors"][0]
        return upstream_artifacts(task.dag, selector["producerSubtask"], selector["outputArtifactKey"], task_name)
    if key not in task.output_artifacts:
        raise DriverError(f"{task_name}: cannot find output artifact key {key!r} in producer task {producer!r}")
    return task.output_artifacts[key]


def resolve_inputs(
    task_spec: dict[str, Any], component: dict[str, Any], dag: DagExecution, run: RunContext
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The task's parameter values and artifacts, checked against its component's input definitions."""
    name = task_spec["taskInfo"]["name"]
    definitions = component.get("inputDefinitions", {})
    param_defs = definitions.get("parameters", {})
    parameters: dict[str, Any] = {}
    for key, spec in task_spec.get("inputs", {}).get("parameters", {}).items():
        if param_defs.get(key, {}).get("parameterType") == "TASK_CONFIG":
            continue  # filled from the pod (container.go:283-310)
        value = resolve_parameter(spec, dag, name, run)
        if value is NULL or value is None:
            if param_defs.get(key, {}).get("isOptional"):
                continue
            raise DriverError(f"{name}: the resolved input parameter {key} is null")
        parameters[key] = value
    for key, spec in param_defs.items():
        if spec.get("parameterType") == "TASK_CONFIG":
            continue
        if key not in parameters:
            if not spec.get("isOptional") and "defaultValue" not in spec:
                raise DriverError(f"{name}: neither value nor default value provided for non-optional parameter {key}")
            continue
        parameters[key] = checked_type(name, key, spec.get("parameterType", ""), parameters[key])
    artifacts: dict[str, list[dict[str, Any]]] = {}
    for key, spec in task_spec.get("inputs", {}).get("artifacts", {}).items():
        if "componentInputArtifact" in spec:
            source = spec["componentInputArtifact"]
            if source not in dag.artifacts:
                raise DriverError(f"{name}: parent DAG {dag.name} does not have input artifact {source}")
            artifacts[key] = dag.artifacts[source]
        elif "taskOutputArtifact" in spec:
            ref = spec["taskOutputArtifact"]
            artifacts[key] = upstream_artifacts(dag, ref["producerTask"], ref["outputArtifactKey"], name)
        else:
            raise DriverError(f"{name}: artifact spec {spec} is not modelled by this harness")
    return parameters, artifacts


def checked_type(task: str, name: str, kind: str, value: Any) -> Any:
    """B:206-262: a STRING input takes any value as text; other types must match."""
    if kind == "STRING":
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    expected = {
        "NUMBER_INTEGER": (int, float),
        "NUMBER_DOUBLE": (int, float),
        "BOOLEAN": (bool,),
        "LIST": (list,),
        "STRUCT": (dict,),
        "TASK_FINAL_STATUS": (dict,),
    }.get(kind)
    if expected is None:
        raise DriverError(f"{task}: parameter type {kind} of {name} is not modelled by this harness")
    if not isinstance(value, expected) or (kind.startswith("NUMBER") and isinstance(value, bool)):
        raise DriverError(f"{task}: input parameter {name!r} type mismatch: expect {kind}, got {type(value).__name__}")
    return value


def will_trigger(task_spec: dict[str, Any], parameters: dict[str, Any]) -> bool:
    condition = task_spec.get("triggerPolicy", {}).get("condition", "")
    return expressions.evaluate(condition, parameters) if condition else True


def task_order(tasks: dict[str, dict[str, Any]]) -> list[str]:
    """The DAG's tasks in an order that runs every producer first (dependentTasks, and every task it reads)."""
    needs: dict[str, set[str]] = {}
    for name, spec in tasks.items():
        deps = set(spec.get("dependentTasks", []))
        inputs = spec.get("inputs", {})
        for param in inputs.get("parameters", {}).values():
            if "taskOutputParameter" in param:
                deps.add(param["taskOutputParameter"]["producerTask"])
        for art in inputs.get("artifacts", {}).values():
            if "taskOutputArtifact" in art:
                deps.add(art["taskOutputArtifact"]["producerTask"])
        needs[name] = deps
    order: list[str] = []
    while needs:
        ready = sorted(n for n, deps in needs.items() if deps <= set(order))
        if not ready:
            raise DriverError(f"tasks {sorted(needs)} depend on each other")
        order.extend(ready)
        for n in ready:
            del needs[n]
    return order
