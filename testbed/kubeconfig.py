"""A kubeconfig for a test's API server: one cluster, one user with a bearer token, one context that is current."""

from __future__ import annotations

from typing import Any


def kubeconfig(
    server: str, token: str, *, namespace: str = "default", name: str = "c", user: str = "u"
) -> dict[str, Any]:
    """The kubeconfig (as a mapping, for ``yaml.safe_dump``) whose current context, ``name``, is ``server`` as
    ``user`` (its ``token``) in ``namespace``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user, "namespace": namespace}}],
        "current-context": name,
    }
