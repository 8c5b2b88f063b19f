"""The launch components' inputs: one table, from which each kind's component signature is written and back into
which the step parses what the component was given. Each input is a field (its default and description) of the
dataclass that takes it: :class:`~kftrain.job.request.JobRequest` (the program, the run policy), the kind's
:class:`~kftrain.job.kinds.KindOptions`, the platform's :class:`~kftrain.job.pod_settings.PodSettings` and the
step's own :class:`StepInputs`.
"""

from __future__ import annotations

import collections.abc
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_origin, get_type_hints

from kftrain.errors import JobSpecError
from kftrain.inputs import rows
from kftrain.job import pod_checks as check
from kftrain.job.kinds import Kind, KindOptions, launch_input
from kftrain.job.pod_settings import PodSettings, pipeline_settings
from kftrain.job.request import RUN_POLICY, JobRequest
from kftrain.tracking.env import tracking_uri


@dataclass(frozen=True)
class StepInputs:
    """The launch step's own inputs: where and how long to run, and what identifies the run; none shapes the job."""

    manifest: str = launch_input(
        "", "A full job YAML of this kind; it replaces the typed inputs above (its own settings win)."
    )
    # A string, not an input artifact: KFP's launcher copies every input artifact into the step's pod before the
    # step starts (kubeflow/pipelines@2.17.0:backend/src/v2/component/launcher_v2.go, downloadArtifacts), and the
    # launch step only passes the URI on.
    dataset_uri: str = launch_input(
        "", "URI of the prepared dataset (prepare_dataset's dataset_uri); $KFTRAIN_DATASET_URI in every replica."
    )
    checkpoint_uri: str = launch_input("", "Checkpoint root ($KFTRAIN_CHECKPOINT_URI); empty: next to the model.")
    backend: str = launch_input(
        "auto", "auto (kubernetes when run as a KFP task in a pod, else local), local or kubernetes."
    )
    # The same default for the components and every shipped pipeline: a job that hangs never holds a cluster forever.
    timeout_seconds: int = launch_input(3600, "Fail and delete the job after this many seconds (0: no limit).")
    pending_timeout_seconds: int = launch_input(
        600, "Fail a job whose pods stay unschedulable this long (queued and scaling-up jobs wait; 0: no limit)."
    )
    run_id: str = launch_input("", "The KFP run id; empty: read from the step's output URI.")
    task_id: str = launch_input("", "The KFP task id; empty: read from the step's output URI.")
    mlflow_tracking_uri: str = rows.mlflow_tracking_uri()  # the same input as evaluation's and export's

    def __post_init__(self) -> None:
        """Refuse what would fail only once the job exists (a timeout that is not a number, a negative one that
        fails the job at once, an unknown backend), naming the input, before anything is created."""
        for field in ("timeout_seconds", "pending_timeout_seconds"):
            value = check.integer(field, getattr(self, field), low=0)
            object.__setattr__(self, field, value)
        for field in (f.name for f in dataclasses.fields(self) if f.type == "str"):  # every text input
            object.__setattr__(self, field, check.text(field, getattr(self, field)))
        object.__setattr__(self, "mlflow_tracking_uri", tracking_uri(self.mlflow_tracking_uri))
        from kftrain.storage.uri import check_input_uri  # not at import, as below

        for field in ("dataset_uri", "checkpoint_uri"):  # where these URIs enter the launch step, checked once
            if getattr(self, field):
                check_input_uri(getattr(self, field), field)
        from kftrain.backends import BACKEND_NAMES  # not at import: the components' modules import this one

        if self.backend not in BACKEND_NAMES:
            raise JobSpecError("backend", f"{check.shown(self.backend)} is not one of: {', '.join(BACKEND_NAMES)}")

    @property
    def has_manifest(self) -> bool:
        return bool(str(self.manifest or "").strip())


@dataclass(frozen=True)
class Input:
    """One input of a launch component: its name, Python type (str, int, bool, list, dict), default, description."""

    name: str
    type: type
    default: Any
    doc: str


@dataclass(frozen=True)
class LaunchInputs:
    """A launch component's inputs, parsed: the job they describe, the platform's settings, the step's own."""

    request: JobRequest
    pods: PodSettings
    step: StepInputs


def _inputs_of(cls: type, *, group: str | None = None) -> list[tuple[dataclasses.Field[Any], type]]:
    hints = get_type_hints(cls)
    return [
        (f, _component_type(hints[f.name]))
        for f in dataclasses.fields(cls)
        if "doc" in f.metadata and (group is None or f.metadata["group"] == group)
    ]


