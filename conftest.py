"""The test suite's fixtures, for tests/ and for the tests beside each component (components/<category>/<name>/):
all of them in testbed/fixtures.py, registered here once (a plugin list belongs in the root conftest).

Bytecode is cached under .pytest_cache/pycache even where PYTHONDONTWRITEBYTECODE is set: without it every
collection parses, rewrites (pytest's asserts) and compiles each test module and each module they import again,
about half of collecting the suite. The tree itself gets no __pycache__; processes the tests start are unaffected.
"""

import sys
from pathlib import Path

if sys.dont_write_bytecode:
    sys.pycache_prefix = str(Path(__file__).parent / ".pytest_cache" / "pycache")
    sys.dont_write_bytecode = False

pytest_plugins = ["testbed.fixtures"]
