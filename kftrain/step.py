"""What every component's body runs through: one artifact protocol, logging, outputs, and one way to end.

``with component_step(*outputs):`` logs at INFO, moves each output under ``KFTRAIN_ARTIFACT_ROOT`` when set
(:func:`kftrain.storage.output_uri`), turns SIGTERM and SIGHUP (a cancelled run, an evicted pod) into
:class:`~kftrain.signals.Terminated` inside the body so what it started stops and what it staged goes (a training job
an evicted pod leaves running says so), and ends a :class:`~kftrain.errors.KftrainError` with its one-line message and
exit code 2 (or its own), a cancel with 143.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from kftrain.errors import KftrainError, fail_step
from kftrain.redaction import log_redacted
from kftrain.signals import Terminated, terminate_raises
from kftrain.storage import check_input_uri, output_uri


class Artifact(Protocol):
    """A KFP input or output artifact, as a component body sees it."""

    uri: str
    metadata: dict[str, Any]

    @property
    def path(self) -> str: ...


class MetricsArtifact(Artifact, Protocol):
    """A KFP Metrics output."""

    def log_metric(self, metric: str, value: float) -> None: ...


@contextmanager
def component_step(*outputs: Artifact, inputs: Mapping[str, str] | None = None) -> Iterator[None]:
    """Run a component's body (see the module doc); ``outputs`` are the artifacts it writes by URI, ``inputs`` the
    URIs it reads, by input name: each checked here, where it enters, before the body runs
    (:func:`kftrain.storage.check_input_uri`); an empty one is the body's to refuse or skip."""
    log_redacted(logging.INFO, "%(levelname)s %(message)s")
    with terminate_raises():
        try:
            for field, uri in (inputs or {}).items():
                if uri:
                    check_input_uri(uri, field)
            for artifact in outputs:
                artifact.uri = output_uri(artifact.uri)  # object storage when KFTRAIN_ARTIFACT_ROOT is set
            yield
        except KftrainError as exc:
            fail_step(str(exc), getattr(exc, "exit_code", 2))
        except Terminated as exc:
            left = getattr(exc, "left_running", "")  # kftrain.backends.base.JobLeftRunning: an evicted pod's
            message = f"terminated (run cancelled or pod evicted): {exc}; what the step started is stopped"
            fail_step(f"terminated: {exc}; {left}" if left else message, exc.exit_code)
