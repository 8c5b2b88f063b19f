"""kftrain.errors: how a step ends."""

from __future__ import annotations

import subprocess
import sys

import pytest

ENDS_WITH_143 = "from kftrain.errors import fail_step; fail_step('the job was deleted', 143)"


@pytest.mark.parametrize("closed", ["stderr", "stdout and stderr"])
def test_a_step_whose_output_pipe_is_closed_still_exits_with_its_code(closed: str) -> None:
    """The launcher's pipe closes before the step's last line (a cancel under PUBLISH_LOGS): the code stays 143,
    neither 1 (BrokenPipeError) nor 120 (the flush at exit)."""
    child = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.stdin.read(); {ENDS_WITH_143}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None and child.stdin is not None
    child.stderr.close()
    if closed == "stdout and stderr":
        child.stdout.close()
    child.stdin.close()  # the child goes on only once the read ends of its output are gone
    assert child.wait(timeout=60) == 143
    if closed == "stderr":
        child.stdout.close()
