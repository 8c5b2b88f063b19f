"""What the controlplane test modules set up alike: their marks, a control plane running every operator, a node
agent on it, and the admin's client with a namespace ready for jobs (each a module fixture's body)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testbed.controlplane.cluster import ControlPlane, for_tests
from testbed.controlplane.kubeflow_operators import OPERATORS
from testbed.controlplane.namespaces import install_cluster_runtimes, ready_namespace
from testbed.controlplane.node_agent import NodeAgent, Outcome

MARKS = [
    pytest.mark.slow,
    pytest.mark.controlplane,
    # One control plane per worker: keep the module's tests on one.
    pytest.mark.xdist_group("controlplane"),
]


def operated() -> Iterator[ControlPlane]:
    """A control plane running every operator (:func:`for_tests`)."""
    yield from for_tests(operators=tuple(OPERATORS))


def node(cluster: ControlPlane, outcome: Callable[[dict[str, Any]], Outcome]) -> Iterator[NodeAgent]:
    """A node agent on ``cluster`` giving each pod ``outcome(pod)``."""
    with NodeAgent(cluster, outcome=outcome) as agent:
        yield agent


def admin_in(cluster: ControlPlane, namespace: str) -> Iterator[Any]:
    """The admin's ApiClient, with ``namespace`` ready for jobs (its default ServiceAccount made) and Trainer's
    ClusterTrainingRuntimes installed."""
    with cluster.api_client() as api_client:
        ready_namespace(api_client, namespace)
        install_cluster_runtimes(api_client)
        yield api_client


def admin_with_namespace(cluster: ControlPlane, namespace: str) -> Iterator[Any]:
    """The admin's ApiClient, with ``namespace`` made (nothing waited for: with no kube-controller-manager, no
    ServiceAccount comes)."""
    from kubernetes import client

    with cluster.api_client() as api_client:
        client.CoreV1Api(api_client).create_namespace({"metadata": {"name": namespace}})
        yield api_client
