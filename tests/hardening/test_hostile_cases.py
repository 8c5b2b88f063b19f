"""Issue 37's hostile and careless cases, re-run: each ends in its expected class ("clear error" or "fine"), never a
traceback, a hang, a loss, a leak, an escape or an input accepted wrongly.

One test per case of testbed/hostile (its table: ``testbed.hostile.table.cases``), each run in a process of its own
under its deadline and classified by observation (``testbed.hostile.runner``); ``python -m testbed.hostile`` runs the
same cases and prints the table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.hostile.case import S3_ENDPOINT_ENV, SKIPPED, Case
from testbed.hostile.runner import run_case, verdict
from testbed.hostile.table import cases

pytestmark = pytest.mark.slow  # some 350 processes, a few of them whole local jobs and pipeline runs

OUTPUT_LINES = 40


@pytest.mark.parametrize("case", cases(), ids=[case.id for case in cases()])
def test_a_hostile_case_ends_in_its_expected_class(
    case: Case, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "s3" in case.needs:
        monkeypatch.setenv(S3_ENDPOINT_ENV, request.getfixturevalue("moto").endpoint)
    result = run_case(case, tmp_path)
    if result.observed == SKIPPED:
        pytest.skip(result.message)
    tail = "\n".join(line[:300] for line in result.output.splitlines()[-OUTPUT_LINES:])
    assert result.as_expected, f"{case.id} ({case.surface}): {verdict(result)}: {result.message}\n{tail}"
