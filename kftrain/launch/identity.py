"""Which pipeline run and task a launch step belongs to, read from its Model output's URI (inputs win; an unfilled
placeholder is refused): the ids its job is named and labelled with.

- KFP's backend: ``<root>/<pipeline>/<run uuid>/<task>/<salt uuid>/<output>``, a salt per task execution, kept by a
  retried pod (kubeflow/pipelines@2.5.0:backend/src/v2/driver/driver.go, Container: ``uuid.NewString()``); the
  task is ``<task>/<salt>``, unique even in a ``dsl.ParallelFor``. Locally: ``<root>/<pipeline>-<time>/<task>``.
- ``dsl.PIPELINE_TASK_ID_PLACEHOLDER`` is the parent DAG's id, shared by its tasks
  (kubeflow/pipelines@2.17.0:backend/src/v2/driver/resolve.go, resolveInputParameter): leave ``task_id`` empty.
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
