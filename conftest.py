"""The test suite's fixtures, for tests/ and for the tests beside each component (components/<category>/<name>/):
all of them in tests/fixtures.py, registered here once (a plugin list belongs in the root conftest)."""

pytest_plugins = ["tests.fixtures"]
