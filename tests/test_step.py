"""How ``component_step`` ends a body a signal ended: a cancel says what the step started is stopped; an evicted
pod's SIGTERM that left the training job running says so instead, with the same exit code."""

from __future__ import annotations

import signal

import pytest

from kftrain.backends.base import JobLeftRunning
from kftrain.signals import Terminated
from kftrain.step import component_step


@pytest.mark.parametrize(
    ("raised", "says"),
    [
        (Terminated(signal.SIGTERM), "terminated (run cancelled or pod evicted): received SIGTERM; what the step"),
        (
            JobLeftRunning(signal.SIGTERM, "pod p is evicted (EvictionByEvictionAPI); job left running"),
            "terminated: received SIGTERM; pod p is evicted (EvictionByEvictionAPI); job left running",
        ),
    ],
    ids=["cancel", "eviction"],
)
def test_a_signal_ends_the_step_saying_what_became_of_its_job(
    raised: Terminated, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended, component_step():
        raise raised
    assert ended.value.code == 143
    err = capsys.readouterr().err
    assert says in err, err
    assert ("is stopped" in err) == (not isinstance(raised, JobLeftRunning))
