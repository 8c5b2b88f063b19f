"""What a runtime's JobSet failurePolicy does after a Job fails, compared by exact value: the rules of
kubernetes-sigs/jobset@v0.12.0:pkg/controllers/failure_policy.go (kftrain/job/kinds/trainjob/failure_policy.py). The
local backend restarts or fails the whole TrainJob as it says (tests/backends/local/test_restarts.py), and
tests/controlplane/test_restarts.py holds both to the real JobSet."""

from __future__ import annotations

from typing import Any

import pytest

from kftrain.job.kinds.restarts import AfterJobFailure
from kftrain.job.kinds.trainjob.failure_policy import BACKOFF_LIMIT_EXCEEDED, BACKOFF_LIMIT_MESSAGE, parse

DEADLINE = ("DeadlineExceeded", "Job was active longer than specified deadline")
BACKOFF = (BACKOFF_LIMIT_EXCEEDED, BACKOFF_LIMIT_MESSAGE)
FAIL_ON_DEADLINE = {"name": "deadline", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]}
AGAIN_FOR_NODE = {"name": "nodeAgain", "action": "RestartJobSetAndIgnoreMaxRestarts", "targetReplicatedJobs": ["node"]}
NO_RULE = "failurePolicy (RestartJobSet: no rule matched)"

CASES: list[tuple[str, dict[str, Any], str, tuple[str, str], int, AfterJobFailure]] = [
    ("no rule: restart", {"maxRestarts": 2}, "node", BACKOFF, 0, AfterJobFailure(True, True, "", NO_RULE)),
    ("no rule: the last restart", {"maxRestarts": 2}, "node", BACKOFF, 1, AfterJobFailure(True, True, "", NO_RULE)),
    (
        "no rule: max reached",
        {"maxRestarts": 2},
        "node",
        BACKOFF,
        2,
        AfterJobFailure(False, True, "ReachedMaxRestarts", f"{NO_RULE}: 2 of maxRestarts 2 made"),
    ),
    (
        "maxRestarts unset is 0",
        {},
        "node",
        BACKOFF,
        0,
        AfterJobFailure(False, True, "ReachedMaxRestarts", f"{NO_RULE}: 0 of maxRestarts 0 made"),
    ),
    (
        "a reason rule that matches",
        {"maxRestarts": 5, "rules": [FAIL_ON_DEADLINE]},
        "node",
        DEADLINE,
        0,
        AfterJobFailure(False, False, "FailJobSetAction", "failurePolicy rule 'deadline' (FailJobSet)"),
    ),
    (
        "a reason rule that does not",
        {"maxRestarts": 5, "rules": [FAIL_ON_DEADLINE]},
        "node",
        BACKOFF,
        0,
        AfterJobFailure(True, True, "", NO_RULE),
    ),
    (
        "the first rule that matches decides",
        {"rules": [FAIL_ON_DEADLINE, AGAIN_FOR_NODE, {"name": "any", "action": "FailJobSet"}]},
        "node",
        BACKOFF,
        7,
        AfterJobFailure(True, False, "", "failurePolicy rule 'nodeAgain' (RestartJobSetAndIgnoreMaxRestarts)"),
    ),
    (
        "a target rule for another job",
        {"rules": [AGAIN_FOR_NODE, {"name": "any", "action": "FailJobSet"}]},
        "launcher",
        BACKOFF,
        0,
        AfterJobFailure(False, False, "FailJobSetAction", "failurePolicy rule 'any' (FailJobSet)"),
    ),
    (
        "a message pattern is searched for",
        {"rules": [{"name": "p", "action": "FailJobSet", "onJobFailureMessagePatterns": ["x", "backoff"]}]},
        "node",
        BACKOFF,
        0,
        AfterJobFailure(False, False, "FailJobSetAction", "failurePolicy rule 'p' (FailJobSet)"),
    ),
    (
        "a message pattern that is not found",
        {
            "maxRestarts": 1,
            "rules": [{"name": "p", "action": "FailJobSet", "onJobFailureMessagePatterns": ["^backoff"]}],
        },
        "node",
        BACKOFF,
        0,
        AfterJobFailure(True, True, "", NO_RULE),
    ),
]


@pytest.mark.parametrize(
    ("policy", "rjob", "failure", "counted", "verdict"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_what_jobset_does_after_a_job_fails(
    policy: dict[str, Any], rjob: str, failure: tuple[str, str], counted: int, verdict: AfterJobFailure
) -> None:
    parsed = parse({"failurePolicy": policy}, ["launcher", "node"], "r", "spec")
    assert parsed is not None
    assert parsed.after(rjob, *failure, counted) == verdict


def test_no_failure_policy_is_none() -> None:
    assert parse({"replicatedJobs": []}, [], "r", "spec") is None
