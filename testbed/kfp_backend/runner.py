"""Run a compiled ``pipeline.yaml`` as KFP's backend runs it: driver, platform config, launcher, task pods.

The harness's driver, platform config, launcher and task pods on a :class:`Cluster` (the fake Kubernetes API, moto
as the store, a simulated operator that runs each training job with kftrain's local backend). What a cluster gives
each pod (its environment, DNS names and Services), with the upstream lines, is in the comment below the imports.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed import REPO_ROOT
from testbed.fake_k8s import FakeKube, JobSim, OperatorSim
from testbed.kfp_backend import layout, session
from testbed.kfp_backend.driver import (
    DagExecution,
    RunContext,
    TaskExecution,
    next_execution_id,
    resolve_inputs,
    task_order,
    will_trigger,
)
from testbed.kfp_backend.launcher import SITE_DIR, LauncherError, PodFilesystem, TaskFiles, pod_environment, run_task
from testbed.kfp_backend.platform import build_pod
from testbed.kfp_backend.pod_process import Cancel
from testbed.kfp_backend.store import Bucket
from testbed.kfp_backend.versions import Backend

# A :class:`Cluster` is what a KFP namespace has: the fake Kubernetes API (testbed/fake_k8s) with the
# ``kfp-launcher`` ConfigMap naming the object store (moto) and its secret, and a simulated operator that runs
# each created training job for real with kftrain's local backend (its pods' logs copied to the API as it goes):
# its pods run their containers' program, or ``Cluster.program`` in its place (a test of the wiring, not of the
# training, gives the stub trainer, testbed/programs/stub_trainer.py).
# :func:`run_pipeline` walks the pipeline's DAGs with :mod:`testbed.kfp_backend.driver`, builds each task pod with
# :mod:`testbed.kfp_backend.platform` and runs its container command with :mod:`testbed.kfp_backend.launcher`, in a
# process whose environment is what KFP gives a user container (``KFP_POD_NAME``, ``KFP_POD_UID``, the
# metadata-grpc-configmap's variables, the container's and the platform config's env; no run id:
# kubeflow/pipelines@2.17.0:backend/src/v2/compiler/argocompiler/common.go:33-58, container.go:566-567;
# @2.5.0:backend/src/v2/driver/driver.go:472-489: the run id is an argument of the launcher, not the step's),
# with ``KUBECONFIG`` standing for the pod's service account.
#
# The cluster's DNS and Services are the harness's too: :attr:`Cluster.addresses` maps an in-cluster name (a
# Service's DNS name, with its port) to the address on this machine that answers for it, for the harness's launcher
# and for every process of a task pod or a training replica (``pod_site/sitecustomize.py``); each Service of the
# namespace (:attr:`Cluster.services`, its cluster IP being the address this machine serves it at) gives every pod
# its ``<NAME>_SERVICE_HOST``/``_PORT`` variables, the Kubernetes variables KFP's own code reads
# (kubernetes.io/docs/concepts/services-networking/service/#environment-variables, cited at
# kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/config.go:167-168). The run's store is the one its session
# names (:mod:`testbed.kfp_backend.session`), reached through them.


REPO = REPO_ROOT
NAMESPACE = "team-a"
PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"
STORE_SECRET = "mlpipeline-minio-artifact"
ADDRESSES_ENV = "KFTRAIN_HARNESS_ADDRESSES"  # the cluster's DNS, read by pod_site/sitecustomize.py


@dataclass
class Cluster:
    backend: Backend
    kube: FakeKube
    bucket: Bucket
    kubeconfig: Path
    workdir: Path
    job_timeout: float = 600.0
    jobs: list[dict[str, Any]] = field(default_factory=list)
    # What the nodes give every training pod without a secret (a workload identity), e.g. AWS_* variables.
    workload_identity: dict[str, str] = field(default_factory=dict)
    # The program every training pod runs in place of its container's command and args (None: the container's),
    # as if its image held another program: the job is created, named and wired exactly as without it.
    program: list[str] | None = None
    # What the training operator does with each created job in place of running it (None: run it for real).
    job_scenario: Callable[[JobSim], None] | None = None
    # The cluster's DNS: an in-cluster name "host:port" -> the "host:port" on this machine that answers for it.
    addresses: dict[str, str] = field(default_factory=dict)
    # The namespace's Services by name, each "cluster IP:port" (where this machine serves it): every pod gets
    # their variables.
    services: dict[str, str] = field(default_factory=dict)
    # The object stores, by the address on this machine that serves each (the run's bucket among them).
    stores: dict[str, Bucket] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stores.setdefault(self.bucket.endpoint.split("://", 1)[-1], self.bucket)

    def configure_store(self, endpoint: str, key: str, secret: str, *, providers: bool = True) -> None:
        """The namespace as KFP's profile controller leaves it: the store's secret, and the ``kfp-launcher``
        ConfigMap with ``providers`` naming the store at ``endpoint``; without ``providers``, the release manifests'
        default ConfigMap (``defaultPipelineRoot`` alone), the release's default store's name answered by
        ``endpoint``."""
        host = endpoint.split("://", 1)[1]
        self.kube.add_secret(NAMESPACE, STORE_SECRET, {"accesskey": key, "secretkey": secret})
        self.kube.add_configmap(
            NAMESPACE,
            "metadata-grpc-configmap",
            {"METADATA_GRPC_SERVICE_HOST": "metadata-grpc-service.kubeflow", "METADATA_GRPC_SERVICE_PORT": "8080"},
        )
        if not providers:
            self.addresses[self.backend.default_store] = host
            self.kube.add_configmap(NAMESPACE, "kfp-launcher", {"defaultPipelineRoot": PIPELINE_ROOT})
            return
        providers_doc = {
            "minio": {
                "default": {
                    "endpoint": host,
                    "disableSSL": True,
                    "region": "minio",
                    "credentials": {
                        "fromEnv": False,
                        "secretRef": {
                            "secretName": STORE_SECRET,
                            "accessKeyKey": "accesskey",
                            "secretKeyKey": "secretkey",
                        },
                    },
                }
            }
        }
        self.kube.add_configmap(
            NAMESPACE,
            "kfp-launcher",
            {"defaultPipelineRoot": PIPELINE_ROOT, "providers": yaml.safe_dump(providers_doc)},
        )

    def service_env(self) -> dict[str, str]:
        """The variables every pod of the namespace gets for its Services."""
        env = {}
        for name, address in self.services.items():
            host, port = address.rsplit(":", 1)
            prefix = name.upper().replace("-", "_").replace(".", "_")
            env[f"{prefix}_SERVICE_HOST"], env[f"{prefix}_SERVICE_PORT"] = host, port
        return env

    def store_at(self, endpoint: str) -> Bucket:
        """The store a client in the cluster reaches at ``endpoint`` ("host:port")."""
        here = self.addresses.get(endpoint, endpoint)
        if here not in self.stores:
            raise LauncherError(f"failed to open bucket: dial tcp {endpoint}: no object store answers there")
        return self.stores[here]

    def run_session(self) -> session.Session:
        """The store session the run's root driver records (the ConfigMap, the driver pod's Service variables)."""
        configmap = self.kube.configmaps.get((NAMESPACE, "kfp-launcher"), {}).get("data", {})
        return session.session_for(PIPELINE_ROOT, self.backend, configmap, self.service_env())

    def secret_value(self, name: str, key: str) -> str | None:
        import base64

        secret = self.kube.secrets.get((NAMESPACE, name))
        if secret is None or key not in secret["data"]:
            return None
        return base64.b64decode(secret["data"][key]).decode()


@dataclass
class RunResult:
    run_id: str
    run_dir: str
    root: DagExecution
    tasks: dict[str, TaskExecution]  # every container task, by "<dag path>/<task>"


def run_pipeline(
    cluster: Cluster,
    package: Path,
    params: dict[str, Any],
    *,
    step_timeout: float = 900.0,
    cancel: Cancel | None = None,
) -> RunResult:
    """Run ``package`` with ``params``; a task that fails ends the run with its error (``cancel``: the run is
    cancelled when it is set, and the task then running ends with :class:`~.pod_process.StepCancelled`)."""
    docs = list(yaml.safe_load_all(package.read_text()))
    spec = docs[0]
    platform: dict[str, Any] = next((d for d in docs[1:] if d and "platforms" in d), {})
    executors_config = (
        platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})
    )
    run_id = str(uuid.uuid4())
    run = RunContext(run_id, f"{spec['pipelineInfo']['name']}-{run_id[:5]}", spec["pipelineInfo"]["name"])
    run_dir = layout.run_root(PIPELINE_ROOT, spec["pipelineInfo"]["name"], run_id)
    root_inputs = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    unknown = set(params) - set(root_inputs)
    if unknown:
        raise ValueError(f"no pipeline parameter named {sorted(unknown)}")
    values = {k: v["defaultValue"] for k, v in root_inputs.items() if "defaultValue" in v}
    root = DagExecution(next_execution_id(), "root", spec["root"], {**values, **params}, {})
    result = RunResult(run_id, run_dir, root, {})
    store = cluster.run_session()
    bucket = cluster.store_at(store.endpoint)
    context = _Walk(cluster, spec, executors_config, run, run_dir, result, step_timeout, store, bucket, cancel)
    context.dag(root, "")
    return result


@dataclass
class _Walk:
    cluster: Cluster
    spec: dict[str, Any]
    executors_config: dict[str, Any]
    run: RunContext
    run_dir: str
    result: RunResult
    step_timeout: float
    store: session.Session
    bucket: Bucket
    cancel: Cancel | None

    def dag(self, dag: DagExecution, path: str) -> None:
        tasks = dag.component["dag"]["tasks"]
        for name in task_order(tasks):
            task_spec = tasks[name]
            component = self.spec["components"][task_spec["componentRef"]["name"]]
            parameters, artifacts = resolve_inputs(task_spec, component, dag, self.run)
            if not will_trigger(task_spec, parameters):
                dag.tasks[name] = TaskExecution(name, triggered=False)
                continue
            if "dag" in component:
                child = DagExecution(next_execution_id(), name, component, parameters, artifacts)
                dag.tasks[name] = TaskExecution(name, triggered=True, dag=child)
                self.dag(child, f"{path}{name}/")
            else:
                dag.tasks[name] = self.container(dag, name, task_spec, component, parameters, artifacts)
                self.result.tasks[f"{path}{name}"] = dag.tasks[name]

    def container(
        self,
        dag: DagExecution,
        name: str,
        task_spec: dict[str, Any],
        component: dict[str, Any],
        parameters: dict[str, Any],
        artifacts: dict[str, list[dict[str, Any]]],
    ) -> TaskExecution:
        backend = self.cluster.backend
        label = component["executorLabel"]
        container = self.spec["deploymentSpec"]["executors"][label]["container"]
        pod = build_pod(self.executors_config.get(label), component, container, dag, name, self.run, backend)
        salt = layout.new_salt()
        outputs = component.get("outputDefinitions", {})
        out_artifacts = {
            key: {
                "artifacts": [
                    {
                        "name": key,
                        "uri": layout.output_uri(self.run_dir, name, salt, key),
                        "type": spec["artifactType"],
                        "metadata": {},
                    }
                ]
            }
            for key, spec in outputs.get("artifacts", {}).items()
        }
        output_file = layout.executor_output_file(backend, self.run_dir, name, salt)
        pod_root = self.cluster.workdir / pod_name_for(self.run)
        pod_root.mkdir(parents=True)
        # Container paths (the /minio emptyDir, /tmp) are the pod's own: a folder per pod here.
        executor_input = {
            "inputs": {
                "parameterValues": {**parameters, **({k: pod.task_config for k in _task_config_inputs(component)})},
                "artifacts": {k: {"artifacts": v} for k, v in artifacts.items()},
            },
            "outputs": {
                "artifacts": out_artifacts,
                "parameters": {
                    k: {"outputFile": f"{pod_root}{layout.OUTPUT_PARAMETERS_DIR}/{k}"}
                    for k in outputs.get("parameters", {})
                },
                "outputFile": f"{pod_root}{output_file}",
            },
        }
        pod_name = pod_root.name
        pod_uid = str(uuid.uuid4())
        self._create_pod(pod_name, pod_uid, pod)
        env = pod_environment(
            self._image_env(pod_root), {**self._kfp_env(pod_name, pod_uid), **self._container_env(container, pod)}
        )
        env["KFTRAIN_HARNESS_POD_ROOT"] = str(pod_root)
        env.update(_dns_env(self.cluster))
        self._check_store_secret()
        record, out_params, out_arts = run_task(
            backend=backend,
            executor_input=executor_input,
            component=component,
            container=container,
            files=TaskFiles(self.bucket, self.run_dir, self.store.as_json(), PodFilesystem(pod_root)),
            env=env,
            timeout=self.step_timeout,
            cancel=self.cancel,
        )
        return TaskExecution(name, True, output_parameters=out_params, output_artifacts=out_arts, record=record)

    def _check_store_secret(self) -> None:
        """OpenBucket reads the session's secret and needs both keys non-empty before anything moves
        (kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/object_store.go:282-312, getS3BucketCredential)."""
        for key in (self.store.access_key_key, self.store.secret_key_key):
            if not self.cluster.secret_value(self.store.secret_name, key):
                raise LauncherError(f"failed to open bucket: secret {self.store.secret_name!r} has no key {key!r}")

    def _create_pod(self, name: str, uid: str, pod: Any) -> None:
        self.cluster.kube.add_pod(
            {
                "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "labels": dict(pod.labels)},
                "spec": {
                    "initContainers": [{"name": "kfp-launcher", "image": self.cluster.backend.launcher_image}],
                    "containers": [{"name": "main", "image": "step"}],
                    "nodeSelector": pod.node_selector,
                    "tolerations": pod.tolerations,
                    "imagePullSecrets": [{"name": n} for n in pod.image_pull_secrets],
                },
                "status": {"phase": "Running", "containerStatuses": [{"name": "main", "restartCount": 0}]},
            }
        )

    def _image_env(self, pod_root: Path) -> dict[str, str]:
        home = pod_root / "home"
        home.mkdir(parents=True, exist_ok=True)
        tmp = pod_root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "LANG": "C.UTF-8",
            "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO)),
            "PYTHONUNBUFFERED": "1",
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": "443",
            "KFTRAIN_STATE_DIR": str(pod_root / "kftrain-state"),
            **({"TF_USE_LEGACY_KERAS": "1"}),
        }

    def _kfp_env(self, pod_name: str, pod_uid: str) -> dict[str, str]:
        grpc = self.cluster.kube.configmaps.get((NAMESPACE, "metadata-grpc-configmap"), {}).get("data", {})
        return {**self.cluster.service_env(), "KFP_POD_NAME": pod_name, "KFP_POD_UID": pod_uid, **grpc}

    def _container_env(self, container: dict[str, Any], pod: Any) -> dict[str, str]:
        env = {e["name"]: e["value"] for e in container.get("env", [])} if pod.container_env else {}
        for item in pod.env:
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            if ref is None:
                continue
            value = self.cluster.secret_value(ref["name"], ref["key"])
            if value is None and not ref.get("optional"):
                raise RuntimeError(f"CreateContainerConfigError: secret {ref['name']!r} (key {ref['key']!r}) not found")
            if value is not None:
                env[item["name"]] = value
        return env


def _dns_env(cluster: Cluster) -> dict[str, str]:
    """What lets a process of the cluster resolve its in-cluster addresses (pod_site/sitecustomize.py)."""
    return {ADDRESSES_ENV: json.dumps(cluster.addresses)} if cluster.addresses else {}


def pod_name_for(run: RunContext) -> str:
    """A task pod's name as Argo makes it: the workflow's name, the template's, a number."""
    return f"{run.run_name}-system-container-impl-{next_execution_id()}"


