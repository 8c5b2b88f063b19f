"""A simulated training operator: creates a job's pods with the operators' labels and plays a scenario.

A scenario is a function of a :class:`JobSim`; it runs in its own thread when the job is created and stops
(quietly) as soon as the job is deleted. What differs between kinds comes from the job's
:class:`~kftrain.job.kinds.Kind` (its replica key, the label with the job's name, its single replicas, where it is
suspended); what differs between the controllers that serve them (training-operator, mpi-operator, Trainer's
JobSet) is played here, each as that controller does.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kftrain.job.kinds import Kind
from testbed.fake_k8s.api import kind_at, now_iso
from testbed.fake_k8s.selectors import dotted
from testbed.fake_k8s.server import FakeKube

# JobSet's labels on a TrainJob's pods, and the completion index Kubernetes gives a pod of an Indexed Job.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
# The operator whose pods carry only a role (no replica type) and whose conditions have reasons of its own.
MPI_OPERATOR = "mpi-operator"  # kubeflow/mpi-operator@v0.8.2:pkg/apis/kubeflow/v2beta1/constants.go, OperatorName

Scenario = Callable[["JobSim"], None]

# What Trainer v2 calls the training-operator's conditions on a TrainJob (None: it has no such condition).
TRAINJOB_CONDITIONS: dict[str, tuple[str, str] | None] = {
    "Running": None,
    "Succeeded": ("Complete", "JobsCompleted"),
    "Failed": ("Failed", "JobSetFailed"),
}


KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def kueue_webhook(plural: str, obj: dict[str, Any]) -> None:
    """What Kueue's webhook does to a job created with its queue-name label: suspend it until Kueue admits it.

    Install it with ``kube.admission.append(kueue_webhook)``; :meth:`JobSim.admit_from_queue` admits.
    """
    if KUEUE_QUEUE_LABEL in ((obj.get("metadata") or {}).get("labels") or {}):
        # The kind's own field (a TrainJob's spec.suspend: Kueue's TrainJob integration; the operators' runPolicy).
        set_dotted(obj, kind_at(plural, obj.get("apiVersion")).spec.suspend_field, True)


def set_dotted(obj: dict[str, Any], path: str, value: Any) -> None:
    """``obj`` with the field at the dotted ``path`` set to ``value``, the objects on the way made where missing."""
    *parents, last = path.split(".")
    for key in parents:
        obj = obj.setdefault(key, {})
    obj[last] = value


def _waiting(container: dict[str, Any], reason: str) -> dict[str, Any]:
    """A container's status before it runs, as the kubelet reports it."""
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": {"reason": reason}},
    }


class JobGone(Exception):
    """The job was deleted: the scenario ends."""


