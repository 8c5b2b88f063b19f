"""The hostile cases' harness (testbed/hostile/runner.py) sees each class it reports: a case made to end in each one
(its ``expect`` here is the class the harness must observe) is classified so, and leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kftrain.errors import KftrainError
from testbed.hostile.case import (
    CLEAR,
    ESCAPE,
    FINE,
    HANG,
    LEAK,
    LEFT_RUNNING,
    LOSS,
    TRACEBACK,
    UNCLEAR,
    WRONG,
    Case,
    Sandbox,
)
from testbed.hostile.runner import run_case

SECRET = "harness-secret-0b7e"


def _fine(sb: Sandbox) -> None:
    print("done")


def _raises(sb: Sandbox) -> None:
    raise ValueError("an error of kftrain's own")


def _sleeps(sb: Sandbox) -> None:
    time.sleep(60)


def _writes_outside(sb: Sandbox) -> None:
    sb.ready()
    (sb.outside / "escaped.txt").write_text("x")


def _prints_secret(sb: Sandbox) -> None:
    print(f"the value is {SECRET}")


def _writes_secret(sb: Sandbox) -> None:
    sb.write("input.txt", SECRET)  # an input: not a leak
    sb.ready()
    (sb.state / "record.json").write_text(f'{{"token": "{SECRET}"}}')


def _loses(sb: Sandbox) -> None:
    sb.keep(sb.write("precious.txt", "keep me"))
    sb.ready()
    (sb.work / "precious.txt").unlink()


def _refuses(message: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        raise KftrainError(message)

    return run


def _leaves_a_process(sb: Sandbox) -> None:
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)


def _cli_error(sb: Sandbox) -> int:
    return sb.cli("validate", "-f", sb.work / "missing.yaml")


def _traceback_in_the_output(sb: Sandbox) -> int:
    print("Traceback (most recent call last):\n  File 'x'\nKeyError: 'k'", file=sys.stderr)
    return 2


AREA = "harness"
# (name, the class the case is expected to end in, the class the harness must observe, the case's call, more fields)
SHAPES: list[tuple[str, str, str, Callable[[Sandbox], int | None], dict[str, Any]]] = [
    ("fine", FINE, FINE, _fine, {}),
    ("accepted wrongly", CLEAR, WRONG, _fine, {}),
    ("an exception", FINE, TRACEBACK, _raises, {}),
    ("a traceback in the output", CLEAR, TRACEBACK, _traceback_in_the_output, {}),
    ("a hang", FINE, HANG, _sleeps, {"timeout_s": 3}),
    ("an escape", FINE, ESCAPE, _writes_outside, {}),
    ("a secret printed", FINE, LEAK, _prints_secret, {"secrets": (SECRET,)}),
    ("a secret written", FINE, LEAK, _writes_secret, {"secrets": (SECRET,)}),
    ("a loss", FINE, LOSS, _loses, {}),
    ("a clear error", CLEAR, CLEAR, _refuses("spec.x: bad"), {"names": ("spec.x",)}),
    ("an error naming another field", CLEAR, UNCLEAR, _refuses("spec.y: bad"), {"names": ("spec.x",)}),
    ("an error of two lines", CLEAR, UNCLEAR, _refuses("spec.x: bad\nand more"), {}),
    ("an error of 2 KB", CLEAR, UNCLEAR, _refuses("spec.x: " + "x" * 2048), {}),
    ("a process left running", FINE, LEFT_RUNNING, _leaves_a_process, {}),
    ("a command's error", CLEAR, CLEAR, _cli_error, {"names": ("missing.yaml",)}),
]
CASES = [Case(AREA, name, expect, "the harness", run, **more) for name, expect, _, run, more in SHAPES]


@pytest.mark.parametrize(
    ("case", "observed"), [(c, s[2]) for c, s in zip(CASES, SHAPES, strict=True)], ids=[s[0] for s in SHAPES]
)
def test_the_harness_observes_each_class(case: Case, observed: str, tmp_path: Path) -> None:
    result = run_case(case, tmp_path)
    assert result.observed == observed, (result.message, result.output[-2000:])
    assert result.as_expected is (observed == case.expect)
    assert os.listdir(tmp_path) == []  # the sandbox and the case's output files are removed