def _component_type(hint: Any) -> type:
    """The type KFP gives the input: the declared scalar, else list or dict by the declared collection."""
    if hint in (str, int, bool, float):
        return hint
    origin = get_origin(hint)
    if origin in (dict, collections.abc.Mapping):
        return dict
    if origin in (list, tuple, collections.abc.Sequence):
        return list
    raise TypeError(f"a launch input cannot be a {hint}")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is dataclasses.MISSING:
        return f.default_factory()  # type: ignore[operator]
    return f.default


def platform_inputs(settings: type[PodSettings] = PodSettings) -> list[Input]:
    """The inputs every kind's launch component has, whatever the kind: the platform's settings and the step's own,
    with their shared defaults."""
    return [
        Input(f.name, type_, _default(f), f.metadata["doc"])
        for cls in (settings, StepInputs)
        for f, type_ in _inputs_of(cls)
    ]


# The step's own inputs a shipped pipeline exposes as its parameters (beside the pod settings declared so).
PIPELINE_STEP_INPUTS = ("backend", "timeout_seconds", "pending_timeout_seconds", "mlflow_tracking_uri")


def pipeline_inputs(settings: type[PodSettings] = PodSettings) -> list[Input]:
    """The launch inputs a platform engineer sets for a cluster, which the shipped pipelines take as parameters under
    the same names, descriptions and defaults."""
    exposed = {*pipeline_settings(settings), *PIPELINE_STEP_INPUTS}
    return [i for i in platform_inputs(settings) if i.name in exposed]


def launch_inputs(kind: Kind, settings: type[PodSettings] = PodSettings) -> list[Input]:
    """The inputs of ``kind``'s launch component, in the order of its signature: the program, the kind's own, the run
    policy, the platform's settings, the step's own."""
    options: type[KindOptions] = kind.options
    sections = [
        _inputs_of(JobRequest, group=""),
        _inputs_of(options),
        _inputs_of(JobRequest, group=RUN_POLICY),
        _inputs_of(settings),
        _inputs_of(StepInputs),
    ]
    return [
        Input(f.name, type_, options.INPUT_DEFAULTS.get(f.name, _default(f)), f.metadata["doc"])
        for section in sections
        for f, type_ in section
        if f.name not in options.OMITTED_INPUTS
    ]


def parse_launch_inputs(
    kind: Kind, values: Mapping[str, Any], settings: type[PodSettings] = PodSettings
) -> LaunchInputs:
    """``values`` (a launch component's inputs, by name) as the dataclasses that declare them; an input the kind's
    component does not have is refused, and one not given takes its default."""
    known = {i.name: i for i in launch_inputs(kind, settings)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise JobSpecError(unknown[0], f"not an input of the {kind.spec.kind} launch component")
    given = {name: _typed(spec, values.get(name, spec.default)) for name, spec in known.items()}

    def take(cls: type) -> dict[str, Any]:
        return {f.name: given[f.name] for f, _ in _inputs_of(cls) if f.name in given}

    options = kind.options(**take(kind.options))
    request = JobRequest(kind=kind.spec.kind, options=options, **take(JobRequest))
    parsed = LaunchInputs(request=request, pods=settings(**take(settings)), step=StepInputs(**take(StepInputs)))
    if not parsed.step.has_manifest:  # a manifest replaces the typed inputs
        request.validate()
        _refuse_literal_secrets(request, parsed.pods)
    return parsed


def _typed(spec: Input, value: Any) -> Any:
    """``value`` as the type the component declares for the input, as KFP may hand it: an int as a whole double,
    a number for a string (a map's values travel as JSON); anything else is refused, naming the input."""
    if spec.type is int:
        return check.integer(spec.name, value)
    if spec.type is str:
        return check.text(spec.name, value)
    if spec.type is bool:
        if not isinstance(value, bool):
            raise JobSpecError(spec.name, f"expected true or false, got {type(value).__name__} {check.shown(value)}")
        return value
    if spec.type is list:
        return check.list_of(spec.name, value)
    if spec.type is dict:
        return check.mapping(spec.name, value)
    return value


def _refuse_literal_secrets(request: JobRequest, pods: PodSettings) -> None:
    """A literal ``env`` entry would silently replace a variable the settings read from a secret (the replica's
    env keeps one entry per name, and the literal one wins): refuse it, naming the input."""
    for name, ref in pods.secret_refs().items():
        if name in request.env:
            source = "secret_env" if name in pods.secret_env else f"storage_secret {ref['name']!r}"
            raise JobSpecError(
                f"env.{name}",
                f"{name} is read from {source} (by secretKeyRef); a literal value in env would replace it: "
                "remove it from env" + (", or give storage_secret ''" if name not in pods.secret_env else ""),
            )