def _task_config_inputs(component: dict[str, Any]) -> list[str]:
    params = component.get("inputDefinitions", {}).get("parameters", {})
    return [name for name, spec in params.items() if spec.get("parameterType") == "TASK_CONFIG"]


# -- the training operator: each created job runs for real on this machine ------------------------------


def job_runner(cluster: Cluster) -> Any:
    """An operator scenario: the job as created in the API, run with ``kftrain launch --local``; its pods' logs
    copied to the API and its end reported as the operator would."""

    def play(sim: JobSim) -> None:
        if cluster.job_scenario is not None:
            cluster.jobs.append(sim.obj)
            cluster.job_scenario(sim)
            return
        manifest = _as_local_manifest(sim.obj)
        cluster.jobs.append(sim.obj)
        folder = cluster.workdir / "jobs" / sim.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "job.yaml").write_text(yaml.safe_dump(manifest))
        sim.create_pods()
        sim.condition("Created")
        sim.start()
        sim.condition("Running")
        env = {**_replica_env(cluster, sim.obj), "KFTRAIN_STATE_DIR": str(folder / "state")}
        command = [sys.executable, "-m", "kftrain.cli", "launch", "-f", str(folder / "job.yaml"), "--local"]
        command += ["--workdir", str(folder / "work")]
        if cluster.program:
            command += ["--command", shlex.join(cluster.program)]  # every replica type's program
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=cluster.job_timeout, check=False
        )
        (folder / "launch.log").write_text(done.stdout + done.stderr)
        for label in sim.labels():
            log = folder / "work" / "logs" / f"{label}.log"
            if log.is_file():
                sim.log(label, *log.read_text().splitlines())
        if done.returncode == 0:
            sim.exit_all(0)
            sim.condition("Succeeded")
        else:
            sim.exit(sim.labels()[0], done.returncode or 1)
            sim.condition("Failed", reason="JobFailed", message=f"exit code {done.returncode}")

    return play


