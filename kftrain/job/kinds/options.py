"""What the launch inputs mean for a kind: the inputs one kind adds and what they make of the job
(:class:`KindOptions`), the program every replica runs (:class:`Program`, :class:`Workload`), and the field that
declares a launch input (:func:`launch_input`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kftrain.inputs import component_input
from kftrain.job.model import JobSpec, TrainingJob


@dataclass(frozen=True)
class Program:
    """What every replica runs: an image (a name of :mod:`kftrain.images`, or a full reference) and a command."""

    image: str
    command: tuple[str, ...]


@dataclass(frozen=True)
class Workload:
    """What a job built from inputs runs in every replica, and the run policy those inputs give it."""

    image: str
    command: Sequence[str]
    args: Sequence[str]
    env: Mapping[str, str]
    active_deadline_seconds: int | None = None


def launch_input(default: Any, doc: str, *, group: str = "") -> Any:
    """A field of a launch input dataclass (:func:`kftrain.inputs.component_input`): its default (the
    component's, and the step's when it is not given), its description, and the group it is listed in (for a
    dataclass whose inputs are listed in two places of the signature)."""
    return component_input(default, doc, group=group)


@dataclass
class KindOptions:
    """The launch inputs one kind adds (each field an input, declared with :func:`launch_input`), their checks, and
    what they make of the job; the base is a kind with none."""

    # Inputs every launch component shares that this kind gives another default, or has no use for.
    INPUT_DEFAULTS: ClassVar[Mapping[str, Any]] = {}
    OMITTED_INPUTS: ClassVar[tuple[str, ...]] = ()

    @property
    def api_version(self) -> str | None:
        """The version of the kind to build (None: the registry's default)."""
        return None

    def validate(self) -> None:
        """Refuse values the operator would reject or misread, naming the input."""

    def replica_counts(self) -> dict[str, int]:
        """Replica types beyond the kind's fixed ones, with their counts (the Workers, a TFJob's Chief, PS...)."""
        return {}

    def fixed_replicas(self, declared: tuple[str, ...]) -> tuple[str, ...]:
        """The kind's single replicas this job has (the kind declares them; an elastic PyTorchJob has none)."""
        return declared

    @property
    def per_replica_launcher(self) -> bool:
        """Whether this release's program runs under a launcher in each replica (elastic, or several processes)."""
        return False

    def default_env(self) -> dict[str, str]:
        """Variables every replica gets unless the request's env sets them."""
        return {}

    def spec(self) -> JobSpec | None:
        """The kind's own spec fields these options set (None: none; the kind's spec type, empty)."""
        return None

    def build(self, name: str, workload: Workload, runtimes: Any = None) -> TrainingJob | None:
        """The job, when the kind is not laid out as replica specs (a TrainJob, on ``runtimes``: see
        :meth:`Kind.runtimes_from_env`); None: the replica layout."""
        return None

    def default_program(self, runtimes: Any = None) -> Program:
        """This release's reference program for a job with these options (``kftrain.programs``)."""
        raise NotImplementedError
