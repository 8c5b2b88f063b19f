"""Every launch input is checked as the API server (or the kubelet, or the operator) would check it, before anything is
created: a value Kubernetes would refuse is a one-line error naming the input; a number given for a string input is
the string it means (KFP passes maps and lists as JSON); a secret_env value is never quoted; an env entry may not
replace a variable read from a secret; PVC mounts each get a valid volume, none is dropped.

The rules and where they come from: kftrain/job/pod_checks.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kftrain.errors import JobSpecError
from kftrain.job import apply_pod_settings, kind_for, render_manifest
from kftrain.job.kinds.trainjob.catalog import RUNTIMES_ENV
from kftrain.job.pod_apply import pvc_volume_name
from kftrain.job.validate import validate_job
from kftrain.launch.inputs import parse_launch_inputs
from testbed.manifests import replicated_job, training_runtime
from testbed.pod_security import RESTRICTED, SECURITY_CONTEXT_REFUSED

PROGRAM = ["python", "-c", "print(1)"]
# The part of RESTRICTED a pod's securityContext holds.
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}


def build(kind: str = "PyTorchJob", **inputs: Any) -> dict[str, Any]:
    """The manifest the launch step would create from ``inputs`` (as a component gets them), or a JobSpecError."""
    step_kind = kind_for(kind)
    parsed = parse_launch_inputs(step_kind, {"command": PROGRAM, **inputs})
    job = parsed.request.to_job(runtimes=step_kind.runtimes_from_env())
    job = apply_pod_settings(job, parsed.pods)
    validate_job(job)
    return render_manifest(job)


REFUSED = [
    # node selector: label keys (IsQualifiedName) and values (IsValidLabelValue)
    ({"node_selector": {"bad key!": "x"}}, "node_selector.bad key!"),
    ({"node_selector": {"a/b/c": "x"}}, "node_selector.a/b/c"),
    ({"node_selector": {"Bad_Prefix/k": "x"}}, "node_selector.Bad_Prefix/k"),
    ({"node_selector": {"k": "has space"}}, "node_selector.k"),
    ({"node_selector": {"k": "a" * 64}}, "node_selector.k"),
    ({"node_selector": {"k": "-dash"}}, "node_selector.k"),
    # tolerations (ValidateTolerations)
    ({"tolerations": [{"key": "a", "effect": "Nope"}]}, "tolerations[0].effect"),
    ({"tolerations": [{"key": "bad key", "operator": "Exists"}]}, "tolerations[0].key"),
    ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "tolerations[0].operator"),
    ({"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}, "tolerations[0].value"),
    (
        {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]},
        "tolerations[0].effect",
    ),
    (
        {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "5"}]},
        "tolerations[0].tolerationSeconds",
    ),
    ({"tolerations": [{"key": "a", "value": "x y"}]}, "tolerations[0].value"),
    # quantities (resource.ParseQuantity; resources not negative)
    ({"cpu": "-1"}, "cpu"),
    ({"cpu": "1.5.2"}, "cpu"),
    ({"memory": "4 GB"}, "memory"),
    ({"memory": "1Gb"}, "memory"),
    ({"shm_size": "lots"}, "shm_size"),
    # names: the queue-name label value, object names (DNS subdomains), secret keys (IsConfigMapKey)
    ({"queue_name": "a" * 64}, "queue_name"),
    ({"priority_class": "High"}, "priority_class"),
    ({"storage_secret": "minio_creds"}, "storage_secret"),
    ({"secret_env": {"X": "s/..k"}}, "secret_env.X"),
    ({"secret_env": {"X": "s/a b"}}, "secret_env.X"),
    ({"secret_env": {"1X": "s/k"}}, "secret_env.1X"),
    ({"ttl_seconds_after_finished": -5}, "ttl_seconds_after_finished"),
    ({"scheduling": {"priorityClass": "High"}}, "scheduling.priorityClass"),
    # images (distribution/reference's grammar, as the kubelet parses them)
    ({"image": "Bad Image"}, "image"),
    ({"image": "docker.io/Kftrain/train:1"}, "image"),
    ({"image": "train@sha256:xyz"}, "image"),
    ({"image": " train:1"}, "image"),
    # the program and its env (IsEnvVarName; values strings or numbers)
    ({"env": {"1X": "v"}}, "env.1X"),
    ({"env": {"..X": "v"}}, "env...X"),
    ({"env": {"X": [1]}}, "env.X"),
    ({"env": {"X": None}}, "env.X"),
    ({"env": ["X=1"]}, "env"),
    # the variables the step sets from its inputs (the task's own env is refused the same: test_launch_task_config)
    ({"env": {"KFTRAIN_MODEL_URI": "s3://elsewhere/model"}}, "env.KFTRAIN_MODEL_URI"),
    ({"env": {"KFTRAIN_DATASET_URI": "s3://elsewhere/ds"}}, "env.KFTRAIN_DATASET_URI"),
    ({"env": {"KFTRAIN_CHECKPOINT_URI": "s3://elsewhere/ckpt"}}, "env.KFTRAIN_CHECKPOINT_URI"),
    ({"env": {"X": "a\0b"}}, "env.X"),
    ({"command": "python train.py"}, "command"),
    ({"args": [{"a": 1}]}, "args[0]"),
    # the operator's nprocPerNode: auto, cpu, gpu or a number >= 1
    ({"nproc_per_node": "many"}, "nproc_per_node"),
    ({"nproc_per_node": 0}, "nproc_per_node"),
    # integer inputs: whole numbers, within the CRD's int32
    ({"workers": "3"}, "workers"),
    ({"workers": 2.5}, "workers"),
    ({"workers": 10**12}, "workers"),
    ({"backoff_limit": 2**31}, "backoff_limit"),
    ({"active_deadline_seconds": -1}, "active_deadline_seconds"),
    # the step's own inputs, before the job exists
    ({"timeout_seconds": -1}, "timeout_seconds"),
    ({"pending_timeout_seconds": "soon"}, "pending_timeout_seconds"),
    ({"pending_timeout_seconds": -5}, "pending_timeout_seconds"),
    ({"backend": "cloud"}, "backend"),
    # a literal env entry may not replace a variable read from a secret
    ({"storage_secret": "minio", "env": {"AWS_SECRET_ACCESS_KEY": "literal"}}, "env.AWS_SECRET_ACCESS_KEY"),
    ({"storage_secret": "minio", "env": {"AWS_ACCESS_KEY_ID": "literal"}}, "env.AWS_ACCESS_KEY_ID"),
    ({"secret_env": {"WANDB_API_KEY": "wandb/key"}, "env": {"WANDB_API_KEY": "literal"}}, "env.WANDB_API_KEY"),
    # no credential in a tracking URI: those come from a Secret
    ({"mlflow_tracking_uri": "https://user:pass@mlflow.example:5000"}, "mlflow_tracking_uri"),
    ({"mlflow_tracking_uri": "https://token@mlflow.example"}, "mlflow_tracking_uri"),
    # mounts: each path once, not where the settings mount something else, no '..'
    ({"shm_size": "1Gi", "pvc_mounts": {"/dev/shm": "claim"}}, "pvc_mounts./dev/shm"),
    ({"pvc_mounts": {"/a": "c1", "/a/": "c2"}}, "pvc_mounts./a/"),
    ({"pvc_mounts": {"/a/../etc": "c"}}, "pvc_mounts./a/../etc"),
    # a container's securityContext (ValidateSecurityContext): each also judged by the real API server on a pod,
    # tests/controlplane/test_admission.py
    *(({"security_context": given}, field) for given, field in SECURITY_CONTEXT_REFUSED),
    ({"security_context": {"runAsNonroot": True}}, "security_context.runAsNonroot"),  # pruned by the CRD's schema
]


@pytest.mark.parametrize(("inputs", "field"), REFUSED, ids=[f for _, f in REFUSED])
def test_an_input_kubernetes_would_refuse_is_refused_naming_it(inputs: dict[str, Any], field: str) -> None:
    with pytest.raises(JobSpecError) as exc:
        build(**inputs)
    assert exc.value.field == field, exc.value


@pytest.mark.parametrize("kind", ["PyTorchJob", "TFJob"])
def test_exit_code_needs_a_deadline(kind: str) -> None:
    """training-operator replaces a replica killed by a signal under ExitCode without counting it against
    backoff_limit (kftrain.job.kinds.base.Backoff.counts; tests/controlplane/test_restarts.py): only a deadline, or a
    backoff_limit of 0, ends a replica killed every time."""
    with pytest.raises(JobSpecError) as exc:
        build(kind, restart_policy="ExitCode", backoff_limit=3)
    assert exc.value.field == "active_deadline_seconds"
    assert "restart_policy is ExitCode" in str(exc.value)
    assert build(kind, restart_policy="ExitCode", active_deadline_seconds=600)["spec"]["runPolicy"] == {
        "backoffLimit": 3,
        "activeDeadlineSeconds": 600,
        "cleanPodPolicy": "Running",
    }
    assert build(kind, restart_policy="ExitCode", backoff_limit=0)["spec"]["runPolicy"]["backoffLimit"] == 0


@pytest.mark.parametrize(
    ("kind", "inputs", "field"),
    [
        ("TFJob", {"chief": 2}, "chief"),
        ("TFJob", {"ps": -1}, "ps"),
        ("MPIJob", {"workers": 2**31}, "workers"),
        ("MPIJob", {"slots_per_worker": 0}, "slots_per_worker"),
        ("MPIJob", {"run_launcher_as_worker": "yes"}, "run_launcher_as_worker"),
        ("MPIJob", {"ssh_auth_mount_path": "relative"}, "ssh_auth_mount_path"),
        ("TrainJob", {"num_nodes": 0}, "num_nodes"),
        ("TrainJob", {"num_nodes": 2**31}, "num_nodes"),
        ("TrainJob", {"num_proc_per_node": -1}, "num_proc_per_node"),
    ],
)
def test_each_kinds_own_inputs_are_refused_naming_them(kind: str, inputs: dict[str, Any], field: str) -> None:
    with pytest.raises(JobSpecError) as exc:
        build(kind, **inputs)
    assert exc.value.field == field, exc.value


def _master(manifest: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    return spec


def _env_value(manifest: dict[str, Any], name: str) -> Any:
    """The literal value of ``name`` in the Master's env (the storage secret's variables beside it have none)."""
    return {e["name"]: e.get("value") for e in _master(manifest)["containers"][0]["env"]}[name]


@pytest.mark.parametrize(
    ("inputs", "where", "expected"),
    [
        # a number is the string it means: KFP hands maps and lists over as JSON, an int possibly as a double
        ({"nproc_per_node": 4}, lambda m: m["spec"]["nprocPerNode"], "4"),
        ({"nproc_per_node": 4.0}, lambda m: m["spec"]["nprocPerNode"], "4"),
        ({"env": {"X": 5}}, lambda m: _env_value(m, "X"), "5"),
        ({"env": {"X": 5.0}}, lambda m: _env_value(m, "X"), "5"),
        (
            {"env": {"X": 1.5}},
            lambda m: _env_value(m, "X"),
            "1.5",
        ),
        ({"node_selector": {"pool": 3}}, lambda m: _master(m)["nodeSelector"], {"pool": "3"}),
        ({"workers": 3.0}, lambda m: m["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"], 3),
        # what the API server accepts is accepted as given
        ({"memory": "1e3"}, lambda m: _master(m)["containers"][0]["resources"]["limits"]["memory"], "1e3"),
        ({"cpu": "0.5"}, lambda m: _master(m)["containers"][0]["resources"]["limits"]["cpu"], "0.5"),
        (
            {"node_selector": {"nvidia.com/gpu.present": "true", "k": ""}},
            lambda m: _master(m)["nodeSelector"],
            {"nvidia.com/gpu.present": "true", "k": ""},
        ),
        ({"tolerations": [{"operator": "Exists"}]}, lambda m: _master(m)["tolerations"], [{"operator": "Exists"}]),
        ({"env": {"my.var-1": "v"}}, lambda m: _master(m)["containers"][0]["env"][0]["name"], "my.var-1"),
        # on every container, and what a pod's securityContext shares with a container's on the pod too (a
        # container the operator adds, such as init-pytorch, inherits those)
        (
            {"security_context": RESTRICTED},
            lambda m: [
                (p["securityContext"], [c["securityContext"] for c in p["containers"]])
                for p in (r["template"]["spec"] for r in m["spec"]["pytorchReplicaSpecs"].values())
            ],
            [(RESTRICTED_POD, [RESTRICTED])] * 2,
        ),
        (
            {"image": "registry.local:5000/team/train:v1.2"},
            lambda m: _master(m)["containers"][0]["image"],
            "registry.local:5000/team/train:v1.2",
        ),
    ],
)
def test_a_value_kubernetes_accepts_is_taken_as_it_means(inputs: dict[str, Any], where: Any, expected: Any) -> None:
    assert where(build(**inputs)) == expected


@pytest.mark.parametrize(
    "secret_env",
    [{"TOKEN": "hunter2-literal"}, {"TOKEN": "hunter2/..bad"}, {"TOKEN": "HUNTER2/key"}, {"TOKEN": 98765432}],
)
def test_a_secret_env_value_is_never_quoted_in_the_error(secret_env: dict[str, Any]) -> None:
    with pytest.raises(JobSpecError) as exc:
        build(secret_env=secret_env)
    assert exc.value.field == "secret_env.TOKEN"
    assert "hunter2" not in str(exc.value).lower() and "98765432" not in str(exc.value), exc.value


def _volumes_and_mounts(manifest: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    pod = _master(manifest)
    volumes = {
        v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
    }
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    return volumes, mounts


LONG_A = "a" * 70 + "-one"
LONG_B = "a" * 70 + "-two"


@pytest.mark.parametrize(
    "pvc_mounts",
    [
        {"/a": "data", "/b": "data"},  # one claim at two paths: one volume, two mounts
        {"/a": LONG_A, "/b": LONG_B},  # names past 63 characters that share their first 63
        {"/data": "data.v1"},  # a '.' is valid in a claim's name, not in a volume's
        {"/data": "x" * 253},
    ],
)
def test_every_pvc_mount_is_kept_on_a_valid_volume_of_its_claim(pvc_mounts: dict[str, str]) -> None:
    volumes, mounts = _volumes_and_mounts(build(pvc_mounts=pvc_mounts))
    pvc_mounts_seen = {path: volumes[mounts[path]] for path in pvc_mounts}
    assert pvc_mounts_seen == pvc_mounts  # every path mounted, each from its own claim
    assert len(volumes) == len(set(pvc_mounts.values()))  # one volume per claim
    for name in volumes:
        assert len(name) <= 63 and name.replace("-", "").isalnum() and name == name.lower(), name


def test_a_pvc_volume_keeps_its_plain_name_when_valid() -> None:
    assert pvc_volume_name("datasets") == "pvc-datasets"


def test_a_trainjobs_init_containers_get_the_security_context_through_its_runtime_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TrainJob's pods are its runtime's: the security context reaches each container and init container of the
    trainer's job as ContainerPatches of one runtime patch, and the pod's share as its PodSpecPatch's
    securityContext (kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/trainjob_types.go, PodSpecPatch:
    initContainers and containers, each a ContainerPatch by name)."""
    init = [{"name": "fetch", "image": "img"}]
    runtime = training_runtime(replicated_job("node", "node", trainer=True, init_containers=init), name="with-init")
    (tmp_path / "runtime.yaml").write_text(yaml.safe_dump(runtime))
    monkeypatch.setenv(RUNTIMES_ENV, str(tmp_path / "runtime.yaml"))
    manifest = build("TrainJob", runtime="with-init", security_context=RESTRICTED)
    (patch,) = manifest["spec"]["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    spec = node["template"]["spec"]["template"]["spec"]
    assert spec["securityContext"] == RESTRICTED_POD
    assert spec["initContainers"] == [{"name": "fetch", "securityContext": RESTRICTED}]
    assert [c["securityContext"] for c in spec["containers"]] == [RESTRICTED]
