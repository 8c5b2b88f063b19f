"""The fake API server's discovery: the API groups, versions and resources it serves, as the real client asks."""

from __future__ import annotations

from typing import Any

from testbed.fake_k8s.api import KIND_NAMES, PLURALS_BY_GROUP, group_of
from testbed.fake_k8s.transport import Transport


class Discovery(Transport):
    """Discovery answers: custom resources' groups at the versions ``FakeKube.served`` lists, and the core v1."""

    def _group_versions(self, group: str) -> list[dict[str, str]]:
        return [{"groupVersion": f"{group}/{v}", "version": v} for v in self.kube.served_versions(group)]

    def api_groups(self, method: str, query: dict[str, str], body: Any) -> None:
        groups = []
        for group in PLURALS_BY_GROUP:
            versions = self._group_versions(group)
            if versions:
                groups.append({"name": group, "versions": versions, "preferredVersion": versions[0]})
        self._send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    def api_group(self, method: str, query: dict[str, str], body: Any, group: str) -> None:
        versions = self._group_versions(group)
        if not versions:
            self._status(404, "NotFound", "the server could not find the requested resource")
            return
        self._send_json(
            200,
            {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": group,
                "versions": versions,
                "preferredVersion": versions[0],
            },
        )

    def api_resources(self, method: str, query: dict[str, str], body: Any, group: str, version: str) -> None:
        plurals = [p for p, vs in self.kube.served.items() if version in vs and group_of(p) == group]
        if not plurals:
            self._status(404, "NotFound", "the server could not find the requested resource")
            return
        resources = [
            {
                "name": p,
                "singularName": KIND_NAMES[p].lower(),
                "namespaced": True,
                "kind": KIND_NAMES[p],
                "verbs": ["create", "delete", "get", "list", "patch", "watch"],
            }
            for p in plurals
        ]
        self._send_json(
            200,
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}",
                "resources": resources,
            },
        )

    def core_api(self, method: str, query: dict[str, str], body: Any) -> None:
        self._send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})

    def core_resources(self, method: str, query: dict[str, str], body: Any) -> None:
        resources = [
            {"name": n, "singularName": s, "namespaced": True, "kind": k, "verbs": ["get", "list", "watch"]}
            for n, s, k in (
                ("pods", "pod", "Pod"),
                ("pods/log", "", "Pod"),
                ("events", "event", "Event"),
                ("configmaps", "configmap", "ConfigMap"),
                ("secrets", "secret", "Secret"),
            )
        ]
        self._send_json(
            200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": resources}
        )
