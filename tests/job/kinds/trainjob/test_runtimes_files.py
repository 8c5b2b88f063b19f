"""TrainJob runtimes files, read within the bounds a job manifest is (kftrain/job/manifest/parse.py) and checked as
the API server and JobSet v0.12.0 check a runtime (kftrain/job/kinds/trainjob/runtime.py, jobset.py).

Each bad file is refused through every way a user gives one: ``kftrain validate --runtimes FILE``,
``KFTRAIN_TRAINER_RUNTIMES=FILE`` and :meth:`RuntimeCatalog.from_paths`, with exit code 2 (kftrain/cli/app.py: a
:class:`KftrainError`) and one exact line naming the file, never a traceback, and quickly: each call is given 20
seconds (testbed.named_pipes.within: a named pipe it waits on is then let go, and the test fails).
"""

from __future__ import annotations

import copy
import os
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kftrain.cli.app import main
from kftrain.errors import JobSpecError
from kftrain.job.kinds.trainjob.catalog import RuntimeCatalog
from kftrain.job.kinds.trainjob.runtime import parse_runtime
from testbed.manifests import RUNTIME, as_yaml, replicated_job, training_runtime, trainjob
from testbed.named_pipes import within

GOOD = as_yaml(training_runtime())
# The runtime's lines: its mlPolicy is line 6, at column 3 (as_yaml keeps the keys in their order).
assert GOOD.splitlines()[5] == "  mlPolicy:", GOOD


def _alias_bomb() -> str:
    """About 10 KB of YAML whose aliases expand to 100**9 nodes, in a runtime's labels."""
    levels = ["x0: &x0 [" + ", ".join(["lol"] * 100) + "]"]
    levels += [f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 100) + "]" for i in range(1, 10)]
    text = "bomb:\n" + "".join(f"  {line}\n" for line in levels) + GOOD
    assert 5_000 < len(text) < 12_000
    return text


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], Path]  # the file (or what stands for it) to give, made in the test's folder
    message: str  # the one line, after "kftrain: error: ", with {path} for the file given


def _write(text: str | bytes) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / "runtime.yaml"
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return path

    return make


def _fifo(folder: Path) -> Path:
    path = folder / "runtime.yaml"
    os.mkfifo(path)
    return path


def _dev_zero(folder: Path) -> Path:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    return Path("/dev/zero")


def _cycle() -> str:
    return as_yaml(
        training_runtime(
            replicated_job("prep", "prep", depends_on=["node"]),
            replicated_job("node", "node", trainer=True, depends_on=["prep"]),
        )
    )


EIGHT_MIB = 8 * 1024 * 1024
CASES = [
    Case(
        "alias-bomb",
        _write(_alias_bomb()),
        "{path}: expands to more than 1000000 nodes through its aliases (*name) at line 4, column 7",
    ),
    Case("fifo", _fifo, "{path}: cannot read runtimes file: a named pipe (FIFO), not a regular file"),
    Case("dev-zero", _dev_zero, "{path}: cannot read runtimes file: a character device, not a regular file"),
    Case(
        "8MiB",
        _write(GOOD + "#" + "x" * (EIGHT_MIB - len(GOOD) - 2) + "\n"),
        f"{{path}}: the runtimes file is {EIGHT_MIB} bytes, more than the 3145728 bytes the Kubernetes API server "
        "accepts for an object",
    ),
    Case(
        "duplicate-mlPolicy",
        _write(GOOD.replace("  mlPolicy:\n", "  mlPolicy: {numNodes: 4}\n  mlPolicy:\n", 1)),
        "{path}: duplicate key 'mlPolicy' at line 7, column 3 (first at line 6); kubectl refuses it, and only the "
        "last value would count",
    ),
    Case(
        "Bad_Name",
        _write(as_yaml(training_runtime(name="Bad_Name"))),
        "{path}#0: metadata.name: 'Bad_Name' is not a valid name: lower-case letters, digits, '-' and '.', starting "
        "and ending with a letter or digit, at most 253 characters",
    ),
    Case(
        "dependsOn-cycle",
        _write(_cycle()),
        "{path}#0: spec.template.spec.replicatedJobs[0].dependsOn: ClusterTrainingRuntime 'my-runtime': "
        "replicatedJob 'prep' depends on itself through the cycle prep -> node -> prep: none of these jobs would "
        "ever start",
    ),
    Case(
        "dependsOn-missing",
        _write(
            as_yaml(
                training_runtime(
                    replicated_job("prep", "prep"), replicated_job("node", "node", trainer=True, depends_on=["ghost"])
                )
            )
        ),
        "{path}#0: spec.template.spec.replicatedJobs[1].dependsOn[0].name: ClusterTrainingRuntime 'my-runtime': "
        "replicatedJob 'node' depends on 'ghost', which is not one of its replicatedJobs (prep, node): it would never "
        "start",
    ),
]


