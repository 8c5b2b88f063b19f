"""A training program's entry: a user's error is one ``ERROR:`` line and exit code 2 (not retried by the ExitCode
restart policy), never a traceback; any other failure stays a traceback, for the program's author."""

from __future__ import annotations

import pytest

from kftrain.job.kinds.restarts import is_retryable_exit_code
from kftrain.programs.common import run
from kftrain.programs.global_batch import GlobalBatchError
from kftrain.storage.errors import StorageError


def _raises(exc: BaseException) -> int:
    raise exc


@pytest.mark.parametrize(
    "error",
    [
        GlobalBatchError("--global-batch-size 64 is larger than the 28 training rows"),
        StorageError("s3://bucket/data: no such object"),
    ],
)
def test_a_users_error_is_one_line_and_a_permanent_exit_code(error, capsys):
    with pytest.raises(SystemExit) as ended:
        run(lambda: _raises(error))
    assert ended.value.code == 2 and not is_retryable_exit_code(2)
    assert capsys.readouterr().err.splitlines() == [f"ERROR: {error}"]


def test_the_programs_own_exit_code_and_its_bugs_pass_through():
    with pytest.raises(SystemExit) as ended:
        run(lambda: 0)
    assert ended.value.code == 0
    with pytest.raises(ZeroDivisionError):
        run(lambda: 1 // 0)
