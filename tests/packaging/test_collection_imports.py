"""Collecting the suite imports no heavy framework and starts no process (testbed/collection_imports.py): each
xdist worker collects every module in every run, and one ``import torch`` at a module's top costs seconds there.
Checked by what is imported, not by a time, so a busy machine neither fails nor hides it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from testbed.collection_imports import HEAVY, ROOT


def _check(*args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.collection_imports", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def test_collecting_the_suite_imports_no_heavy_framework_and_starts_no_process() -> None:
    code, found = _check()
    offenders = "\n".join(f"{module}:\n  " + "\n  ".join(what) for module, what in found["offenders"].items())
    assert not found["offenders"], (
        f"collection would import one of {', '.join(HEAVY)} or start a process; import it in the test or a "
        f"fixture (a requirement: testbed.needs.requires), or make the product module import it where it is used:"
        f"\n{offenders}"
    )
    assert not found["errors"] and not found["loaded_before"], found
    assert found["modules"] > 150 and code == 0  # the suite's modules were imported, not an empty folder


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_check_names_each_heavy_import_and_process_with_its_chain(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "conftest.py": 'pytest_plugins = ["helpers.plugin"]\n',
        "helpers/__init__.py": "",
        "helpers/plugin.py": "import subprocess, sys\nsubprocess.run([sys.executable, '-c', ''])\n",
        "helpers/uses_heavy.py": "\nimport fakeheavy.sub\n",
        "fakeheavy/__init__.py": "", "fakeheavy/sub.py": "",
        "tests/__init__.py": "",
        "tests/test_top.py": "import fakeheavy\n",
        "tests/deep/__init__.py": "",
        "tests/deep/test_through_a_helper.py": "import os\nfrom helpers import uses_heavy\n",
        "tests/test_lazy.py": "import importlib.util\nimport pytest\n"
                              "FOUND = importlib.util.find_spec('fakeheavy') is not None\n"
                              "def test_x():\n    import fakeheavy\n",
        "tests/test_skipped.py": "import pytest\npytest.skip('not here', allow_module_level=True)\n",
        "tests/test_broken.py": "raise ValueError('broken at import')\n",
    })  # fmt: skip
    code, found = _check("--root", str(tmp_path), "--heavy", "fakeheavy", "--folders", "tests")
    assert found["offenders"] == {
        "helpers.plugin": ["process started (subprocess.Popen): helpers/plugin.py:2"],
        "tests.test_top": ["import fakeheavy: tests/test_top.py:1"],
        "tests.deep.test_through_a_helper": [
            "import fakeheavy: tests/deep/test_through_a_helper.py:2 -> helpers/uses_heavy.py:2"
        ],
    }
    assert found["errors"] == {"tests.test_broken": "ValueError: broken at import"}
    assert found["modules"] == 6 and code == 1  # conftest and five test modules; test_lazy and test_skipped pass
