"""The test suite's fixtures, for tests/ and for the tests beside each component (components/<category>/<name>/):
all of them in testbed/fixtures.py, registered here once (a plugin list belongs in the root conftest)."""

pytest_plugins = ["testbed.fixtures"]
