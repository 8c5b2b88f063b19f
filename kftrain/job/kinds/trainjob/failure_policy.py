"""A runtime's JobSet ``failurePolicy``: what JobSet does when one of a TrainJob's Jobs fails, and what it refuses.

kubernetes-sigs/jobset@v0.12.0 (Trainer v2.3.0's pin): pkg/controllers/failure_policy.go, executeFailurePolicy (no
policy: fail, ``FailedJobs``; else the first rule matching the Job's reason, message pattern and replicated job
decides; none: ``RestartJobSet``, which fails at ``maxRestarts`` with ``ReachedMaxRestarts``); pkg/webhooks/
jobset_webhook.go, validateFailurePolicy (rule names, targets, reasons; RestartJob and InPlaceRestart refused while
their Alpha gates are off, pkg/features/features.go). A local Job fails at its backoffLimit with
``BackoffLimitExceeded`` (kubernetes@v1.36.3:pkg/controller/job/job_controller.go).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.restarts import AfterJobFailure

FAIL_JOBSET = "FailJobSet"
RESTART_JOBSET = "RestartJobSet"
RESTART_JOBSET_UNCOUNTED = "RestartJobSetAndIgnoreMaxRestarts"
ACTIONS = (FAIL_JOBSET, RESTART_JOBSET, RESTART_JOBSET_UNCOUNTED)
GATED_ACTIONS = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")  # feature gate RestartJob
RESTART_STRATEGIES = ("Recreate", "BlockingRecreate")
GATED_STRATEGY = "InPlaceRestart"  # feature gate InPlaceRestart
# What a rule may name in onJobFailureReasons (jobset_webhook.go, validOnJobFailureReasons: the batch/v1 JobReason*).
JOB_FAILURE_REASONS = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"
_RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_RULE_NAME_MAX = 128


@dataclass(frozen=True)
class Rule:
    name: str
    action: str
    reasons: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()

    def matches(self, replicated_job: str, reason: str, message: str) -> bool:
        return (
            (not self.reasons or reason in self.reasons)
            and (not self.patterns or any(re.search(p, message) for p in self.patterns))
            and (not self.targets or replicated_job in self.targets)
        )


@dataclass(frozen=True)
class FailurePolicy:
    max_restarts: int
    rules: tuple[Rule, ...]

    def after(self, replicated_job: str, reason: str, message: str, counted_restarts: int) -> AfterJobFailure:
        """JobSet's verdict when a Job of ``replicated_job`` failed with ``reason`` and ``message``, the JobSet
        having made ``counted_restarts`` restarts that count towards maxRestarts."""
        rule = next((r for r in self.rules if r.matches(replicated_job, reason, message)), None)
        action = rule.action if rule else RESTART_JOBSET
        by = f"failurePolicy rule {rule.name!r} ({action})" if rule else f"failurePolicy ({action}: no rule matched)"
        if action == FAIL_JOBSET:
            return AfterJobFailure(False, False, "FailJobSetAction", by)
        if action == RESTART_JOBSET_UNCOUNTED:
            return AfterJobFailure(True, False, "", by)
        if counted_restarts >= self.max_restarts:
            return AfterJobFailure(
                False, True, "ReachedMaxRestarts", f"{by}: {counted_restarts} of maxRestarts {self.max_restarts} made"
            )
        return AfterJobFailure(True, True, "", by)


def parse(template_spec: Mapping[str, Any], names: Sequence[str], runtime: str, where: str) -> FailurePolicy | None:
    """The failurePolicy of the JobSet template spec ``template_spec`` (``names``: its replicated jobs), refused as
    JobSet or the runtime's CRD would refuse it; ``where`` is the path of ``template_spec``."""
    policy = template_spec.get("failurePolicy")
    if policy is None:
        return None
    at = f"{where}.failurePolicy"
    if not isinstance(policy, Mapping):
        raise JobSpecError(at, f"{runtime}: expected an object")
    max_restarts = policy.get("maxRestarts", 0)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int):
        raise JobSpecError(f"{at}.maxRestarts", f"{runtime}: expected a whole number, got {max_restarts!r}")
    strategy = policy.get("restartStrategy", "Recreate")
    if strategy == GATED_STRATEGY:
        raise JobSpecError(
            f"{at}.restartStrategy",
            f"{runtime}: InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled "
            "(it is by default in JobSet v0.12.0): JobSet would refuse the TrainJob's JobSet",
        )
    if strategy not in RESTART_STRATEGIES:
        raise JobSpecError(
            f"{at}.restartStrategy", f"{runtime}: {strategy!r} is not one of: Recreate, BlockingRecreate"
        )
    rules = policy.get("rules") or []
    if not isinstance(rules, list):
        raise JobSpecError(f"{at}.rules", f"{runtime}: expected a list")
    parsed: list[Rule] = []
    first: dict[str, int] = {}
    for i, item in enumerate(rules):
        parsed.append(_rule(item, names, runtime, f"{at}.rules[{i}]"))
        name = parsed[-1].name
        if name in first:
            raise JobSpecError(
                f"{at}.rules[{i}].name",
                f"{runtime}: rule names are not unique: {name!r} is already rules[{first[name]}]'s",
            )
        first[name] = i
    return FailurePolicy(max_restarts, tuple(parsed))


