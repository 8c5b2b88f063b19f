"""What JobSet refuses in a runtime's JobSet template, checked when the runtime is read: its replicated jobs' names,
their ``dependsOn`` order, the success policy's targets and the failure policy (:mod:`.failure_policy`). A TrainJob's
``runtimePatches`` cannot touch these fields (kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/trainjob_types.go,
ReplicatedJobPatch), and a JobSet breaking one runs no job. The rules are kubernetes-sigs/jobset@v0.12.0's (Trainer
v2.3.0's pin): api/jobset/v1alpha2/jobset_types.go (list map by name, dependsOn MaxItems=5, status Ready|Complete),
pkg/webhooks/jobset_webhook.go, ValidateCreate (dependsOn names an earlier job; DNS-1035 job names; success targets),
pkg/controllers/depends_on.go (a job depending on itself never starts: refused here as a cycle); and the API server's
for each Job: restartPolicy Never or OnFailure (kubernetes@v1.36.3:pkg/apis/batch/validation/validation.go).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.trainjob import failure_policy

DEPENDS_ON_STATUSES = ("Ready", "Complete")
JOB_RESTART_POLICIES = ("OnFailure", "Never")
MAX_DEPENDS_ON = 5
# kubernetes/apimachinery@v0.36.3:pkg/util/validation/validation.go: dns1035LabelFmt, DNS1035LabelMaxLength.
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_MAX = 63
# The shortest JobSet name (one letter): a replicated job's name that makes no valid job name with it makes none.
_SHORTEST_JOBSET_NAME = "a"


def check_template(template_spec: Mapping[str, Any], runtime: str, where: str) -> None:
    """Refuse the JobSet template spec ``template_spec`` of ``runtime`` (its kind and name, for messages) when JobSet
    would refuse the JobSet built from it; ``where`` is the field path of ``template_spec`` (with its file)."""
    jobs: Sequence[Any] = template_spec.get("replicatedJobs") or []
    names = _names(jobs, runtime, where)
    for i, rjob in enumerate(jobs):
        _check_depends_on_items(rjob, names[i], runtime, f"{where}.replicatedJobs[{i}].dependsOn")
        _check_restart_policy(rjob, runtime, f"{where}.replicatedJobs[{i}].template.spec.template.spec.restartPolicy")
    failure_policy.parse(template_spec, names, runtime, where)
    _check_missing(jobs, names, runtime, where)
    _check_cycles(jobs, names, runtime, where)
    _check_order(jobs, names, runtime, where)
    failure_policy.check_targets(
        (template_spec.get("successPolicy") or {}).get("targetReplicatedJobs") or [],
        names,
        runtime,
        f"{where}.successPolicy.targetReplicatedJobs",
        policy="",
        listing="(its replicatedJobs: {}); the job could never succeed",
    )


def _names(jobs: Sequence[Any], runtime: str, where: str) -> list[str]:
    """Each replicated job's name: given, once, and one JobSet can name its jobs after."""
    names: list[str] = []
    position: dict[str, int] = {}
    for i, rjob in enumerate(jobs):
        path = f"{where}.replicatedJobs[{i}].name"
        name = rjob.get("name") if isinstance(rjob, Mapping) else None
        if not isinstance(name, str) or not name:
            raise JobSpecError(path, f"{runtime}: missing: each replicatedJob has a name (the list is keyed by it)")
        if name in position:
            raise JobSpecError(
                path, f"{runtime}: replicatedJob {name!r} is already replicatedJobs[{position[name]}]: names are keys"
            )
        replicas = rjob.get("replicas", 1)
        last = replicas - 1 if isinstance(replicas, int) and not isinstance(replicas, bool) else 0
        job_name = f"{_SHORTEST_JOBSET_NAME}-{name}-{last}"
        if len(job_name) > _LABEL_MAX or not _DNS1035_LABEL.fullmatch(job_name):
            raise JobSpecError(
                path,
                f"{runtime}: replicatedJob {name!r}: JobSet names its jobs <trainjob>-{name}-<index>, which must be "
                f"a DNS-1035 label (lower-case letters, digits and '-', at most {_LABEL_MAX} characters) whatever "
                "the TrainJob is called",
            )
        position[name] = i
        names.append(name)
    return names


