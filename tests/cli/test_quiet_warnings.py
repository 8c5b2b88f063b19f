"""A quiet ``kftrain run`` shows every warning a step logs (the model does not follow the model contract...), under
its step, and still none of the noise: KFP's dumps, the replicas' own lines."""

from __future__ import annotations

import pytest

from kftrain.cli.quiet import QuietFilter

STEP = [
    "21:45:51.688 - INFO - Executing task 'pytorchjob-launch'\n",
    "    INFO launching PyTorchJob j on the local backend\n",
]
END = ["21:46:08.162 - INFO - Task 'pytorchjob-launch' finished with status SUCCESS\n"]


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            "    WARNING the model does not follow the model contract (evaluation and export will refuse it): no model",
            "[kftrain]   warning: the model does not follow the model contract (evaluation and export will refuse "
            "it): no model",
        ),
        ("    WARNING storage: retrying a read", "[kftrain]   warning: storage: retrying a read"),
        ("    INFO launching PyTorchJob j", None),
        ("    [master-0] WARNING: tensorflow says something", None),
        ('    "WARNING in a JSON dump"', None),
    ],
)
def test_a_steps_warning_is_shown_in_the_quiet_run(line: str, shown: str | None) -> None:
    out: list[str] = []
    quiet = QuietFilter(out.append, clock=lambda: 0.0)
    for raw in [*STEP, line + "\n", *END]:
        quiet.feed(raw)
    assert out[0] == "[kftrain] pytorchjob-launch: started"
    assert out[1:-1] == ([shown] if shown else [])
    assert out[-1].startswith("[kftrain] pytorchjob-launch: finished")
