"""``python -m testbed.fake_kfp``: the fake KFP API server a reader tries ``kftrain submit``/``schedule`` on; it
prints the ``--host`` to pass and each request it answers, and stops on Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest

from kftrain.cli.app import main
from testbed.reference import REPO


def test_it_serves_on_127_0_0_1_prints_the_host_and_stops_on_ctrl_c(capsys: pytest.CaptureFixture[str]) -> None:
    server = subprocess.Popen([sys.executable, "-m", "testbed.fake_kfp"], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        found = re.match(r"fake KFP API server: (http://127\.0\.0\.1:\d+) ", first)
        assert found, first
        host = found.group(1)
        hints = [server.stdout.readline().strip() for _ in range(3)]
        assert hints[0] == f"kftrain submit pytorch-digits --host {host} --wait", hints
        assert main(["schedule", "list", "--host", host]) == 0
        assert capsys.readouterr().out == "no recurring runs\n"
        answered = server.stdout.readline()
        while answered.startswith("GET /apis/v2beta1/healthz"):
            answered = server.stdout.readline()
        assert answered == "GET /apis/v2beta1/recurringruns\n"
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
