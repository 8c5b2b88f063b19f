"""Pod security settings the tests give the launch step: what the restricted Pod Security Standard asks of a
container, and the ``security_context`` values a pod's API validation refuses (tests/launch checks kftrain refuses
them; tests/controlplane checks the real API server does)."""

from __future__ import annotations

from typing import Any

# What the restricted Pod Security Standard asks of a container (kubernetes@v1.36.3:staging/src/k8s.io/
# pod-security-admission/policy: check_runAsNonRoot.go, check_seccompProfile_restricted.go,
# check_allowPrivilegeEscalation.go, check_capabilities_restricted.go), with a user id for an image that has none.
RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}

# A ``security_context`` the API server refuses on a pod, and the field kftrain names.
SECURITY_CONTEXT_REFUSED: list[tuple[Any, str]] = [
    (["runAsNonRoot"], "security_context"),
    ({"runAsUser": -1}, "security_context.runAsUser"),
    ({"runAsGroup": 2**31}, "security_context.runAsGroup"),
    ({"privileged": "yes"}, "security_context.privileged"),
    ({"seccompProfile": {"type": "Default"}}, "security_context.seccompProfile.type"),
    ({"seccompProfile": {"type": "Localhost"}}, "security_context.seccompProfile.localhostProfile"),
    (
        {"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "p.json"}},
        "security_context.seccompProfile.localhostProfile",
    ),
    ({"appArmorProfile": {"type": "Localhost"}}, "security_context.appArmorProfile.localhostProfile"),
    ({"capabilities": {"drop": "ALL"}}, "security_context.capabilities.drop"),
    ({"procMount": "Masked"}, "security_context.procMount"),
    ({"allowPrivilegeEscalation": False, "privileged": True}, "security_context"),
    ({"allowPrivilegeEscalation": False, "capabilities": {"add": ["CAP_SYS_ADMIN"]}}, "security_context"),
]
