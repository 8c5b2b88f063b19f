"""What a test needs installed, checked without importing it.

Collection must stay fast (the whole suite collects in seconds): ``pytest.importorskip("tensorflow")`` at a
module's top imports TensorFlow into the collecting process (seconds each time), and a probe that starts a
subprocess costs the same whether or not the test runs. These helpers look a module up on ``sys.path``
(``importlib.util.find_spec``), and run the one probe that needs a process once per session, when a test asks.
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys

import pytest


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it (a submodule imports its parents)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def requires(*modules: str, reason: str = "") -> pytest.MarkDecorator:
    """A mark that skips a test (or, as ``pytestmark``, a module) unless every one of ``modules`` is installed."""
    missing = [m for m in modules if not installed(m)]
    return pytest.mark.skipif(
        bool(missing), reason=f"{', '.join(missing)} not installed{': ' + reason if reason else ''}"
    )


def require(*modules: str, reason: str = "") -> None:
    """Inside a test: skip it unless every one of ``modules`` is installed (nothing is imported)."""
    missing = [m for m in modules if not installed(m)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed{': ' + reason if reason else ''}")


@functools.cache
def horovod_frameworks() -> tuple[bool, bool]:
    """(PyTorch, TensorFlow): whether the installed Horovod was built with each framework and MPI.

    Asked in a subprocess: importing Horovod's framework ops loads the framework and MPI into the process."""
    if not installed("horovod"):
        return False, False
    probe = (
        "import horovod.torch as t; ok_t = t.mpi_built()\n"
        "try:\n    import horovod.tensorflow as f; ok_f = f.mpi_built()\n"
        "except Exception:\n    ok_f = False\n"
        "print(int(ok_t), int(ok_f))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return False, False
    torch_ok, tf_ok = proc.stdout.split()[-2:]
    return torch_ok == "1", tf_ok == "1"


@functools.cache
def horovod_gloo() -> bool:
    """Whether the installed Horovod was built with PyTorch and Gloo (elastic horovodrun), asked in a subprocess."""
    if not installed("horovod"):
        return False
    probe = "import horovod.torch as h; print(int(h.gloo_built()))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    return proc.returncode == 0 and proc.stdout.strip().endswith("1")