def _job_file(folder: Path) -> Path:
    path = folder / "trainjob.yaml"
    path.write_text(as_yaml(trainjob(RUNTIME, trainer={"command": ["true"]})))
    return path


def _cli(args: list[str], capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    code = within(20, path, lambda: main(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_validate_runtimes_refuses_it_in_one_line(case: Case, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("KFTRAIN_TRAINER_RUNTIMES", raising=False)
    path = case.make(tmp_path)
    code, out, err = _cli(["validate", "-f", str(_job_file(tmp_path)), "--runtimes", str(path)], capsys, path)
    assert (code, out, err) == (2, "", f"kftrain: error: {case.message.format(path=path)}\n")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_environment_variable_refuses_it_in_one_line(case: Case, tmp_path: Path, capsys, monkeypatch) -> None:
    path = case.make(tmp_path)
    monkeypatch.setenv("KFTRAIN_TRAINER_RUNTIMES", str(path))
    code, out, err = _cli(["validate", "-f", str(_job_file(tmp_path))], capsys, path)
    assert (code, out, err) == (2, "", f"kftrain: error: {case.message.format(path=path)}\n")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_python_loader_refuses_it_within_bounds(case: Case, tmp_path: Path) -> None:
    path = case.make(tmp_path)
    tracemalloc.start()
    started = time.monotonic()
    try:
        raised = within(20, path, lambda: RuntimeCatalog.from_paths([path]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(raised, JobSpecError), raised
    assert str(raised) == case.message.format(path=path)
    assert time.monotonic() - started < 10
    assert peak < 64 * 1024 * 1024, f"{peak} bytes allocated to refuse it"


def test_a_runtime_that_breaks_no_rule_loads_and_waits_in_order(tmp_path: Path, capsys) -> None:
    """The control: the same runtime, well formed, loads; its trainer's job waits on ``prep`` to complete."""
    path = _write(GOOD)(tmp_path)
    code, _, err = _cli(["validate", "-f", str(_job_file(tmp_path)), "--runtimes", str(path)], capsys, path)
    assert (code, err) == (0, ""), err
    catalog = RuntimeCatalog.from_paths([path])
    assert catalog.find("ClusterTrainingRuntime", RUNTIME).name == RUNTIME


@pytest.mark.parametrize(
    ("runtime_file", "message"),
    [(c.make, c.message) for c in CASES if c.name in ("dependsOn-cycle", "dependsOn-missing")],
    ids=["dependsOn-cycle", "dependsOn-missing"],
)
def test_launch_starts_no_job_of_such_a_runtime(runtime_file, message: str, tmp_path: Path, capsys) -> None:
    """``kftrain launch --local``: refused before any replica runs (a job that ran would leave its file)."""
    path = runtime_file(tmp_path)
    ran = tmp_path / "ran"
    manifest = trainjob(RUNTIME, trainer={"command": [sys.executable, "-c", f"open({str(ran)!r}, 'w')"]})
    job_file = tmp_path / "trainjob.yaml"
    job_file.write_text(as_yaml(manifest))
    args = ["launch", "--local", "--workdir", str(tmp_path / "work"), "-f", str(job_file), "--runtimes", str(path)]
    code, out, err = _cli(args, capsys, path)
    assert (code, out, err) == (2, "", f"kftrain: error: {message.format(path=path)}\n")
    assert not ran.exists()
    assert not (tmp_path / "work").exists()


# --- the rules, one each (kubernetes-sigs/jobset@v0.12.0, kubernetes/apiextensions-apiserver@v0.36.3) ------------


def _with(edit: Callable[[dict[str, Any]], Any], **kwargs: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(training_runtime(**kwargs))
    edit(manifest)
    return manifest


def _jobs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = manifest["spec"]["template"]["spec"]["replicatedJobs"]
    return jobs


def _failure(manifest: dict[str, Any], **policy: Any) -> None:
    manifest["spec"]["template"]["spec"]["failurePolicy"] = policy


JOBS = "src: spec.template.spec.replicatedJobs"
POLICY = "src: spec.template.spec.failurePolicy"
RULES = [
    (
        "name-too-long",  # apimachinery validation.go: IsDNS1123Subdomain, DNS1123SubdomainMaxLength 253
        training_runtime(name="a" * 254),
        f"src: metadata.name: {repr('a' * 254)[:77]}... is not a valid name: lower-case letters, digits, '-' and '.', "
        "starting and ending with a letter or digit, at most 253 characters",
    ),
    (
        "namespace-not-a-label",  # objectmeta.go: ValidateNamespaceName = NameIsDNSLabel
        _with(lambda m: m["metadata"].update(namespace="Team_A"), kind="TrainingRuntime"),
        "src: metadata.namespace: 'Team_A' is not a valid namespace: lower-case letters, digits and '-', starting "
        "and ending with a letter or digit, at most 63 characters",
    ),
    (
        "replicatedJob-name-missing",  # jobset_types.go: +listMapKey=name (the CRD requires it)
        _with(lambda m: _jobs(m)[0].pop("name")),
        f"{JOBS}[0].name: ClusterTrainingRuntime 'my-runtime': missing: each replicatedJob has a name (the list is "
        "keyed by it)",
    ),
    (
        "replicatedJob-name-twice",  # jobset_types.go: +listType=map, +listMapKey=name
        _with(lambda m: _jobs(m)[1].update(name="prep", dependsOn=None)),
        f"{JOBS}[1].name: ClusterTrainingRuntime 'my-runtime': replicatedJob 'prep' is already replicatedJobs[0]: "
        "names are keys",
    ),
    (
        "replicatedJob-name-upper",  # jobset_webhook.go: IsDNS1035Label(GenJobName(...))
        _with(lambda m: _jobs(m)[0].update(name="Prep_1")),
        f"{JOBS}[0].name: ClusterTrainingRuntime 'my-runtime': replicatedJob 'Prep_1': JobSet names its jobs "
        "<trainjob>-Prep_1-<index>, which must be a DNS-1035 label (lower-case letters, digits and '-', at most 63 "
        "characters) whatever the TrainJob is called",
    ),
    (
        "replicatedJob-name-too-long",  # "a-" + 60 letters + "-0" is 64 characters
        _with(lambda m: _jobs(m)[0].update(name="p" * 60)),
        f"{JOBS}[0].name: ClusterTrainingRuntime 'my-runtime': replicatedJob {'p' * 60!r}: JobSet names its jobs "
        f"<trainjob>-{'p' * 60}-<index>, which must be a DNS-1035 label (lower-case letters, digits and '-', at most "
        "63 characters) whatever the TrainJob is called",
    ),
    (
        "dependsOn-status",  # jobset_types.go: +kubebuilder:validation:Enum=Ready;Complete
        _with(lambda m: _jobs(m)[1]["dependsOn"][0].update(status="Succeeded")),
        f"{JOBS}[1].dependsOn[0].status: ClusterTrainingRuntime 'my-runtime': replicatedJob 'node': 'Succeeded' must "
        "be one of: Ready, Complete",
    ),
    (
        "dependsOn-six-items",  # jobset_types.go: +kubebuilder:validation:MaxItems=5
        _with(lambda m: _jobs(m)[1].update(dependsOn=[{"name": "prep", "status": "Ready"}] * 6)),
        f"{JOBS}[1].dependsOn: ClusterTrainingRuntime 'my-runtime': replicatedJob 'node': 6 items, more than the 5 "
        "allowed",
    ),
    (
        "dependsOn-twice",  # jobset_types.go: dependsOn +listMapKey=name
        _with(lambda m: _jobs(m)[1].update(dependsOn=[{"name": "prep", "status": "Ready"}] * 2)),
        f"{JOBS}[1].dependsOn[1].name: ClusterTrainingRuntime 'my-runtime': replicatedJob 'node': 'prep' is listed "
        "twice",
    ),
    (
        "dependsOn-itself",  # depends_on.go: its own status never comes (the webhook admits it)
        _with(lambda m: _jobs(m)[1].update(dependsOn=[{"name": "node", "status": "Ready"}])),
        f"{JOBS}[1].dependsOn: ClusterTrainingRuntime 'my-runtime': replicatedJob 'node' depends on itself through "
        "the cycle node -> node: none of these jobs would ever start",
    ),
    (
        "dependsOn-on-the-first-job",  # jobset_webhook.go: "DependsOn can't be set for the first ReplicatedJob"
        training_runtime(
            replicated_job("node", "node", trainer=True, depends_on=["prep"]), replicated_job("prep", "prep")
        ),
        f"{JOBS}[0].dependsOn: ClusterTrainingRuntime 'my-runtime': replicatedJob 'node': DependsOn can't be set for "
        "the first ReplicatedJob",
    ),
    (
        "dependsOn-a-later-job",  # jobset_webhook.go: "replicatedJob: %s cannot depend on replicatedJob: %s"
        training_runtime(
            replicated_job("a", "a"),
            replicated_job("node", "node", trainer=True, depends_on=["prep"]),
            replicated_job("prep", "prep"),
        ),
        f"{JOBS}[1].dependsOn[0].name: ClusterTrainingRuntime 'my-runtime': replicatedJob: node cannot depend on "
        "replicatedJob: prep (listed after it; JobSet creates the jobs in their order)",
    ),
    (
        "restartPolicy-always",  # batch validation.go: a Job's pods restart "OnFailure" or "Never"
        _with(lambda m: _jobs(m)[1]["template"]["spec"]["template"]["spec"].update(restartPolicy="Always")),
        f"{JOBS}[1].template.spec.template.spec.restartPolicy: ClusterTrainingRuntime 'my-runtime': 'Always': the "
        "pods of a Job restart OnFailure or Never; the API server refuses the Job JobSet would create for it",
    ),
    (
        "successPolicy-target-missing",  # jobset_webhook.go: "... does not appear in .spec.ReplicatedJobs"
        _with(lambda m: m["spec"]["template"]["spec"].update(successPolicy={"targetReplicatedJobs": ["launcher"]})),
        "src: spec.template.spec.successPolicy.targetReplicatedJobs[0]: ClusterTrainingRuntime 'my-runtime': invalid "
        "replicatedJob name 'launcher' does not appear in .spec.ReplicatedJobs (its replicatedJobs: prep, node); the "
        "job could never succeed",
    ),
    # The failurePolicy (kftrain/job/kinds/trainjob/failure_policy.py: jobset_webhook.go, validateFailurePolicy).
    (
        "failurePolicy-restartJob-gated",  # features.go: RestartJob, Alpha, off by default
        _with(lambda m: _failure(m, rules=[{"name": "one", "action": "RestartJob"}])),
        f"{POLICY}.rules[0].action: ClusterTrainingRuntime 'my-runtime': RestartJob is not allowed when JobSet's "
        "RestartJob feature gate is disabled (it is by default in JobSet v0.12.0): JobSet would refuse the "
        "TrainJob's JobSet",
    ),
    (
        "failurePolicy-inPlaceRestart-gated",  # features.go: InPlaceRestart, Alpha, off by default
        _with(lambda m: _failure(m, restartStrategy="InPlaceRestart")),
        f"{POLICY}.restartStrategy: ClusterTrainingRuntime 'my-runtime': InPlaceRestart restart strategy cannot be "
        "set when InPlaceRestart feature gate is disabled (it is by default in JobSet v0.12.0): JobSet would refuse "
        "the TrainJob's JobSet",
    ),
    (
        "failurePolicy-rule-name-missing",  # the TrainingRuntime CRD: required [action, name]
        _with(lambda m: _failure(m, rules=[{"action": "FailJobSet"}])),
        f"{POLICY}.rules[0].name: ClusterTrainingRuntime 'my-runtime': missing: each rule has a name (the runtime's "
        "CRD requires it)",
    ),
    (
        "failurePolicy-rule-name-dash",  # jobset_webhook.go: ruleNameFmt
        _with(lambda m: _failure(m, rules=[{"name": "fail-fast", "action": "FailJobSet"}])),
        f"{POLICY}.rules[0].name: ClusterTrainingRuntime 'my-runtime': invalid failure policy rule name 'fail-fast': "
        "a letter, then letters, digits and '_,:', ending with a letter, a digit or '_', at most 128 characters",
    ),
    (
        "failurePolicy-rule-names-twice",  # jobset_webhook.go: "rule names are not unique"
        _with(lambda m: _failure(m, rules=[{"name": "a", "action": "FailJobSet"}] * 2)),
        f"{POLICY}.rules[1].name: ClusterTrainingRuntime 'my-runtime': rule names are not unique: 'a' is already "
        "rules[0]'s",
    ),
    (
        "failurePolicy-target-missing",  # jobset_webhook.go: "... in failure policy does not appear in ..."
        _with(lambda m: _failure(m, rules=[{"name": "a", "action": "FailJobSet", "targetReplicatedJobs": ["x"]}])),
        f"{POLICY}.rules[0].targetReplicatedJobs[0]: ClusterTrainingRuntime 'my-runtime': invalid replicatedJob name "
        "'x' in failure policy does not appear in .spec.ReplicatedJobs (prep, node)",
    ),
    (
        "failurePolicy-reason-unknown",  # jobset_webhook.go: validOnJobFailureReasons
        _with(lambda m: _failure(m, rules=[{"name": "a", "action": "FailJobSet", "onJobFailureReasons": ["OOM"]}])),
        f"{POLICY}.rules[0].onJobFailureReasons[0]: ClusterTrainingRuntime 'my-runtime': 'OOM' is not a Job's failure "
        "reason: BackoffLimitExceeded, DeadlineExceeded, FailedIndexes, MaxFailedIndexesExceeded, PodFailurePolicy",
    ),
    (
        "failurePolicy-pattern-broken",  # failure_policy.go: anyMatchFound skips it, so the rule never applies
        _with(
            lambda m: _failure(m, rules=[{"name": "a", "action": "FailJobSet", "onJobFailureMessagePatterns": ["("]}])
        ),
        f"{POLICY}.rules[0].onJobFailureMessagePatterns[0]: ClusterTrainingRuntime 'my-runtime': '(' is not a regular "
        "expression: missing ), unterminated subpattern at position 0",
    ),
]


@pytest.mark.parametrize(("manifest", "message"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_each_rule_is_refused_naming_the_runtime_and_the_job(manifest: dict[str, Any], message: str) -> None:
    with pytest.raises(JobSpecError) as raised:
        parse_runtime(manifest, "src")
    assert str(raised.value) == message


def test_what_the_rules_allow_loads() -> None:
    """A job may wait on several earlier ones, with either status; a namespaced runtime may name its namespace."""
    jobs = [
        replicated_job("a", "a"),
        replicated_job("b", "b", depends_on=["a"]),
        replicated_job("node", "node", trainer=True),
    ]
    jobs[2]["dependsOn"] = [{"name": "a", "status": "Ready"}, {"name": "b", "status": "Complete"}]
    manifest = training_runtime(*jobs, name="team.runtime-1", kind="TrainingRuntime")
    manifest["metadata"]["namespace"] = "team-a"
    manifest["spec"]["template"]["spec"]["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["node"]}
    rules = [
        {
            "name": "a",
            "action": "FailJobSet",
            "onJobFailureReasons": ["DeadlineExceeded"],
            "targetReplicatedJobs": ["a"],
        },
        {"name": "B_2:x,y_", "action": "RestartJobSetAndIgnoreMaxRestarts", "onJobFailureMessagePatterns": ["^Job"]},
    ]
    _failure(manifest, maxRestarts=2, restartStrategy="BlockingRecreate", rules=rules)
    loaded = parse_runtime(manifest, "src")
    assert (loaded.name, loaded.namespace) == ("team.runtime-1", "team-a")


def test_a_folder_skips_its_subfolders_as_kubectl_does(tmp_path: Path) -> None:
    """kubernetes/cli-runtime@v0.36.2:pkg/resource/visitor.go (ExpandPathsToFileVisitors): ``kubectl apply -f DIR``
    skips DIR's subfolders without -R, even one named like a manifest."""
    (tmp_path / "nested.yaml").mkdir()
    (tmp_path / "nested.yaml" / "other.yaml").write_text(as_yaml(training_runtime(name="Not_Read")))
    (tmp_path / "runtime.yaml").write_text(GOOD)
    assert RuntimeCatalog.from_paths([tmp_path], builtin=False).names() == [f"ClusterTrainingRuntime/{RUNTIME}"]


def test_a_named_pipe_in_a_folder_is_refused_too(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.yaml")
    pipe = tmp_path / "pipe.yaml"
    raised = within(20, pipe, lambda: RuntimeCatalog.from_paths([tmp_path]))
    assert str(raised) == f"{pipe}: cannot read runtimes file: a named pipe (FIFO), not a regular file"


def test_a_missing_path_names_where_it_was_given(tmp_path: Path, capsys, monkeypatch) -> None:
    missing = tmp_path / "none.yaml"
    monkeypatch.setenv("KFTRAIN_TRAINER_RUNTIMES", str(missing))
    code, _, err = _cli(["validate", "-f", str(_job_file(tmp_path))], capsys, missing)
    assert (code, err) == (2, f"kftrain: error: KFTRAIN_TRAINER_RUNTIMES: {missing}: no such file or folder\n")
    monkeypatch.delenv("KFTRAIN_TRAINER_RUNTIMES")
    code, _, err = _cli(["validate", "-f", str(_job_file(tmp_path)), "--runtimes", str(missing)], capsys, missing)
    assert (code, err) == (2, f"kftrain: error: --runtimes: {missing}: no such file or folder\n")
