"""Which pipeline run and task a launch step belongs to: the ids its job is named and labelled with.

A pipeline author need not pass them. KFP places every output of a task under a path unique to the run and
the task, and keeps it across the task's retries:

- the backend writes ``<root>/<pipeline>/<run uuid>/<task>/<salt uuid>/<output>``: the run's directory is
  ``<root>/<pipeline>/<run uuid>`` (kubeflow/pipelines@2.5.0:backend/src/v2/metadata/client.go, GetPipeline's
  ``pipeline_root``) and the driver adds the task's name and a fresh UUID per task execution
  (kubeflow/pipelines@2.5.0:backend/src/v2/driver/driver.go, Container: ``uuid.NewString()`` given to
  provisionOutputs; the same at 2.17.0 in driver/container.go and driver.go). A retried task pod keeps its
  driver's executor input, so its salt and its job. The step's task is ``<task>/<salt>``: unique even for
  two executions of one task name (a ``dsl.ParallelFor``'s iterations);
- the local runner writes ``<root>/<pipeline>-<timestamp>/<task>/<output>``.

The step reads its run and task from its Model output's URI. Ids given as inputs are used instead when
present; a placeholder the backend left unfilled would give every run the same job name, so it is refused.
``dsl.PIPELINE_TASK_ID_PLACEHOLDER`` is no task id on the backend: it resolves to the id of the task's
parent DAG execution (kubeflow/pipelines@2.17.0:backend/src/v2/driver/resolve.go, resolveInputParameter:
``{{$.pipeline_task_uuid}}`` is ``opts.DAGExecutionID``), shared by every task of the DAG, so two launch
steps given it would share one job. Leave ``task_id`` empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kftrain.errors import JobSpecError

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass(frozen=True)
class RunIdentity:
    run_id: str
    task_id: str
    # Where the ids came from, for the step's log: "inputs" or the output URI.
    source: str


def resolve_run_identity(run_id: str, task_id: str, output_uri: str) -> RunIdentity:
    """The run and task of a launch step: from its inputs when given, else from its output artifact's URI."""
    for name, value in (("run_id", run_id), ("task_id", task_id)):
        if "{{" in value or "}}" in value:
            raise JobSpecError(
                name,
                f"{value!r} is a KFP placeholder the backend did not fill in; every run would get the same job "
                "name. Leave the input empty: the step reads its run and task from its output URI",
            )
    if run_id or task_id:
        if not (run_id and task_id):
            raise JobSpecError("task_id" if run_id else "run_id", "missing: give both ids, or neither")
        return RunIdentity(run_id, task_id, "inputs")
    return identity_from_output_uri(output_uri)


def identity_from_output_uri(uri: str) -> RunIdentity:
    """The run and task of the step that owns the output at ``uri`` (see the module docstring for the layouts)."""
    path = uri.split("://", 1)[-1].rstrip("/")
    parts = [p for p in path.split("/") if p][:-1]  # the output's own name is not part of the task
    # The backend's layout: <run uuid>/<task>/<salt uuid> end the path.
    if len(parts) >= 3 and _UUID.match(parts[-3]) and _UUID.match(parts[-1]):
        return RunIdentity(parts[-3], f"{parts[-2]}/{parts[-1]}", uri)
    # The local runner's: <pipeline>-<timestamp>/<task>.
    if len(parts) >= 2 and not any(_UUID.match(p) for p in parts[-2:]):
        return RunIdentity(parts[-2], parts[-1], uri)
    raise JobSpecError(
        "run_id",
        f"cannot tell the pipeline run from the output URI {uri!r} (neither KFP's backend layout "
        "<run uuid>/<task>/<uuid>/<output> nor its local runner's <run>/<task>/<output>); pass run_id "
        "(dsl.PIPELINE_JOB_ID_PLACEHOLDER) and a task_id unique to this launch task",
    )