def _as_local_manifest(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    keep = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": keep, "spec": obj["spec"]}


def _replica_env(cluster: Cluster, obj: dict[str, Any]) -> dict[str, str]:
    """This machine's environment less the store's, plus the cluster's DNS and every secretKeyRef's value (the
    kubelet resolves them; the local backend reads a secretKeyRef's variable from its own environment). Not the
    namespace's Service variables: this is the simulated operator's process too, which is no pod."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MINIO_", "KFP_", "KFTRAIN_HARNESS"))}
    env.update(cluster.workload_identity)
    if cluster.addresses:  # the cluster's DNS answers every pod
        env.update(_dns_env(cluster))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE_DIR), env.get("PYTHONPATH", str(REPO))) if p)
    for ref_name, key, var in _secret_refs(obj):
        value = cluster.secret_value(ref_name, key)
        if value is not None:
            env[var] = value
    return env


def _secret_refs(value: Any) -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    if isinstance(value, dict):
        ref = (value.get("valueFrom") or {}).get("secretKeyRef") if "name" in value else None
        if ref:
            found.append((ref["name"], ref["key"], value["name"]))
        for item in value.values():
            found.extend(_secret_refs(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(_secret_refs(item))
    return found


def start_operator(cluster: Cluster) -> OperatorSim:
    return OperatorSim(cluster.kube, job_runner(cluster))