class JobSim:
    def __init__(self, kube: FakeKube, plural: str, obj: dict[str, Any]) -> None:
        self.kube = kube
        self.plural = plural
        self.obj = obj
        self.namespace: str = obj["metadata"]["namespace"]
        self.name: str = obj["metadata"]["name"]
        self.uid: str = obj["metadata"]["uid"]
        self.api_version: str = obj["apiVersion"]
        self.kind: Kind = kind_at(plural, self.api_version)
        self.pod_names: dict[str, str] = {}  # replica label -> pod name

    # -- flow ------------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        with self.kube.cond:
            current = self.kube.jobs.get((self.plural, self.namespace, self.name))
            return current is not None and current["metadata"]["uid"] == self.uid and not self.kube.stopping

    def check(self) -> None:
        if not self.alive:
            raise JobGone

    @contextlib.contextmanager
    def at_once(self) -> Iterator[None]:
        """The changes made inside reach the API's readers together, as one moment of the cluster: the fake API's
        lock is held, so no watch or read sees half of them. For what a real cluster does within milliseconds
        (kube-scheduler's verdict on pods just created, the autoscaler's on those) where the step under test
        bounds the wait in seconds: on a busy machine a scenario's separate calls can be a second apart, which
        would time the step out on a state the cluster never shows for that long."""
        with self.kube.lock:
            yield

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.check()
            time.sleep(min(0.02, max(0.0, end - time.monotonic())))
        self.check()

    def wait_deleted(self, timeout: float = 60.0) -> None:
        """Idle (a job that never ends by itself) until someone deletes it."""
        self.sleep(timeout)
        raise AssertionError(f"{self.name} was not deleted within {timeout}s")

    # -- job status ------------------------------------------------------------------------------

    def condition(self, ctype: str, status: str = "True", reason: str | None = None, message: str = "") -> None:
        """Set a condition as training-operator does (Running goes False on Succeeded/Failed/Suspended); on a
        TrainJob, as Trainer v2 names it (:data:`TRAINJOB_CONDITIONS`), so one scenario plays every kind."""
        self.check()
        if self._jobset and ctype in TRAINJOB_CONDITIONS:
            renamed = TRAINJOB_CONDITIONS[ctype]
            if renamed is None:
                return
            ctype, reason = renamed[0], reason or renamed[1]
        stamp = now_iso()
        kind = self.obj["kind"]

        def change(obj: dict[str, Any]) -> None:
            conds: list[dict[str, Any]] = obj.setdefault("status", {}).setdefault("conditions", [])
            if status == "True" and ctype in ("Succeeded", "Failed", "Suspended", "Restarting"):
                for c in conds:
                    if c["type"] == "Running":
                        c.update(status="False", lastTransitionTime=stamp)
            if status == "True" and ctype == "Running":
                for c in conds:
                    if c["type"] in ("Restarting", "Suspended"):
                        c.update(status="False", lastTransitionTime=stamp)
            new = {
                "type": ctype,
                "status": status,
                "reason": reason or f"{kind}{ctype}",
                "message": message or f"{kind} {self.name} is {ctype.lower()}.",
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            }
            for c in conds:
                if c["type"] == ctype:
                    c.update(new)
                    break
            else:
                conds.append(new)

        self.kube.modify_job(self.plural, self.namespace, self.name, change)

    def trainer_status(self, status: dict[str, Any]) -> None:
        """What Kubeflow Trainer's status server applies when a node posts its progress: the TrainJob's
        ``status.trainerStatus`` (kubeflow/trainer@v2.3.0 pkg/statusserver/server.go:166-168)."""
        self.check()

        def change(obj: dict[str, Any]) -> None:
            obj.setdefault("status", {})["trainerStatus"] = copy.deepcopy(status)

        self.kube.modify_job(self.plural, self.namespace, self.name, change)

    def delete_job(self) -> None:
        """Someone else (kubectl delete) removes the job."""
        self.kube.delete_job(self.plural, self.namespace, self.name, "Background")
        raise JobGone

    # -- pods ------------------------------------------------------------------------------------

    def create_pods(self, *, scheduled: bool = True) -> list[str]:
        """One Pending pod per replica, labelled as the operator serving this version labels them.

        ``scheduled``: the scheduler binds each to a node at once (the kubelet is creating its containers);
        else the pods wait for a scheduler (:meth:`unschedulable`, :meth:`schedule`).
        """
        self.check()
        if self._jobset:
            return self._create_jobset_pods(scheduled)
        labels_out = []
        for rtype, rspec in self._replica_specs.items():
            count = 1 if rspec.get("replicas") is None else int(rspec["replicas"])
            labels_out += [self._create_replica_pod(rtype, index) for index in range(count)]
        if scheduled:
            self.schedule(*labels_out)
        return labels_out

    def scale_up(self, rtype: str) -> str:
        """One more ``rtype`` pod, scheduled, as the operator adds when the job's replicas grow; its label."""
        index = sum(1 for label in self.pod_names if label.startswith(f"{rtype.lower()}-"))
        label = self._create_replica_pod(rtype, index)
        self.schedule(label)
        return label

    def _create_replica_pod(self, rtype: str, index: int) -> str:
        template = self._replica_specs[rtype].get("template") or {}
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        operator = self.kind.spec.operator_name
        assert operator, f"{self.kind} names no operator for its replicas' pods"
        labels[self.kind.spec.pod_job_label] = self.name
        labels["training.kubeflow.org/operator-name"] = operator
        if self._mpi_operator:
            labels["training.kubeflow.org/job-role"] = rtype.lower()
            if rtype != "Launcher":
                labels["training.kubeflow.org/replica-index"] = str(index)
            pod_name = f"{self.name}-launcher-{uuid.uuid4().hex[:5]}" if rtype == "Launcher" else None
            # mpi-operator v0.8.2 runs the launcher as a batch Job of that name (pkg/controller/
            # mpi_job_controller.go, newLauncherJob), which owns its pod.
            owner = self._child_job(f"{self.name}-launcher") if rtype == "Launcher" else None
        else:
            labels["training.kubeflow.org/replica-type"] = rtype.lower()
            labels["training.kubeflow.org/replica-index"] = str(index)
            # IsMasterRole of each of training-operator v1.9.0's controllers: the kind's single replica (a TFJob's
            # Chief or Master, a PyTorchJob's Master, an MPIJob's Launcher; pkg/controller.v1/*/*_controller.go).
            if rtype in self.kind.spec.singletons:
                labels["training.kubeflow.org/job-role"] = "master"
            pod_name = None
            owner = None
        label = f"{rtype.lower()}-{index}"
        self.pod_names[label] = pod_name or f"{self.name}-{label}"
        spec = dict(template.get("spec") or {})
        spec["initContainers"] = [*(spec.get("initContainers") or []), *self._operator_init_containers(rtype)]
        self._new_pod(self.pod_names[label], labels, spec, owner)
        return label

    def _operator_init_containers(self, rtype: str) -> list[dict[str, Any]]:
        """What training-operator v1.9.0 adds before a replica's own containers: ``init-pytorch`` on each Worker of a
        PyTorchJob with a Master, which waits until the Master's Service name resolves, from its default template
        and flags (pkg/controller.v1/pytorch/initcontainer.go, setInitContainer; pkg/config/config.go)."""
        if self.obj["kind"] != "PyTorchJob" or rtype != "Worker" or "Master" not in self._replica_specs:
            return []
        master = f"{self.name}-master-0"
        tries = 100  # PyTorchInitContainerMaxTriesDefault
        wait = (
            f"err=1;for i in $(seq {tries}); do if nslookup {master}; then err=0 && break; fi;"
            "echo waiting for master; sleep 2; done; exit $err"
        )
        image = self.kind.spec.operator_containers["init-pytorch"].default_image
        return [
            {
                "name": "init-pytorch",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "resources": {
                    "limits": {"cpu": "100m", "memory": "20Mi"},
                    "requests": {"cpu": "50m", "memory": "10Mi"},
                },
                "command": ["sh", "-c", wait],
            }
        ]

    def _create_jobset_pods(self, scheduled: bool) -> list[str]:
        """A TrainJob on a torch runtime: the JobSet's ``node`` job, ``numNodes`` pods (1 unless the trainer says),
        each named ``<name>-node-0-<index>-<random>`` and labelled as JobSet and Indexed Jobs label them."""
        trainer = self.obj["spec"].get("trainer") or {}
        nodes = int(trainer.get("numNodes") or 1)
        # JobSet's child Job <jobset>-<replicatedJob>-<index> owns the pods (jobset@v0.12.0: pkg/controllers/
        # jobset_controller.go, placement.GenJobName).
        node_job = self._child_job(f"{self.name}-node-0")
        labels_out = []
        for index in range(nodes):
            labels = {
                JOBSET_NAME_LABEL: self.name,
                JOBSET_JOB_LABEL: "node",
                COMPLETION_INDEX_LABEL: str(index),
            }
            label = f"node-{index}"
            self.pod_names[label] = f"{self.name}-node-0-{index}-{uuid.uuid4().hex[:5]}"
            labels_out.append(label)
            container = {"name": "node", "image": trainer.get("image")}
            self._new_pod(self.pod_names[label], labels, {"containers": [container]}, node_job)
        if scheduled:
            self.schedule(*labels_out)
        return labels_out

    def _child_job(self, name: str) -> dict[str, Any]:
        """The ownerReference of a batch Job the operator made for this job (this fake keeps no Jobs)."""
        return {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": str(uuid.uuid4())}

    def _new_pod(
        self, pod_name: str, labels: dict[str, str], spec: dict[str, Any], owner: dict[str, Any] | None = None
    ) -> None:
        """A Pending pod owned by ``owner`` (else the job), as a controller's pod is owned: controller and
        blockOwnerDeletion set (k8s.io/apimachinery@v0.36.3:pkg/apis/meta/v1/controller_ref.go, NewControllerRef)."""
        owner = owner or {"apiVersion": self.api_version, "kind": self.obj["kind"], "name": self.name, "uid": self.uid}
        containers = [{"name": c["name"], "image": c.get("image") or "busybox"} for c in spec.get("containers") or []]
        pod_spec: dict[str, Any] = {"containers": containers, "restartPolicy": "Never"}
        if spec.get("initContainers"):
            pod_spec["initContainers"] = [{**c, "image": c.get("image") or "busybox"} for c in spec["initContainers"]]
        if spec.get("schedulerName"):
            pod_spec["schedulerName"] = spec["schedulerName"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": self.namespace,
                "uid": str(uuid.uuid4()),
                "labels": labels,
                "creationTimestamp": now_iso(),
                "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": pod_spec,
            "status": {"phase": "Pending", "qosClass": "BestEffort"},  # what a pod is before any scheduler sees it
        }
        self.kube.add_pod(pod)

    def schedule(self, *labels: str) -> None:
        """The scheduler binds the pods to a node; the kubelet starts creating their containers."""
        for label in labels or self.labels():

            def bind(pod: dict[str, Any]) -> None:
                pod["spec"]["nodeName"] = "node-0"
                pod["status"]["conditions"] = [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_iso()}
                ]
                # Behind init containers, the kubelet reports every container waiting for them.
                init = pod["spec"].get("initContainers") or []
                reason = "PodInitializing" if init else "ContainerCreating"
                pod["status"]["containerStatuses"] = [_waiting(c, reason) for c in pod["spec"]["containers"]]
                if init:
                    pod["status"]["initContainerStatuses"] = [_waiting(c, "PodInitializing") for c in init]

            self._change_pod(label, bind)

    def _change_pod(self, label: str, change: Callable[[dict[str, Any]], None]) -> None:
        self.check()
        self.kube.change_pod(self.namespace, self.pod_names[label], change)

    def env(self, name: str) -> str | None:
        """The value the job gives ``name`` in its program's environment (any replica's, or the trainer's)."""
        if self._jobset:
            containers = [self.obj["spec"].get("trainer") or {}]
        else:
            replicas = self._replica_specs.values()
            containers = [c for r in replicas for c in r["template"]["spec"]["containers"]]
        values = [e.get("value") for c in containers for e in c.get("env") or [] if e["name"] == name]
        return values[0] if values else None

    def write_model(self) -> None:
        """What a trainer does before it exits 0: write a model where the job's ``KFTRAIN_MODEL_URI`` points."""
        uri = self.env("KFTRAIN_MODEL_URI")
        assert uri, f"{self.name}: no KFTRAIN_MODEL_URI in the job's environment"
        Path(uri).mkdir(parents=True, exist_ok=True)
        (Path(uri) / "model.bin").write_bytes(b"weights")

    def labels(self) -> list[str]:
        return list(self.pod_names)

    def start(self, *labels: str) -> None:
        """Pods Running (all of them when no label is given)."""
        for label in labels or self.labels():

            def run(pod: dict[str, Any]) -> None:
                pod["status"]["phase"] = "Running"
                for cs in pod["status"].get("initContainerStatuses") or []:
                    done = {"exitCode": 0, "reason": "Completed", "finishedAt": now_iso()}
                    cs.update(ready=True, state={"terminated": done})
                for cs in pod["status"]["containerStatuses"]:
                    cs.update(ready=True, state={"running": {"startedAt": now_iso()}})

            self._change_pod(label, run)

    def log(self, label: str, *lines: str) -> None:
        self.check()
        self.kube.add_log(self.namespace, self.pod_names[label], *lines)

    def exit(self, label: str, code: int = 0) -> None:
        """The pod's containers end with ``code``; the pod Succeeded or Failed (restartPolicy Never)."""
        stamp = now_iso()

        def end(pod: dict[str, Any]) -> None:
            pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            for cs in pod["status"]["containerStatuses"]:
                terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": stamp}
                cs.update(ready=False, state={"terminated": terminated})

        self._change_pod(label, end)

    def exit_all(self, code: int = 0) -> None:
        for label in self.labels():
            self.exit(label, code)

    def restart_in_place(self, label: str, code: int) -> None:
        """The container exits ``code`` and kubelet restarts it in the same pod (restartPolicy OnFailure)."""
        stamp = now_iso()

        def restart(pod: dict[str, Any]) -> None:
            cs = pod["status"]["containerStatuses"][0]
            cs["lastState"] = {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": stamp}}
            cs["restartCount"] = int(cs.get("restartCount") or 0) + 1
            cs["state"] = {"running": {"startedAt": stamp}}
            cs["ready"] = True
            pod["status"]["phase"] = "Running"

        self._change_pod(label, restart)
        self.kube.add_event(
            self.namespace, "Pod", self.pod_names[label], "BackOff", "Back-off restarting failed container"
        )

    def waiting(self, label: str, reason: str, message: str) -> None:
        """The kubelet cannot start the pod's containers: they wait with ``reason`` (CreateContainerConfigError...)."""

        def stuck(pod: dict[str, Any]) -> None:
            for cs in pod["status"]["containerStatuses"]:
                cs["state"] = {"waiting": {"reason": reason, "message": message}}

        self._change_pod(label, stuck)
        self.kube.add_event(self.namespace, "Pod", self.pod_names[label], "Failed", f"Error: {message}")

    def image_pull_backoff(self, label: str, container: str | None = None) -> None:
        """The kubelet cannot pull the image of the pod's ``container`` (default: its first), an init container's
        too: ErrImagePull, then ImagePullBackOff, as it reports them."""
        name = self.pod_names[label]
        spec = self.kube.pods[(self.namespace, name)]["spec"]
        every = [*(spec.get("initContainers") or []), *spec["containers"]]
        container = container or spec["containers"][0]["name"]
        image = next(c["image"] for c in every if c["name"] == container)
        for reason, message in (
            ("ErrImagePull", f'failed to pull and unpack image "{image}": not found'),
            ("ImagePullBackOff", f'Back-off pulling image "{image}"'),
        ):

            def stuck(pod: dict[str, Any], reason: str = reason, message: str = message) -> None:
                status = pod["status"]
                for cs in [*(status.get("initContainerStatuses") or []), *status["containerStatuses"]]:
                    if cs["name"] == container:
                        cs["state"] = {"waiting": {"reason": reason, "message": message}}

            self._change_pod(label, stuck)
        self.kube.add_event(self.namespace, "Pod", name, "Failed", f'Failed to pull image "{image}": not found')
        self.kube.add_event(self.namespace, "Pod", name, "Failed", "Error: ImagePullBackOff")

    def unschedulable(
        self, label: str, message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    ) -> None:
        """The scheduler finds no node for the pod: PodScheduled False (Unschedulable) and a FailedScheduling event,
        as kube-scheduler and Volcano write them (Volcano's message for a gang still gathering starts with
        "pod group is not ready")."""

        def stuck(pod: dict[str, Any]) -> None:
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": now_iso(),
                }
            ]

        self._change_pod(label, stuck)
        self.kube.add_event(self.namespace, "Pod", self.pod_names[label], "FailedScheduling", message)

    def autoscaler(self, label: str, *, triggered: bool, uid: str | None = None) -> None:
        """The cluster autoscaler's verdict on the unschedulable pod, as an event (it does not change the pod);
        ``uid``: on an earlier pod of the same name instead."""
        if triggered:
            reason, message = "TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]"
        else:
            reason, message = "NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size reached"
        self.check()
        self.kube.add_event(self.namespace, "Pod", self.pod_names[label], reason, message, type_="Normal", uid=uid)

    # -- queues ----------------------------------------------------------------------------------

    @property
    def suspended(self) -> bool:
        """The kind's suspend field of the job as stored (a queue such as Kueue sets and clears it)."""
        with self.kube.cond:
            obj = self.kube.jobs.get((self.plural, self.namespace, self.name)) or {}
            return bool(dotted(obj, self.kind.spec.suspend_field))

    def report_suspended(self) -> None:
        """The Suspended condition as the serving operator writes it for a suspended job."""
        if self._mpi_operator:
            self.condition("Suspended", reason="MPIJobSuspended", message="MPIJob suspended")
        elif self._jobset:
            self.condition("Suspended", reason="Suspended", message="TrainJob is suspended")
        else:
            kind = self.obj["kind"]
            self.condition("Suspended", reason=f"{kind}Suspended", message=f"{kind} {self.name} is suspended.")

    def admit_from_queue(self) -> None:
        """Kueue admits the job: it clears the kind's suspend field."""

        def admit(obj: dict[str, Any]) -> None:
            set_dotted(obj, self.kind.spec.suspend_field, False)

        self.check()
        self.kube.modify_job(self.plural, self.namespace, self.name, admit)

    def report_resumed(self) -> None:
        """The operator sees the job resumed: Suspended goes False, as the serving operator writes it."""
        if self._mpi_operator:
            self.condition("Suspended", status="False", reason="MPIJobResumed", message="MPIJob resumed")
        elif self._jobset:
            self.condition("Suspended", status="False", reason="Resumed", message="TrainJob is resumed")
        else:
            kind = self.obj["kind"]
            self.condition(
                "Suspended", status="False", reason=f"{kind}Resumed", message=f"{kind} {self.name} is resumed."
            )

    @property
    def _mpi_operator(self) -> bool:
        return self.kind.spec.operator_name == MPI_OPERATOR

    @property
    def _jobset(self) -> bool:
        """Whether Trainer runs the job as a JobSet (a TrainJob): JobSet's pods, Trainer's conditions."""
        return self.kind.spec.pod_job_label == JOBSET_NAME_LABEL

    @property
    def _replica_specs(self) -> dict[str, Any]:
        return dict(self.obj["spec"][self.kind.spec.replica_key])


