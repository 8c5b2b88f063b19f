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


# What a cluster admin gives training-operator (--pytorch-init-container-template-file) so that a PyTorchJob's
# Workers meet Pod Security `restricted`: v1.9.0's own template (kubeflow/training-operator@v1.9.0:pkg/controller.v1/
# pytorch/initcontainer.go, initContainerTemplate) with the two fields a container cannot inherit from its pod.
INIT_PYTORCH_TEMPLATE_FILE = "/tmp/init-pytorch.yaml"  # in the operator's own /tmp
INIT_PYTORCH_TEMPLATE = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  securityContext:
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
  command:
  - sh
  - -c
  - >-
    err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}};
    then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err
"""


def secured_init_template() -> tuple[list[str], dict[str, str]]:
    """What ``operator_redeployed("training-operator", ...)`` is given for that template: its flag, and the file
    written to the operator's /tmp."""
    flag = f"--pytorch-init-container-template-file={INIT_PYTORCH_TEMPLATE_FILE}"
    return [flag], {INIT_PYTORCH_TEMPLATE_FILE.rpartition("/")[2]: INIT_PYTORCH_TEMPLATE}
