"""How a failed job on the local backend is summed up: a program restarted until its limit says so in the first
line, and its traceback names the user's own script, not the job's working folder (gone with the job)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from kftrain.backends.base import JobPhase
from kftrain.backends.local import LocalBackend
from kftrain.job import load_manifest
from testbed.local_harness import options, pod_env, rep
from testbed.manifests import pytorchjob

pytestmark = pytest.mark.usefixtures("no_leftover_processes", "clean_parent_env")

CRASH = """
def main():
    raise ValueError("my bug")


main()
"""


@pytest.mark.parametrize(("policy", "restarted"), [("OnFailure", True), ("Never", False)])
def test_a_crash_names_the_users_script_and_says_it_was_restarted(
    tmp_path: Path, out_dir: Path, policy: str, restarted: bool
) -> None:
    launch = tmp_path / "project"
    launch.mkdir()
    (launch / "train.py").write_text(textwrap.dedent(CRASH))
    master = rep(1, "pytorch", [sys.executable, "train.py"], pod_env(out_dir), restart_policy=policy)
    manifest = pytorchjob({"Master": master}, runPolicy={"backoffLimit": 2})
    result = LocalBackend(options(tmp_path, cwd=launch)).run(load_manifest(manifest))
    assert (result.phase, result.failed_replica, result.exit_code) == (JobPhase.FAILED, "master-0", 1)
    files = [line.strip() for line in result.log_tail if line.strip().startswith("File ")]
    assert files, result.log_tail
    assert all(line.startswith(f'File "{launch / "train.py"}", line ') for line in files), result.log_tail
    head = result.describe().splitlines()[0]
    if restarted:
        assert head.startswith("job Failed (BackoffLimitExceeded): master-0 exited with code 1 after 1 restart(s) ")
        assert "(restartPolicy OnFailure restarts it on this exit code; Never fails the job at once)" in head
    else:
        assert head == "job Failed (ReplicaFailed): master-0 exited with code 1"
