"""One case, run in this process: ``python -m testbed.hostile.child CASE_ID MODULE SANDBOX`` (the case is the one of
that id in the module's ``CASES``).

The harness (:mod:`testbed.hostile.runner`) starts it with the sandbox's environment and reads back what it wrote:
its stdout and stderr, its exit code, and ``SANDBOX/.outcome.json`` (how the case's call ended, and its message).
A traceback is printed as Python prints an uncaught one, since that is what the user would have seen.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from testbed.hostile.case import OUTCOME, Observed, Refused, Sandbox


def run(case_id: str, module: str, root: Path) -> int:
    from kftrain.errors import KftrainError

    case = next(c for c in importlib.import_module(module).CASES if c.id == case_id)
    sandbox = Sandbox(root)
    os.chdir(sandbox.work)
    outcome: dict[str, Any]
    code = 0
    try:
        returned = case.run(sandbox)
        sandbox.ready()
        if returned is None:
            outcome = {"kind": "returned"}
        else:
            code = int(returned)
            outcome = {"kind": "exit", "code": code}
    except Observed as exc:
        outcome = {"kind": "observed", "class": exc.klass, "message": str(exc)}
        code = 3
    except (Refused, KftrainError) as exc:
        outcome = {"kind": "refused", "type": type(exc).__name__, "message": str(exc)}
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        code = 2
    except SystemExit as exc:  # a component's body ends so (kftrain.errors.fail_step), after its one line
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        outcome = {"kind": "exit", "code": code}
    except BaseException:
        traceback.print_exc()
        outcome = {"kind": "exception"}
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    (root / OUTCOME).write_text(json.dumps(outcome))
    return code


if __name__ == "__main__":
    # os._exit: threads a case's call left (a server's) must not hold the process past its outcome.
    status = run(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
    os._exit(status)