def _check_restart_policy(rjob: Any, runtime: str, path: str) -> None:
    pod = ((((rjob or {}).get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    policy = pod.get("restartPolicy")
    if policy not in (None, "", *JOB_RESTART_POLICIES):
        raise JobSpecError(
            path,
            f"{runtime}: {policy!r}: the pods of a Job restart {' or '.join(JOB_RESTART_POLICIES)}; the API server "
            "refuses the Job JobSet would create for it",
        )


def _check_depends_on_items(rjob: Mapping[str, Any], name: str, runtime: str, path: str) -> None:
    depends_on = rjob.get("dependsOn")
    if depends_on is None:
        return
    if not isinstance(depends_on, list):
        raise JobSpecError(path, f"{runtime}: replicatedJob {name!r}: expected a list of {{name, status}}")
    if len(depends_on) > MAX_DEPENDS_ON:
        raise JobSpecError(
            path, f"{runtime}: replicatedJob {name!r}: {len(depends_on)} items, more than the {MAX_DEPENDS_ON} allowed"
        )
    seen: list[str] = []
    for k, item in enumerate(depends_on):
        dep = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(dep, str) or not dep:
            raise JobSpecError(f"{path}[{k}].name", f"{runtime}: replicatedJob {name!r}: missing")
        if dep in seen:
            raise JobSpecError(f"{path}[{k}].name", f"{runtime}: replicatedJob {name!r}: {dep!r} is listed twice")
        seen.append(dep)
        status = item.get("status")
        if status not in DEPENDS_ON_STATUSES:
            raise JobSpecError(
                f"{path}[{k}].status",
                f"{runtime}: replicatedJob {name!r}: {status!r} must be one of: {', '.join(DEPENDS_ON_STATUSES)}",
            )


def _deps(rjob: Mapping[str, Any]) -> list[str]:
    return [str(item["name"]) for item in rjob.get("dependsOn") or []]


def _check_missing(jobs: Sequence[Any], names: list[str], runtime: str, where: str) -> None:
    known = set(names)
    for i, rjob in enumerate(jobs):
        for k, dep in enumerate(_deps(rjob)):
            if dep not in known:
                raise JobSpecError(
                    f"{where}.replicatedJobs[{i}].dependsOn[{k}].name",
                    f"{runtime}: replicatedJob {names[i]!r} depends on {dep!r}, which is not one of its replicatedJobs "
                    f"({', '.join(names)}): it would never start",
                )


def _check_cycles(jobs: Sequence[Any], names: list[str], runtime: str, where: str) -> None:
    """The first cycle of ``dependsOn``, as the jobs it goes through: each waits for the next, so none starts. A
    depth-first walk kept on a list, not the call stack: a runtime may chain thousands of jobs."""
    graph = {names[i]: _deps(rjob) for i, rjob in enumerate(jobs)}
    finished: set[str] = set()
    for start in names:
        if start in finished:
            continue
        path = [start]  # the jobs being walked, each waiting on the next
        on_path = {start}
        pending = [iter(graph[start])]
        while pending:
            dep = next(pending[-1], None)
            if dep is None:
                on_path.discard(path[-1])
                finished.add(path.pop())
                pending.pop()
            elif dep in on_path:
                cycle = [*path[path.index(dep) :], dep]
                raise JobSpecError(
                    f"{where}.replicatedJobs[{names.index(dep)}].dependsOn",
                    f"{runtime}: replicatedJob {dep!r} depends on itself through the cycle {' -> '.join(cycle)}: "
                    "none of these jobs would ever start",
                )
            elif dep not in finished:
                path.append(dep)
                on_path.add(dep)
                pending.append(iter(graph[dep]))


def _check_order(jobs: Sequence[Any], names: list[str], runtime: str, where: str) -> None:
    """JobSet's own rule: a job depends only on jobs listed before it (so never the first one)."""
    position = {name: i for i, name in enumerate(names)}
    for i, rjob in enumerate(jobs):
        for k, dep in enumerate(_deps(rjob)):
            if i == 0:
                raise JobSpecError(
                    f"{where}.replicatedJobs[0].dependsOn",
                    f"{runtime}: replicatedJob {names[0]!r}: DependsOn can't be set for the first ReplicatedJob",
                )
            if position[dep] > i:
                raise JobSpecError(
                    f"{where}.replicatedJobs[{i}].dependsOn[{k}].name",
                    f"{runtime}: replicatedJob: {names[i]} cannot depend on replicatedJob: {dep} (listed after it; "
                    "JobSet creates the jobs in their order)",
                )
