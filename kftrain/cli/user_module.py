"""Importing the module of a ``MODULE:FUNCTION`` pipeline reference: a module name or a ``path/to/file.py``.

Its folder goes on ``sys.path`` after the standard library, not first: a user's ``token.py`` must not replace a
standard module inside kftrain (local steps too: :func:`kftrain.cli.run.steps_without_cwd_on_path`). Whatever fails
at import (a syntax error, an import, a pipeline body that raises, ``sys.exit()``) is one line naming file and line.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import site
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, TracebackType

from kftrain.errors import KftrainError

_MODULE_FORMS = "a module name (my_pipeline, pkg.module, found from the current folder) or a .py file"


def import_user_module(module: str, given: str) -> ModuleType:
    """The module ``module`` names (a dotted name or a ``.py`` file), imported; ``given`` (the whole reference)
    starts every error."""
    if module.endswith(".py") or "/" in module or os.sep in module:
        return _import_file(Path(module), given)
    if not all(part.isidentifier() for part in module.split(".")):
        raise KftrainError(f"{given}: {module!r} is not {_MODULE_FORMS}")
    here = Path.cwd()
    add_after_stdlib(here)
    loaded = _guarded(lambda: importlib.import_module(module), module, here, given)
    top = module.split(".")[0]
    origin = Path(getattr(loaded, "__file__", None) or "").resolve()
    for own in (here / f"{top}.py", here / top):
        if own.exists() and not origin.is_relative_to(own.resolve() if own.is_dir() else own.resolve().parent):
            raise KftrainError(
                f"{given}: {module} is {origin}, not your {own.name}: the standard library (or a module already "
                f"imported) has that name and comes first; rename yours"
            )
    return loaded


def _import_file(path: Path, given: str) -> ModuleType:
    if path.suffix != ".py":
        raise KftrainError(f"{given}: {str(path)!r} is not {_MODULE_FORMS}")
    if path.is_dir():
        raise KftrainError(f"{given}: {path} is a folder, not a Python file")
    if not path.is_file():
        raise KftrainError(f"{given}: no file {path}")
    path = path.resolve()
    name = path.stem
    add_after_stdlib(path.parent)  # the modules beside it, as Python finds them from a script
    loaded = sys.modules.get(name)
    if loaded is not None:
        origin = getattr(loaded, "__file__", None)
        if origin and Path(origin).resolve() == path:
            return loaded
    # Imported under its own name, as a script's modules import it; a name that is another module's (the standard
    # library's token, an imported package) would replace that module for everything in this process.
    other = loaded or _find_spec(name)
    origin = getattr(other, "__file__", None) or getattr(other, "origin", None)
    if other is not None and Path(origin or "").resolve() != path:
        raise KftrainError(f"{given}: {name} is the name of {origin or 'a built-in module'}; rename {path.name}")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KftrainError(f"{given}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does, before the body runs (dataclasses, pickling, inspect need it)
    loader = spec.loader

    def load() -> ModuleType:
        loader.exec_module(module)
        return module

    try:
        return _guarded(load, name, path.parent, given)
    except BaseException:
        sys.modules.pop(name, None)
        raise


def _find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The module ``name`` as an import would find it, or None (a file named ``my.pipeline.py`` names no module)."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _guarded(load: Callable[[], ModuleType], module: str, folder: Path, given: str) -> ModuleType:
    """``load()``, whatever it raises (but an interrupt) as one line naming the file and line."""
    try:
        return load()
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(f"{exc.name}.")):
            raise KftrainError(
                f"{given}: no module named {module!r} in the current folder ({folder}) or on the Python path; "
                "run kftrain from the folder of your pipeline's module, or name its file (path/to/file.py:FUNCTION)"
            ) from None
        raise KftrainError(f"{given}: importing {module} failed{_where(exc.__traceback__, folder)}: {exc}") from None
    except SyntaxError as exc:
        at = f"{_shown(Path(exc.filename))}:{exc.lineno}" if exc.filename else module
        raise KftrainError(f"{given}: {at}: {type(exc).__name__}: {exc.msg}") from None
    except SystemExit as exc:
        raise KftrainError(
            f"{given}: importing {module} called sys.exit({exc.code!r}){_where(exc.__traceback__, folder)}; a "
            'pipeline module must not exit when imported (put that code under `if __name__ == "__main__":`)'
        ) from None
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        # KFP runs a pipeline's body when @dsl.pipeline decorates it: a body that raises, or a component called
        # with the wrong arguments, fails here.
        raise KftrainError(
            f"{given}: importing {module} failed{_where(exc.__traceback__, folder)}: {type(exc).__name__}: {exc}"
        ) from None


def _where(tb: TracebackType | None, folder: Path) -> str:
    """`` at file.py:LINE``: the innermost frame in a file of the user's folder that is no installed package's."""
    installed = _installed()
    found = ""
    for frame in traceback.extract_tb(tb):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(folder.resolve()) and not any(path.is_relative_to(p) for p in installed):
            found = f" at {_shown(path)}:{frame.lineno}"
    return found


def _shown(path: Path) -> str:
    """``path`` relative to the current folder when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _installed() -> list[Path]:
    """The folders installed packages live in (this environment's, the base Python's, the user's)."""
    paths = sysconfig.get_paths()
    found = [paths["purelib"], paths["platlib"], *site.getsitepackages(), site.getusersitepackages()]
    return [Path(p).resolve() for p in found]


def add_after_stdlib(folder: Path) -> None:
    """Put ``folder`` on ``sys.path`` right after the standard library (its zip, its folder, ``lib-dynload``), before
    the installed packages; unless it is on it already."""
    if any(Path(entry or ".").resolve() == folder.resolve() for entry in sys.path):
        return
    # The base Python's, also in a virtual environment (whose own prefix holds only its site-packages).
    base = {"base": sys.base_prefix, "installed_base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    base["installed_platbase"] = sys.base_exec_prefix
    stdlib = [Path(sysconfig.get_path(name, vars=base)).resolve() for name in ("stdlib", "platstdlib")]
    installed = _installed()

    def is_stdlib(entry: str) -> bool:
        path = Path(entry or ".").resolve()
        if any(path.is_relative_to(p) for p in installed):
            return False
        zipped = path.suffix == ".zip" and any(path.parent == s.parent for s in stdlib)  # lib/python311.zip
        return zipped or any(path.is_relative_to(s) for s in stdlib)

    after = max((i + 1 for i, entry in enumerate(sys.path) if is_stdlib(entry)), default=0)
    sys.path.insert(after, str(folder))