class OperatorSim:
    """Plays ``scenario`` (or the one ``pick`` returns for a job) for every job created on ``kube``."""

    def __init__(self, kube: FakeKube, scenario: Scenario | None = None) -> None:
        self.kube = kube
        self.scenario = scenario
        self.pick: Callable[[dict[str, Any]], Scenario | None] | None = None
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []
        self.sims: list[JobSim] = []
        kube.on_job_created = self._on_created

    def _on_created(self, plural: str, obj: dict[str, Any]) -> None:
        scenario = (self.pick(obj) if self.pick else None) or self.scenario
        if scenario is None:
            return
        sim = JobSim(self.kube, plural, copy.deepcopy(obj))
        self.sims.append(sim)
        thread = threading.Thread(target=self._play, args=(scenario, sim), name=f"operator-{sim.name}", daemon=True)
        thread.start()
        self.threads.append(thread)

    def _play(self, scenario: Scenario, sim: JobSim) -> None:
        try:
            scenario(sim)
        except JobGone:
            pass
        except Exception:
            self.errors.append(traceback.format_exc())
            # The step would otherwise wait on a job nobody moves until the test run's timeout: end it, so the
            # test fails at once (the fixture reports the scenario's error).
            with contextlib.suppress(Exception):
                sim.condition("Failed", reason="ScenarioRaised", message="the simulated operator's scenario raised")

    def join(self, timeout: float = 5.0) -> None:
        end = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, end - time.monotonic()))
