"""``kftrain run``'s quiet output: KFP's local runner's lines in, one line per step and the progress out."""

from __future__ import annotations

import json
from pathlib import Path

from kftrain.cli.quiet import QuietFilter

ESC = "\x1b"


def runner_lines(tmp_path: Path, status: str) -> list[str]:
    """What KFP's local runner prints for one step (colors included), its log, and its end."""
    out = tmp_path / "executor_output.json"
    meta = {"val_accuracy": 0.98, "epoch": 20.0}
    out.write_text(
        json.dumps({"artifacts": {"model": {"artifacts": [{}]}, "metrics": {"artifacts": [{"metadata": meta}]}}})
    )
    return [
        f"21:45:51.688 - INFO - Executing task {ESC}[96m'pytorchjob-launch'{ESC}[0m\n",
        "21:45:51.688 - INFO - Streamed logs:\n",
        "    [KFP Executor 2026-11-23 21:45:52,065 INFO]: Got executor_input:\n",
        "    {\n",
        '        "inputs": {}\n',
        "    }\n",
        "    [master-0] epoch 1/20 step 40 loss 2.2\n",
        "    [kftrain] progress: epoch 1/20 loss 2.218 val_accuracy 0.5922 (master-0)\n",
        "    [worker-0] RuntimeError: boom\n",
        f"    [KFP Executor 2026-11-23 21:46:08,027 INFO]: Wrote executor output file to {out}.\n",
        f"21:46:08.162 - INFO - Task {ESC}[96m'pytorchjob-launch'{ESC}[0m finished with status "
        f"{ESC}[92m{status}{ESC}[0m\n",
        "    model: Model( name='model',\n",
        f"21:46:08.163 - INFO - Pipeline {ESC}[95m'pytorch-digits'{ESC}[0m finished with status {status}\n",
    ]


class Clock:
    now = 10.0

    def __call__(self) -> float:
        self.now += 4.0
        return self.now


def test_a_step_is_two_lines_and_the_progress_line(tmp_path: Path) -> None:
    shown: list[str] = []
    quiet = QuietFilter(shown.append, clock=Clock())
    for line in runner_lines(tmp_path, "SUCCESS"):
        quiet.feed(line)
    assert shown == [
        "[kftrain] pytorchjob-launch: started",
        "[kftrain]   progress: epoch 1/20 loss 2.218 val_accuracy 0.5922 (master-0)",
        "[kftrain] pytorchjob-launch: finished in 4.0s (model, metrics: val_accuracy=0.98 epoch=20)",
    ]


def test_a_failed_step_shows_its_last_log_lines(tmp_path: Path) -> None:
    shown: list[str] = []
    quiet = QuietFilter(shown.append, clock=Clock())
    for line in runner_lines(tmp_path, "FAILURE"):
        quiet.feed(line)
    assert shown[2].startswith("[kftrain] pytorchjob-launch: FAILURE after 4.0s; its last")
    assert "    [worker-0] RuntimeError: boom" in shown
    assert shown[-1] == "[kftrain] pipeline pytorch-digits: FAILURE"
