"""Issue 52, class 8: a user's module run at compile time (kftrain/cli/isolated.py): ``os._exit(0)``, a killed
process, a non-daemon thread or child processes (one in a session of its own) at import, under ``kftrain compile``,
``kftrain submit`` (to a port that refuses: nothing is sent before the compile) and ``kftrain run`` (the pipeline run
whole with KFP's local runner); each command run
as a user runs it, in a process of its own, so that a ``kftrain`` that never ends is a hang and a process its module
started that outlives it is left running.
"""

from __future__ import annotations

from collections.abc import Callable

from testbed.hostile.case import CLEAR, FINE, WRONG, Case, Observed, Refused, Sandbox
from testbed.user_modules import ONE_STEP_PIPELINE as PIPELINE

AREA = "compile-module"
# What the module does at import (before its pipeline).
EFFECTS = {
    "os._exit(0)": "import os\nos._exit(0)\n",
    "os._exit(3)": "import os\nos._exit(3)\n",
    "SIGKILL of itself": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "a non-daemon thread": "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()\n",
    "a child process": "import subprocess\nsubprocess.Popen(['sleep', '3600'])\n",
    "a child in a session of its own": "import subprocess\nsubprocess.Popen(['setsid', 'sleep', '3600'])\n",
    "a forked child that sleeps": "import os, time\nif os.fork() == 0:\n    time.sleep(3600)\n    os._exit(0)\n",
}
ENDS = ("os._exit(0)", "os._exit(3)", "SIGKILL of itself")
COMMANDS = {
    "compile": ("compile", "mine.py:mine", "-o", "out.yaml"),
    "submit": ("submit", "mine.py:mine", "--host", "http://127.0.0.1:9", "--timeout", "20"),
    "run": ("run", "mine.py:mine", "--pipeline-root", "runs"),
}


def _command(effect: str, argv: tuple[str, ...]) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        sb.write("mine.py", EFFECTS[effect] + PIPELINE)
        sb.ready()
        launched = sb.process(*argv)
        code = launched.finish(timeout=150)
        if argv[0] == "compile" and (code == 0) != (sb.work / "out.yaml").is_file():
            raise Observed(WRONG, f"compile ended {code} and its output is {'' if code else 'not '}missing")
        if code:
            lines = [line for line in launched.output().splitlines() if line.strip()]
            raise Refused(lines[-1] if lines else f"exit {code}")
        return code

    return run


def _expect(effect: str, command: str) -> tuple[str, tuple[str, ...]]:
    if effect in ENDS:
        return CLEAR, ("mine.py",)
    if command == "submit":  # compiled, then refused by the port: a clear error naming the host
        return CLEAR, ("127.0.0.1:9",)
    return FINE, ()


CASES: list[Case] = [
    Case(
        AREA,
        f"{command}: {effect} at import",
        _expect(effect, command)[0],
        f"kftrain {command} MODULE:FUNCTION",
        _command(effect, argv),
        names=_expect(effect, command)[1],
        timeout_s=180,
    )
    for command, argv in COMMANDS.items()
    for effect in EFFECTS
]
