"""A job described by a launch component's typed inputs, checked before anything is created.

:class:`JobRequest` holds what every kind takes (program and run policy, each a launch input declared once here)
and the kind's own :class:`~kftrain.job.kinds.KindOptions`. :meth:`JobRequest.to_job` lays the replicas out as the
kind declares and its options adjust (an elastic PyTorchJob has Workers only) and builds a validated job; a kind
with a shape of its own (TrainJob) builds it itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kftrain.contract import CHECKPOINT_ENV, DATASET_ENV, MODEL_ENV
from kftrain.errors import JobSpecError
from kftrain.job import pod_checks as check
from kftrain.job.build import ReplicaInput, build_job
from kftrain.job.kinds import KindOptions, Workload, kind_for, launch_input
from kftrain.job.model import CleanPodPolicy, EnvVar, RestartPolicy, RunPolicy, TrainingJob
from kftrain.job.validate import check_exit_code_ends, validate_job

_WHOLE_FLOAT = re.compile(r"^-?\d+\.0$")
RUN_POLICY = "run policy"  # the group of the inputs that shape a job built from inputs' run policy
# The variables the launch step gives every replica from its own inputs (kftrain.launch.step.Artifacts), where the
# replica's env lacks them: given by an env input they would win, and the replicas would write the model where the
# step never looks for it.
STEP_VARIABLES = {
    DATASET_ENV: "the dataset_uri input",
    MODEL_ENV: "the model output's URI",
    CHECKPOINT_ENV: "the checkpoint_uri input",
}


def env_input(field: str, name: Any, value: Any = "", value_from: Any = None) -> EnvVar:
    """One variable an input gives every replica, named ``field`` in errors: an entry of the ``env`` input
    (``env.NAME``) or of the launch task's own env (``task_config.env[i]``). Checked as the API server checks a
    container's env (IsEnvVarName; a string value, NUL-free; or a ``valueFrom``, not both: :mod:`.pod_checks`), and
    not one the launch step sets from its inputs (:data:`STEP_VARIABLES`). A value is never quoted: it may be a
    secret given by mistake."""
    name = check.env_name(field, name)
    if name in STEP_VARIABLES:
        raise JobSpecError(field, f"{name} is set by the launch step from {STEP_VARIABLES[name]}; give it there")
    if value_from is not None:
        if value:
            raise JobSpecError(f"{field}.valueFrom", "may not be specified when `value` is not empty")
        return EnvVar(name=name, value_from=check.env_source(f"{field}.valueFrom", value_from))
    literal = check.text(field, value, secret=True)
    if "\0" in literal:
        raise JobSpecError(field, f"{name}: contains a NUL character, which no variable can hold")
    return EnvVar(name=name, value=literal)


def command_line_value(value: object) -> str:
    """A list item from a pipeline as a command-line string.

    Pipeline parameters travel as protobuf numbers (doubles), so an int parameter placed in a list
    arrives as ``10.0`` (or the string ``"10.0"`` once interpolated); programs expect ``10``.
    """
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value)
    return text[:-2] if _WHOLE_FLOAT.match(text) else text


def _words(field: str, value: object) -> list[object]:
    """A program's words: a list (a whole command line in one string is refused: it would be one program name)."""
    if isinstance(value, str):
        raise JobSpecError(
            field, f'expected a list of words, got the string {check.shown(value)} (e.g. ["python", "train.py"])'
        )
    return check.list_of(field, value)


def _choice(enum_type: type[RestartPolicy] | type[CleanPodPolicy], value: str, field_name: str) -> None:
    if value not in {m.value for m in enum_type}:
        allowed = ", ".join(m.value for m in enum_type)
        raise JobSpecError(field_name, f"{value!r} is not one of: {allowed}")


