"""The launch step in a namespace enforcing a Pod Security Standard, against the real control plane (kube-apiserver's
Pod Security Admission, the four operators, a node agent): each kind's pods as the step makes them meet
``baseline`` but not ``restricted``, where the step fails at once with the API server's words; with the
``security_context`` input every kind runs under ``restricted`` but a PyTorchJob's Workers (training-operator's
``init-pytorch``), which run once the operator is given a secured init container template.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.controlplane import suite
from testbed.controlplane.launch_life import (
    ENFORCING,
    TYPED,
    fails_at_once,
    job_pods,
    run_step_beside,
    running_job,
    succeed,
    use_namespace,
)
from testbed.controlplane.launch_life_fixtures import *  # noqa: F403 (the module's fixtures)
from testbed.controlplane.launch_life_fixtures import StepBed
from testbed.launch_cluster import Launch, step_inputs
from testbed.pod_security import RESTRICTED, secured_init_template

pytestmark = suite.MARKS


# --- the tests --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", list(ENFORCING))
@pytest.mark.parametrize("launch", TYPED, ids=lambda launch: launch.kind)
def test_in_a_namespace_enforcing_pod_security_the_step_runs_or_says_at_once_why_not(
    level: str, launch: Launch, bed: StepBed
) -> None:
    """Each kind's pods as the step makes them from typed inputs meet ``baseline`` (no host namespace, path or
    port, no privilege, no added capability): the job runs and succeeds. They do not meet ``restricted`` (it requires
    runAsNonRoot, a seccomp profile, no privilege escalation and every capability dropped), so the API server refuses
    each pod the operators create; the step fails within seconds with the API server's words, not after its pending
    timeout (600 s by default), and deletes the job."""
    namespace = ENFORCING[level]
    use_namespace(bed.cluster, namespace, bed.tmp_path, bed.monkeypatch)
    inputs = step_inputs(launch, bed.tmp_path)
    identity = Path(inputs["job"])
    if level == "baseline":

        def run_then_succeed() -> None:
            name = running_job(bed.api, launch, identity, namespace)
            succeed(bed.api, bed.node, launch, name, namespace)

        run_step_beside(run_then_succeed, launch, inputs)
        return
    said = fails_at_once(
        lambda: launch.component.python_func(**inputs), bed.api, launch, identity, bed.capsys, namespace
    )
    assert "violates PodSecurity" in said and f'"{level}:latest"' in said, said
    assert f"namespace {namespace} enforces Pod Security Admission" in said, said


@pytest.mark.parametrize("launch", TYPED, ids=lambda launch: launch.kind)
def test_with_the_security_context_input_every_kind_runs_in_a_restricted_namespace_but_a_pytorchjobs_workers(
    launch: Launch, bed: StepBed
) -> None:
    """The same typed inputs with ``security_context`` set to what ``restricted`` requires: the API server admits
    every pod the operators create, and the job runs to its end; every container of every pod is checked, the
    operators' own included.

    But a PyTorchJob's Workers: training-operator v1.9.0 adds ``init-pytorch`` to each, with no securityContext
    (pkg/controller.v1/pytorch/initcontainer.go). It inherits runAsNonRoot and the seccomp profile from the pod,
    which the input sets; allowPrivilegeEscalation and the dropped capabilities are a container's alone. So the
    Master is created and runs, every Worker is refused, and the job never gets a status: the step must fail
    within seconds, naming the operator's container and how a cluster fixes it, and delete the job."""
    namespace = ENFORCING["restricted"]
    use_namespace(bed.cluster, namespace, bed.tmp_path, bed.monkeypatch)
    inputs = step_inputs(launch, bed.tmp_path, security_context=RESTRICTED)
    identity = Path(inputs["job"])
    if launch.kind == "PyTorchJob":
        said = fails_at_once(
            lambda: launch.component.python_func(**inputs), bed.api, launch, identity, bed.capsys, namespace
        )
        assert 'container "init-pytorch" must set securityContext.allowPrivilegeEscalation=false' in said, said
        assert "runAsNonRoot != true" not in said and "seccompProfile" not in said, said  # inherited from the pod
        assert "container init-pytorch: training-operator adds it" in said, said
        return

    def run_then_succeed() -> None:
        name = running_job(bed.api, launch, identity, namespace)
        for pod in job_pods(bed.api, launch, name, namespace):
            assert pod.spec.security_context.run_as_non_root, pod.metadata.name
            for c in [*pod.spec.containers, *(pod.spec.init_containers or [])]:
                assert c.security_context.allow_privilege_escalation is False, (pod.metadata.name, c.name)
        succeed(bed.api, bed.node, launch, name, namespace)

    run_step_beside(run_then_succeed, launch, inputs)


def test_a_pytorchjob_runs_in_a_restricted_namespace_once_the_operators_init_container_template_is_secured(
    bed: StepBed,
) -> None:
    """The fix the step names when a PyTorchJob's Workers are refused for ``init-pytorch``, done as an admin does
    it: training-operator started with an init container template that sets allowPrivilegeEscalation and drops
    every capability. With the ``security_context`` input (runAsNonRoot and the seccomp profile on the pod, which
    init-pytorch inherits), every pod is admitted under restricted and the job runs to its end."""
    launch = next(t for t in TYPED if t.kind == "PyTorchJob")
    namespace = ENFORCING["restricted"]
    use_namespace(bed.cluster, namespace, bed.tmp_path, bed.monkeypatch)
    inputs = step_inputs(launch, bed.tmp_path, security_context=RESTRICTED)
    identity = Path(inputs["job"])

    def run_then_succeed() -> None:
        name = running_job(bed.api, launch, identity, namespace)
        workers = [p for p in job_pods(bed.api, launch, name, namespace) if "-worker-" in p.metadata.name]
        assert workers, "no Worker was admitted"
        for pod in workers:
            (init,) = pod.spec.init_containers
            assert init.name == "init-pytorch" and init.security_context.allow_privilege_escalation is False
        succeed(bed.api, bed.node, launch, name, namespace)

    with bed.cluster.operator_redeployed("training-operator", *secured_init_template()):
        run_step_beside(run_then_succeed, launch, inputs)
