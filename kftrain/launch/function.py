"""A Python function as every replica's program, as KFP's lightweight components and the training SDK's
``train_func`` embed one.

:func:`function_command` gives the ``command`` for a launch component: ``sh`` writes the source into the replica and
runs ``func(**kwargs)`` (JSON), needing Python, not kftrain. Missing ``packages_to_install`` are pip-installed on a
cluster as the training SDK does (kubeflow/training-operator@v1.9.0:sdk/python/kubeflow/training/utils/utils.py,
get_script_for_python_packages); under the local backend kftrain's environment is left alone and a missing one ends
the replica naming it. The function must be self-contained (imports inside, no enclosing variables): checked here.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from kftrain.contract import BACKEND_ENV
from kftrain.errors import KftrainError
from kftrain.job.kinds.programs import MPIRUN as MPIRUN

# Writes the program (passed as $0) to a file, so tracebacks show its lines and spawned processes can re-import it.
RUNNER = 'program="$(mktemp -d)/kftrain_function.py"; printf "%s" "$0" > "$program"; exec {python} "$program"'


class FunctionError(KftrainError):
    """A function cannot run as a replica's program: the message names what it depends on."""


def function_command(
    func: Callable[..., Any],
    *,
    kwargs: dict[str, Any] | None = None,
    packages_to_install: Sequence[str] = (),
    pip_index_urls: Sequence[str] = (),
    prefix: Sequence[str] = (),
    python: str = "python",
) -> list[str]:
    """The ``command`` that runs ``func(**kwargs)`` in every replica.

    ``packages_to_install`` are pip requirements (``"torch==2.3.1"``, ``"pandas>=2"``); on a cluster those not
    satisfied in the replica are installed before ``func`` runs, from ``pip_index_urls`` when given; locally none is
    (see the module's docstring). ``prefix`` goes before the program: :data:`MPIRUN` for an MPIJob, whose Launcher
    starts the ranks.
    """
    source = function_source(func)
    arguments = json.dumps(kwargs or {})  # the values must travel as JSON: a check, and the form they travel in
    program = "\n".join(
        [
            "# Written by kftrain.launch.function.function_command.",
            textwrap.dedent(inspect.getsource(install_missing)),
            f"install_missing({list(packages_to_install)!r}, {list(pip_index_urls)!r}, {BACKEND_ENV!r})",
            "",
            source,
            "",
            "if __name__ == '__main__':",
            "    import json",
            "",
            f"    {func.__name__}(**json.loads({arguments!r}))",
            "",
        ]
    )
    return [*prefix, "sh", "-ec", RUNNER.format(python=python), program]


def function_source(func: Callable[..., Any]) -> str:
    """The source of ``func`` without decorators; an error naming what it uses from outside itself."""
    if not inspect.isfunction(func) or func.__name__ == "<lambda>":
        raise FunctionError(f"{func!r}: only a function defined with def can be a replica's program")
    name = func.__name__
    if func.__code__.co_freevars:
        raise FunctionError(
            f"{name} uses variables of its enclosing function ({', '.join(func.__code__.co_freevars)}): "
            "pass them as kwargs"
        )
    source = textwrap.dedent(inspect.getsource(func))
    definition = ast.parse(source).body[0]
    assert isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef)
    outside = sorted(n for n in _free_names(definition) if n in func.__globals__ and not hasattr(builtins, n))
    if outside:
        raise FunctionError(
            f"{name} uses module-level names ({', '.join(outside)}) the replica will not have: import them inside "
            "the function, or pass values as kwargs"
        )
    start = definition.lineno - 1  # the def line, after any decorator lines
    return "\n".join(source.splitlines()[start:])


def _free_names(definition: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names the function reads without binding them itself (parameters, assignments, imports, inner defs)."""
    bound = {definition.name}
    read: set[str] = set()
    for node in ast.walk(definition):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store | ast.Del) else read).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.ExceptHandler):
            bound.add(node.name or "")
    return read - bound


def install_missing(requirements: list[str], index_urls: list[str], backend_env: str) -> None:
    """Pip-install the requirements this Python does not satisfy (runs in the replica, before the function); under
    the local backend (``backend_env`` is ``local``) install nothing and end with one line naming them instead."""
    import importlib
    import importlib.metadata
    import os
    import re
    import shlex
    import subprocess
    import sys

    parse: Any = None  # without packaging no version can be checked: a requirement is satisfied by its name alone
    for module in ("packaging.requirements", "pip._vendor.packaging.requirements"):
        try:
            parse = importlib.import_module(module).Requirement
            break
        except ImportError:
            continue

    def satisfied(text: str) -> bool:
        name = parse(text).name if parse is not None else re.split(r"[^A-Za-z0-9._-]", text.strip(), maxsplit=1)[0]
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return False
        return parse is None or parse(text).specifier.contains(installed, prereleases=True)

    missing = [r for r in requirements if not satisfied(r)]
    if not missing:
        return
    pip = [sys.executable, "-m", "pip", "install"]
    if os.environ.get(backend_env) == "local":
        needed = ", ".join(missing)
        command = shlex.join([*pip, *missing])
        raise SystemExit(
            f"the function needs {needed}, not installed in this environment; a local run installs nothing into it "
            f"(on a cluster the step's image has them or they are installed there): install them with {command}"
        )
    print(f"installing {' '.join(missing)}", flush=True)
    index = [arg for i, url in enumerate(index_urls) for arg in ("--index-url" if i == 0 else "--extra-index-url", url)]
    subprocess.check_call([*pip, "--quiet", "--no-warn-script-location", *index, *missing])