@dataclass
class JobRequest:
    """What every kind's launch component takes to build a job, and the kind's own options."""

    kind: str
    image: str = launch_input("", "Image of every replica; empty: this release's program image for the kind.")
    command: Sequence[str] = launch_input(
        [],
        "Program of every replica; empty: this release's program for the kind, given --dataset, --model-dir and "
        "--checkpoint-dir.",
    )
    args: Sequence[str] = launch_input([], "Arguments of the program; $(VAR) references are expanded.")
    env: Mapping[str, str] = launch_input({}, "Extra environment variables of every replica (literal values).")
    restart_policy: str = launch_input(
        "OnFailure", "Never, OnFailure, Always or ExitCode (an MPIJob v2beta1: Never or OnFailure).", group=RUN_POLICY
    )
    backoff_limit: int = launch_input(
        3,
        "runPolicy.backoffLimit: the job fails when the restarts of its pods reach it (OnFailure, Always); an MPIJob "
        "v2beta1 counts its launcher's, which under Never fails once more launcher pods than it have failed. Under "
        "ExitCode it counts nothing unless it is 0 (fail at the first failure): set active_deadline_seconds.",
        group=RUN_POLICY,
    )
    active_deadline_seconds: int = launch_input(
        0, "Fail the job after this many seconds (0: no limit).", group=RUN_POLICY
    )
    clean_pod_policy: str = launch_input(
        "Running", "All, Running or None: which pods to delete when the job ends.", group=RUN_POLICY
    )
    options: KindOptions = field(default_factory=KindOptions)

    def validate(self) -> None:
        """Refuse what the API server or the operator would refuse, naming the input (:mod:`kftrain.job.pod_checks`):
        the image, the program's words, the env's names and values (a number is the string it means: KFP passes a
        map as JSON), the run policy."""
        self.image = check.image("image", self.image)
        self.command = [
            command_line_value(check.text(f"command[{i}]", w)) for i, w in enumerate(_words("command", self.command))
        ]
        self.args = [command_line_value(check.text(f"args[{i}]", w)) for i, w in enumerate(_words("args", self.args))]
        variables = [env_input(f"env.{name}", name, value) for name, value in check.mapping("env", self.env).items()]
        self.env = {var.name: var.value or "" for var in variables}
        _choice(RestartPolicy, self.restart_policy, "restart_policy")
        _choice(CleanPodPolicy, self.clean_pod_policy, "clean_pod_policy")
        self.backoff_limit = check.integer("backoff_limit", self.backoff_limit, low=0, high=check.INT32_MAX)
        self.active_deadline_seconds = check.integer("active_deadline_seconds", self.active_deadline_seconds, low=0)
        self.options.validate()

    def workload(self) -> Workload:
        return Workload(
            image=self.image,
            command=[command_line_value(a) for a in self.command],
            args=[command_line_value(a) for a in self.args],
            env={**self.options.default_env(), **self.env},
            active_deadline_seconds=self.active_deadline_seconds or None,
        )

    def to_job(self, name: str | None = None, *, runtimes: Any = None) -> TrainingJob:
        """The validated job this request describes, named ``name`` (default: the kind in lower case); ``runtimes``
        is what the job may name outside itself (a TrainJob's runtime catalog)."""
        self.validate()
        name = name or self.kind.lower()
        workload = self.workload()
        built = self.options.build(name, workload, runtimes)
        if built is not None:
            validate_job(built)
            return built
        kind = kind_for(self.kind, self.options.api_version).spec
        policy = RestartPolicy(self.restart_policy)
        kind.check_restart_policy(policy, "restart_policy")

        def running(count: int) -> ReplicaInput:
            return ReplicaInput(count, command=workload.command, args=workload.args, restart_policy=policy)

        replicas = {rtype: running(1) for rtype in self.options.fixed_replicas(kind.fixed_replicas)}
        for rtype, count in self.options.replica_counts().items():
            hosted = rtype == "Worker" and not kind.workers_run_program  # Workers that only host ranks
            replicas[rtype] = ReplicaInput(count, restart_policy=policy) if hosted else running(count)
        run_policy = RunPolicy(
            clean_pod_policy=CleanPodPolicy(self.clean_pod_policy),
            backoff_limit=self.backoff_limit,
            active_deadline_seconds=workload.active_deadline_seconds,
        )
        check_exit_code_ends(
            policy,
            run_policy,
            policy_field="restart_policy",
            limit_field="backoff_limit",
            deadline_field="active_deadline_seconds",
        )
        spec = self.options.spec() or kind.spec_type()
        spec.run_policy = run_policy
        return build_job(
            self.kind, name, replicas, image=self.image, env=workload.env, spec=spec, api_version=kind.api_version
        )
