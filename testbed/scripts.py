"""The repository's scripts that are not a package (``bench/``, ``containers/``), loaded as modules for a test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from testbed.reference import REPO


def load_script(path: str, name: str) -> ModuleType:
    """The script at ``path`` (from the repository root) as module ``name``, loaded once per process; registered
    in ``sys.modules`` because a dataclass looks its module up there."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / Path(path))
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
