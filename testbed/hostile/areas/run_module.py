"""``kftrain run MODULE:FUNCTION`` on a user's module (kftrain/cli/user_module.py, reference.py, run.py): a syntax
error, ../x, a pipeline body that raises, a missing required parameter, a failed step, sys.exit(0) at import, a token.py
beside the pipeline; each run from the user's folder (the case's own), its pipeline root there.

The modules are tests/cli/test_reference.py's (``GOOD``, ``BODY_RAISES``, ``WRONG_CALL``, its cases) and
tests/cli/test_run_failures.py's (``ADDER``, ``FAILING_STEP``); a case that runs a pipeline runs it whole with KFP's
local runner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from testbed.hostile.case import CLEAR, FINE, WRONG, Case, Observed, Sandbox

AREA = "run-module"
SURFACE = "kftrain run MODULE:FUNCTION"


def _reference() -> Any:
    from tests.cli import test_reference

    return test_reference


def _failures() -> Any:
    from tests.cli import test_run_failures

    return test_run_failures


def _module(name: str) -> str:
    """One of the tests' pipeline modules, by its name there."""
    for tests in (_reference(), _failures()):
        if hasattr(tests, name):
            return str(getattr(tests, name))
    raise KeyError(name)


def _run(files: dict[str, str], ref: str, *params: str) -> Callable[[Sandbox], int]:
    """``kftrain run REF PARAMS --pipeline-root runs`` in a folder holding ``files`` (``@NAME``: the text of the tests'
    module of that name); a refused run creates nothing."""

    def run(sb: Sandbox) -> int:
        import textwrap

        for name, text in files.items():
            sb.write(name, textwrap.dedent(_module(text[1:]) if text.startswith("@") else text))
        code = sb.cli("run", ref, *params, "--pipeline-root", "runs")
        if code == 2 and (sb.work / "runs").exists():
            raise Observed(WRONG, "a refused run created its pipeline root")
        return code

    return run


# (name, files, reference, parameters, what the one line names)
REFUSED: list[tuple[str, dict[str, str], str, tuple[str, ...], str]] = [
    ("a syntax error", {"syn.py": "def broken(:\n"}, "syn:p", (), "syn.py:1: SyntaxError"),
    ("an import that fails", {"imp_fails.py": "import no_such_package_here\n"}, "imp_fails:p", (), "imp_fails.py:1"),
    ("../x", {}, "../x:p", (), "'../x' is not a module name"),
    ("../x.py", {}, "../x.py:p", (), "no file ../x.py"),
    ("a missing function", {"good.py": "@GOOD"}, "good:nothing", (), "has no 'nothing'"),
    ("a component, not a pipeline", {"good2.py": "@GOOD"}, "good2:add", (), "not a pipeline"),
    ("sys.exit(0) at import", {"exits.py": "import sys\n\nsys.exit(0)\n"}, "exits:p", (), "sys.exit(0) at exits.py:3"),
    ("SystemExit('bye') at import", {"bye.py": "raise SystemExit('bye')\n"}, "bye:p", (), "sys.exit('bye')"),
    ("a pipeline body that raises", {"body.py": "@BODY_RAISES"}, "body:p", (), "body.py:9: ValueError"),
    ("a component called wrong", {"wrong_call.py": "@WRONG_CALL"}, "wrong_call:p", (), "wrong_call.py:10"),
    ("a missing required parameter", {"good3.py": "@GOOD"}, "good3:adder", (), "missing parameter(s) a"),
    (
        "an unknown parameter",
        {"good4.py": "@GOOD"},
        "good4:adder",
        ("--param", "a=1", "--param", "c=3"),
        "unknown parameter(s) c",
    ),
    ("a parameter of the wrong type", {"good5.py": "@GOOD"}, "good5:adder", ("--param", "a=one"), "--param a='one'"),
    ("a module named like a standard one", {"token.py": "@GOOD"}, "token:adder", (), "token is"),
    ("a file named like a standard module", {"token.py": "@GOOD"}, "./token.py:adder", (), "token is the name of"),
    ("broken YAML", {"broken.yaml": "a: [\n"}, "broken.yaml", (), "malformed YAML"),
    ("a module name with a dash", {"my-pipe.py": "@GOOD"}, "my-pipe:adder", (), "my-pipe"),
    (
        "a --params-file that is not a mapping",
        {"good9.py": "@GOOD", "params.yaml": "[1, 2]\n"},
        "good9:adder",
        ("--params-file", "params.yaml"),
        "params.yaml",
    ),
]
RUNS: list[tuple[str, str, dict[str, str], str, tuple[str, ...], str]] = [
    (
        "a failed step",
        CLEAR,
        {"steps.py": "@FAILING_STEP"},
        "steps:failing_step",
        ("--param", "a=7"),
        "task mine failed",
    ),
    (
        "a token.py beside the pipeline",
        FINE,
        {"token.py": "raise RuntimeError('the user token.py was imported')\n", "adder.py": "@ADDER"},
        "adder:adder",
        ("--param", "a=3"),
        "",
    ),
    (
        "a kftrain.py beside the pipeline",
        FINE,
        {"kftrain.py": "raise RuntimeError('the user kftrain.py')\n", "adder.py": "@ADDER"},
        "adder:adder",
        ("--param", "a=3"),
        "",
    ),
    (
        "a yaml.py beside the pipeline",
        FINE,
        {"yaml.py": "raise RuntimeError('the user yaml.py')\n", "adder.py": "@ADDER"},
        "adder:adder",
        ("--param", "a=3"),
        "",
    ),
    (
        "a failed data prep of a shipped pipeline",
        CLEAR,
        {},
        "train-evaluate-export",
        ("--param", "source=nope.csv"),
        "task prepare-dataset failed",
    ),
]

CASES: list[Case] = [
    *(
        Case(AREA, name, CLEAR, SURFACE, _run(files, ref, *params), names=(said,))
        for name, files, ref, params, said in REFUSED
    ),
    *(
        Case(
            AREA,
            name,
            expect,
            SURFACE + " (a whole run)",
            _run(files, ref, *params),
            names=(said,) if said else (),
            timeout_s=240,
            users_traceback="the failing step's own traceback, in its log" if name == "a failed step" else "",
        )
        for name, expect, files, ref, params, said in RUNS
    ),
]
