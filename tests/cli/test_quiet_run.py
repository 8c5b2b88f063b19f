"""``kftrain run``'s quiet output: KFP's local runner's lines in, two lines per step and the progress out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
        "[kftrain] pytorchjob-launch: finished in 4.0s (metrics: val_accuracy=0.98 epoch=20, model)",
    ]


def test_run_help_says_what_is_shown_without_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    from kftrain.cli.app import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "not two lines per step (started, finished) and the training's progress" in shown


def finished_line(tmp_path: Path, executor_output: dict[str, object]) -> str:
    """The ``finished`` line of a step whose executor output is ``executor_output``."""
    out = tmp_path / "executor_output.json"
    out.write_text(json.dumps(executor_output))
    shown: list[str] = []
    quiet = QuietFilter(shown.append, clock=Clock())
    for line in [
        "21:45:51.688 - INFO - Executing task 'export-model'\n",
        f"    [KFP Executor 2026-11-23 21:46:08,027 INFO]: Wrote executor output file to {out}.\n",
        "21:46:08.162 - INFO - Task 'export-model' finished with status SUCCESS\n",
    ]:
        quiet.feed(line)
    return shown[-1]


def test_a_steps_outputs_are_listed_in_one_order_whatever_order_kfp_wrote_them(tmp_path: Path) -> None:
    artifacts = {name: {"artifacts": [{"uri": f"/runs/x/{name}"}]} for name in ("curves", "model", "job")}
    params = {"score": 0.9832869080779945, "passed": True, "rows": 359}
    lines = {
        finished_line(tmp_path, {"artifacts": dict(order_a), "parameterValues": dict(order_p)})
        for order_a in (list(artifacts.items()), list(reversed(artifacts.items())))
        for order_p in (list(params.items()), list(reversed(params.items())))
    }
    summary = "(curves, job, model, passed=True, rows=359, score=0.9833)"
    assert lines == {f"[kftrain] export-model: finished in 4.0s {summary}"}


def test_a_steps_string_outputs_are_shown_but_not_one_repeating_an_artifacts_uri(tmp_path: Path) -> None:
    data = {
        "artifacts": {"exported": {"artifacts": [{"uri": "/runs/x/export-model/exported"}]}},
        "parameterValues": {"model_version": "", "exported_uri": "/runs/x/export-model/exported", "args": ["-v"]},
    }
    assert finished_line(tmp_path, data) == "[kftrain] export-model: finished in 4.0s (exported, model_version='')"


def failed_step(tmp_path: Path, log: list[str]) -> list[str]:
    """A step that fails after printing ``log``, as KFP's local runner streams it (each line indented 4 spaces)."""
    return [
        f"21:45:51.688 - INFO - Executing task {ESC}[96m'pytorchjob-launch'{ESC}[0m\n",
        "21:45:51.688 - INFO - Streamed logs:\n",
        "    [KFP Executor 2026-11-23 21:45:52,065 INFO]: Got executor_input:\n",
        "    {\n",
        '        "inputs": {"parameterValues": {"source": "nope.csv"}},\n',
        '        "outputs": {\n',
        "        }\n",
        "    }\n",
        *[f"    {line}\n" for line in log],
        "    \n",
        f"21:46:08.162 - INFO - Task {ESC}[96m'pytorchjob-launch'{ESC}[0m finished with status "
        f"{ESC}[91mFAILURE{ESC}[0m\n",
        f"21:46:08.163 - INFO - Pipeline {ESC}[95m'pytorch-digits'{ESC}[0m finished with status FAILURE\n",
    ]


JOB_LOG = [
    "INFO launching PyTorchJob pytorchjob-digits-1a2b on the local backend",
    "[master-0] Traceback (most recent call last):",
    "[master-0] RuntimeError: boom",
    "[kftrain] replica logs kept in /scratch/kftrain-run-x/kftrain-pytorchjob-digits-1a2b-y/logs",
    "ERROR: job Failed (BackoffLimitExceeded): master-0 exited with code 1",
    "last 2 log lines of master-0:",
    "  [master-0] Traceback (most recent call last):",
    "  [master-0] RuntimeError: boom",
]


@pytest.mark.parametrize(
    ("log", "shown"),
    [
        pytest.param(
            ["INFO reading nope.csv", "ERROR: source 'nope.csv': not found"],
            ["    ERROR: source 'nope.csv': not found"],
            id="a-steps-error-line-first",
        ),
        pytest.param(
            JOB_LOG,
            [
                "    ERROR: job Failed (BackoffLimitExceeded): master-0 exited with code 1",
                "    last 2 log lines of master-0:",
                "      [master-0] Traceback (most recent call last):",
                "      [master-0] RuntimeError: boom",
                "[kftrain]   the job's replica logs: kftrain jobs logs pytorchjob-digits-1a2b",
            ],
            id="a-failed-job-its-message-and-how-to-read-its-logs",
        ),
        pytest.param(
            ["Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: mine"],
            ["    Traceback (most recent call last):", '      File "x.py", line 1', "    ValueError: mine"],
            id="no-error-line-the-steps-last-lines",
        ),
        pytest.param([], [], id="nothing-printed"),
    ],
)
def test_a_failed_step_shows_its_own_error_first_and_never_kfps_dump(
    tmp_path: Path, log: list[str], shown: list[str]
) -> None:
    out: list[str] = []
    quiet = QuietFilter(out.append, clock=Clock())
    for line in failed_step(tmp_path, log):
        quiet.feed(line)
    head = "[kftrain] pytorchjob-launch: FAILURE after 4.0s"
    assert out == ["[kftrain] pytorchjob-launch: started", head + ("" if log else " (it printed nothing)"), *shown]
    assert [f.step for f in quiet.failures] == ["pytorchjob-launch"]
    assert quiet.failures[0].error == (shown[0].strip() if shown else "")


def test_a_path_in_the_runs_temporary_folder_is_never_printed(tmp_path: Path) -> None:
    """The run's temporary folder is removed when kftrain run returns: a path in it is not shown as if it stayed,
    quiet or verbose."""
    for show_all in (False, True):
        out: list[str] = []
        quiet = QuietFilter(out.append, clock=Clock(), show_all=show_all, gone="/scratch/kftrain-run-x")
        log = [*JOB_LOG[:3], "ERROR: job Failed: see /scratch/kftrain-run-x/kftrain-j/logs/master-0.log"]
        for line in failed_step(tmp_path, log):
            quiet.feed(line)
        assert not [line for line in out if "/scratch/kftrain-run-x" in line], out
        assert any("ERROR: job Failed: see <the run's temporary folder, removed>" in line for line in out), out
        assert quiet.failures[0].logs_command() == "kftrain jobs logs pytorchjob-digits-1a2b"


def test_verbose_shows_every_line_as_it_came(tmp_path: Path) -> None:
    out: list[str] = []
    quiet = QuietFilter(out.append, clock=Clock(), show_all=True)
    lines = runner_lines(tmp_path, "SUCCESS")
    for line in lines:
        quiet.feed(line)
    assert out == [line.rstrip("\n") for line in lines]