def _rule(item: Any, names: Sequence[str], runtime: str, at: str) -> Rule:
    if not isinstance(item, Mapping):
        raise JobSpecError(at, f"{runtime}: expected an object with a name and an action")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise JobSpecError(f"{at}.name", f"{runtime}: missing: each rule has a name (the runtime's CRD requires it)")
    if len(name) > _RULE_NAME_MAX or not _RULE_NAME.fullmatch(name):
        raise JobSpecError(
            f"{at}.name",
            f"{runtime}: invalid failure policy rule name {name!r}: a letter, then letters, digits and '_,:', ending "
            f"with a letter, a digit or '_', at most {_RULE_NAME_MAX} characters",
        )
    action = item.get("action")
    if action in GATED_ACTIONS:
        raise JobSpecError(
            f"{at}.action",
            f"{runtime}: {action} is not allowed when JobSet's RestartJob feature gate is disabled (it is by default "
            "in JobSet v0.12.0): JobSet would refuse the TrainJob's JobSet",
        )
    if action not in ACTIONS:
        raise JobSpecError(f"{at}.action", f"{runtime}: {action!r} is not one of: {', '.join(ACTIONS)}")
    reasons = _strings(item.get("onJobFailureReasons"), runtime, f"{at}.onJobFailureReasons")
    for k, reason in enumerate(reasons):
        if reason not in JOB_FAILURE_REASONS:
            raise JobSpecError(
                f"{at}.onJobFailureReasons[{k}]",
                f"{runtime}: {reason!r} is not a Job's failure reason: {', '.join(JOB_FAILURE_REASONS)}",
            )
    patterns = _strings(item.get("onJobFailureMessagePatterns"), runtime, f"{at}.onJobFailureMessagePatterns")
    for k, pattern in enumerate(patterns):
        try:
            re.compile(pattern)
        except re.error as exc:
            # JobSet logs an invalid pattern and lets it match nothing: the rule would silently never apply.
            raise JobSpecError(
                f"{at}.onJobFailureMessagePatterns[{k}]", f"{runtime}: {pattern!r} is not a regular expression: {exc}"
            ) from None
    targets = _strings(item.get("targetReplicatedJobs"), runtime, f"{at}.targetReplicatedJobs")
    check_targets(targets, names, runtime, f"{at}.targetReplicatedJobs", policy=" in failure policy", listing="({})")
    return Rule(name, action, tuple(reasons), tuple(patterns), tuple(targets))


def check_targets(
    targets: Sequence[str], names: Sequence[str], runtime: str, at: str, *, policy: str, listing: str
) -> None:
    """Refuse the first of a policy's ``targets`` (the list at ``at``) that names none of the replicated jobs ``names``,
    in the words of JobSet's webhook: ``policy`` names the policy, ``listing`` (``{}``: the names) ends the message."""
    for k, target in enumerate(targets):
        if target not in names:
            raise JobSpecError(
                f"{at}[{k}]",
                f"{runtime}: invalid replicatedJob name {target!r}{policy} does not appear in .spec.ReplicatedJobs "
                + listing.format(", ".join(names)),
            )


def _strings(value: Any, runtime: str, at: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise JobSpecError(at, f"{runtime}: expected a list of strings")
    return list(value)
