"""What collecting the suite costs in imports: every test module and conftest.py imported in one fresh process in
which the heavy frameworks (:data:`HEAVY`) cannot be imported and no process can be started; each attempt is
recorded with the chain of the suite's own frames (tests, testbed, kftrain, ...) that made it.

pytest imports every test module to collect it, in each xdist worker, in every run: a framework imported at a test
module's top, by a testbed helper or by a product module it imports costs seconds there each time. Such an import
belongs in the test or a fixture (a requirement: ``testbed.needs.requires``, which imports nothing), a probe that
starts a process in a session fixture. A blocked import raises ImportError, so nothing heavy is loaded here and
the check costs about what collecting does. ``python -m testbed.collection_imports`` prints what it found (JSON).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tomllib
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Where pytest collects (pyproject.toml's testpaths): its default python_files (test_*.py), each conftest.py.
TEST_FOLDERS = tuple(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"])

# Imported alone on the 2-core machine (seconds): tensorflow 11, peft 9, torch 5, accelerate 4, sklearn 3.3,
# mlflow 3.1, transformers 1.4 (with torch: 5+), pandas 1.1, pyarrow.dataset 1.1 (it imports pandas), moto 1.
HEAVY = (
    "torch", "tensorflow", "keras", "tf_keras", "transformers", "peft", "accelerate", "datasets", "mlflow",
    "sklearn", "scipy", "pandas", "pyarrow.dataset", "onnx", "onnxruntime", "horovod", "moto", "boto3", "s3fs",
)  # fmt: skip

PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.fork", "os.spawn"})


def collected_modules(root: Path, folders: tuple[str, ...] = TEST_FOLDERS) -> list[str]:
    """The dotted names pytest imports to collect ``folders`` (every folder is a package: prepend import mode),
    each folder's conftest.py before its tests."""
    names = ["conftest"] if (root / "conftest.py").is_file() else []
    for folder in folders:
        paths = sorted((root / folder).rglob("*.py"), key=lambda p: (p.parent.parts, p.name != "conftest.py", p.name))
        names += [
            ".".join(p.relative_to(root).with_suffix("").parts)
            for p in paths
            if p.name == "conftest.py" or p.name.startswith("test_")
        ]
    return names


class Guard:
    """Refuses, and records by the module being collected, each heavy import and each process started."""

    def __init__(self, root: Path, heavy: tuple[str, ...]) -> None:
        self.root = root
        self.heavy = heavy
        self.collecting = ""
        self.found: dict[str, list[str]] = {}

    def _chain(self) -> str:
        here = Path(__file__).resolve()
        frames = []
        for frame in traceback.extract_stack()[:-2]:
            path = Path(frame.filename)
            if path.is_relative_to(self.root) and ".venv" not in path.parts and path.resolve() != here:
                frames.append(f"{path.relative_to(self.root)}:{frame.lineno}")
        return " -> ".join(frames) or "(outside the suite's files)"

    def _record(self, what: str) -> None:
        self.found.setdefault(self.collecting, []).append(f"{what}: {self._chain()}")

    def is_heavy(self, name: str) -> bool:
        return any(name == h or name.startswith(h + ".") for h in self.heavy)

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> None:
        # importlib.util.find_spec (testbed.needs.installed) asks whether a module is there: that is no import.
        caller = sys._getframe(2).f_code  # 1: importlib's _find_spec; 2: an import, or importlib.util.find_spec
        probe = caller.co_name == "find_spec" and "importlib" in caller.co_filename and "util" in caller.co_filename
        if probe or not self.is_heavy(name):
            return None
        self._record(f"import {name}")
        raise ImportError(f"{name} is not imported while collecting (testbed/collection_imports.py)", name=name)

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event in PROCESS_EVENTS:
            self._record(f"process started ({event})")
            raise RuntimeError(f"no process is started while collecting (testbed/collection_imports.py): {event}")


def check(root: Path = ROOT, heavy: tuple[str, ...] = HEAVY, folders: tuple[str, ...] = TEST_FOLDERS) -> dict:
    """Imports what collecting ``root`` imports, under a :class:`Guard`. Call it in a process of its own: the guard
    stays installed (an audit hook cannot be removed)."""
    guard = Guard(root, heavy)
    already = sorted(name for name in sys.modules if guard.is_heavy(name))  # a site hook's: reported, not missed
    sys.path.insert(0, str(root))
    sys.meta_path.insert(0, guard)  # a finder by protocol (find_spec)
    sys.addaudithook(guard.audit)
    errors: dict[str, str] = {}
    names = collected_modules(root, folders)
    count = len(names)
    while names:
        name = guard.collecting = names.pop(0)
        try:
            module = importlib.import_module(name)
            if name.endswith("conftest"):  # the plugins it names are imported before anything is collected
                plugins = getattr(module, "pytest_plugins", [])
                names[:0] = [plugins] if isinstance(plugins, str) else list(plugins)
        except BaseException as exc:  # pytest.skip at a module's top raises a BaseException
            if type(exc).__name__ != "Skipped" and name not in guard.found:
                errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return {"modules": count, "offenders": guard.found, "errors": errors, "loaded_before": already}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--heavy", default=",".join(HEAVY), help="comma-separated module names")
    parser.add_argument("--folders", default=",".join(TEST_FOLDERS))
    args = parser.parse_args(argv)
    found = check(args.root.resolve(), tuple(args.heavy.split(",")), tuple(args.folders.split(",")))
    print(json.dumps(found, indent=1))
    return 1 if found["offenders"] or found["errors"] or found["loaded_before"] else 0


if __name__ == "__main__":
    sys.exit(main())
