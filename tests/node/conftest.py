"""The node tier's one control plane with a real node (testbed/controlplane/node.py) and the training-operator,
shared by its pod tests (the cluster gives the operator the node's PyTorchJob init image)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from testbed.controlplane import node_pods
from testbed.controlplane.cluster import ControlPlane


@pytest.fixture(scope="session")
def node_cluster() -> Iterator[ControlPlane]:
    yield from node_pods.for_tests([node_pods.LAUNCH_IMAGE], operators=["training-operator"])


@pytest.fixture(scope="session")
def core(node_cluster: ControlPlane) -> Iterator[Any]:
    with node_cluster.api_client() as api_client:
        yield client.CoreV1Api(api_client)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """test_node_host.py first: it starts and stops a node of its own, which must happen before the shared one starts
    (one node per machine: node_proxy.lock_service_routing)."""
    items.sort(key=lambda item: not item.nodeid.startswith("tests/node/test_node_host.py"))
