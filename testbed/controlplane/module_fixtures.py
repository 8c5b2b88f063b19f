"""The fixtures a controlplane test module imports to get a control plane of its own (module scope), each named
``<name>_fixture`` and registered as ``<name>``; they read the module's ``NAMESPACE`` (and ``PLANS``).

Operated (every operator running, a node agent): ``operated_cluster_fixture``, ``node_fixture`` (each pod's outcome
from the module's ``PLANS``), ``api_fixture`` (the admin's ApiClient, the namespace ready for jobs). Bare (the API
server and etcd, no operator): ``bare_cluster_fixture``, ``custom_fixture`` (CustomObjectsApi, the namespace made),
``admin_fixture`` (the admin's ApiClient)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from testbed.controlplane import suite
from testbed.controlplane.cluster import ControlPlane, for_tests
from testbed.controlplane.node_agent import NodeAgent
from testbed.controlplane.rbac_accounts import admin_client


@pytest.fixture(scope="module", name="cluster")
def operated_cluster_fixture() -> Iterator[ControlPlane]:
    yield from suite.operated()


@pytest.fixture(scope="module", name="node")
def node_fixture(cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[NodeAgent]:
    yield from suite.node(cluster, request.module.PLANS)


@pytest.fixture(scope="module", name="api")
def api_fixture(cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from suite.admin_in(cluster, request.module.NAMESPACE)


@pytest.fixture(scope="module", name="cluster")
def bare_cluster_fixture() -> Iterator[ControlPlane]:
    # The module's own: other modules' tests create cluster-wide objects of the same names.
    yield from for_tests()


@pytest.fixture(scope="module", name="custom")
def custom_fixture(cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Any]:
    for api_client in suite.admin_with_namespace(cluster, request.module.NAMESPACE):
        yield client.CustomObjectsApi(api_client)


@pytest.fixture(scope="module", name="admin")
def admin_fixture(cluster: ControlPlane) -> Iterator[client.ApiClient]:
    yield from admin_client(cluster)
