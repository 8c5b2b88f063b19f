"""The fixtures of the modules that run the launch step against the real control plane (test_launch_life.py,
test_launch_pod_security.py). A module imports them all (``from ... import *``: each ``<name>_fixture`` is registered
as ``<name>``) and gets its own control plane, node agent and admin client (module scope), a kubeconfig for the
namespace, a namespace emptied after every test, and ``bed``: what a test drives the step with."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed.controlplane import suite
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.launch_life import NAMESPACE, empty_namespace, launcher_pod, prepare, use_namespace
from testbed.controlplane.node_agent import RUN, NodeAgent

__all__ = [
    "api_fixture",
    "bed_fixture",
    "clean_namespace_fixture",
    "cluster_fixture",
    "kubeconfig_fixture",
    "node_fixture",
    "stray_sigterm_recorded_fixture",
]


@dataclass(frozen=True)
class StepBed:
    """What a test drives the launch step with: the control plane, its admin client and node agent, and the test's
    own folder, environment and captured output."""

    cluster: ControlPlane
    api: Any
    node: NodeAgent
    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture[str]

    def launcher_pod(self, name: str) -> str:
        """The step's own pod ``name`` made, as the step's environment names it (:func:`launcher_pod`); its uid."""
        return launcher_pod(self.api, name, self.monkeypatch)


@pytest.fixture(name="bed")
def bed_fixture(
    cluster: ControlPlane,
    api: Any,
    node: NodeAgent,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> StepBed:
    return StepBed(cluster, api, node, tmp_path, monkeypatch, capsys)


@pytest.fixture(scope="module", name="cluster")
def cluster_fixture() -> Iterator[ControlPlane]:
    yield from suite.operated()


@pytest.fixture(scope="module", name="node")
def node_fixture(cluster: ControlPlane) -> Iterator[NodeAgent]:
    yield from suite.node(cluster, lambda pod: RUN)


@pytest.fixture(scope="module", name="api")
def api_fixture(cluster: ControlPlane) -> Iterator[Any]:
    with cluster.api_client() as api_client:
        prepare(api_client)
        yield api_client


@pytest.fixture(name="kubeconfig")
def kubeconfig_fixture(cluster: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_namespace(cluster, NAMESPACE, tmp_path, monkeypatch)


@pytest.fixture(autouse=True, name="stray_sigterm_recorded")
def stray_sigterm_recorded_fixture(sigterm_outside_the_step: list[int]) -> list[int]:
    """For every test: the SIGTERM :func:`run_step_beside` sends when its action fails may come once the step has
    returned, and must not end the test run."""
    return sigterm_outside_the_step


@pytest.fixture(autouse=True, name="clean_namespace")
def clean_namespace_fixture(api: Any) -> Iterator[None]:
    """Each test starts with nothing of an earlier one in the namespace."""
    yield
    empty_namespace(api)
