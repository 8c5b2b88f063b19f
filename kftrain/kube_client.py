"""Where the Kubernetes API is, for whoever in kftrain talks to it: the Kubernetes backend, and a step reading its
namespace's kfp-launcher ConfigMap. Importing this module does not import the Kubernetes client."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kftrain.errors import KftrainError

if TYPE_CHECKING:
    from kubernetes import client

# The namespace of the pod this runs in, as its service account's token mount gives it.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# A request's whole answer, at most: kube-apiserver's own limit on a request (--request-timeout,
# kubernetes/kubernetes@v1.34.0:staging/src/k8s.io/apiserver/pkg/server/config.go, NewConfig: RequestTimeout 60 s).
CALL_DEADLINE_S = 60.0


def load_client() -> tuple[client.ApiClient, str | None]:
    """A client for the cluster this runs in (its service account), else the current context of the kubeconfig
    (``KUBECONFIG``, else ~/.kube/config), and that context's namespace (None in a pod, or when it names none)."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
        return _bounded(client.ApiClient(cfg)), None
    except ConfigException:
        pass
    # KUBECONFIG as it is now: the client library reads it once, when it is imported.
    kubeconfig = os.environ.get("KUBECONFIG") or None
    try:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        _, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError) as exc:
        raise KftrainError(
            f"kubernetes backend: no cluster configuration (not in a pod, and no usable kubeconfig): {exc}"
        ) from None
    return _bounded(client.ApiClient(cfg)), (active or {}).get("context", {}).get("namespace")


def _bounded(api_client: client.ApiClient) -> client.ApiClient:
    """``api_client``, each request of which is answered in whole within :data:`CALL_DEADLINE_S` (the Kubernetes
    backend bounds its calls more finely: :mod:`kftrain.backends.kubernetes.api`)."""
    from kftrain.deadline import bound_requests

    bound_requests(api_client.rest_client, lambda: CALL_DEADLINE_S)
    return api_client
