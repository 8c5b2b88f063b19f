"""What each node of a TrainJob resolved on its runtime has: the TrainJob's own spec beside what it resolves to
(:class:`TrainJobSource`), the resources per node, the processes per node the torch and MPI plugins count, and the
hostfile the MPI plugin writes (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/{torch,mpi}, cited below)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job.kinds.trainjob.runtime import LAUNCHER, NODE, Resolved, node_container
from kftrain.job.model import TrainingJob

HOSTFILE = "/etc/mpi/hostfile"  # pkg/constants/constants.go:159-163 MPIHostfileDir, MPIHostfileName
_QUANTITY = re.compile(r"([0-9.]+)([a-zA-Z]*)")
_SUFFIX = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


@dataclass
class TrainJobSource:
    """The TrainJob's own ``spec`` (rendered back as given) and what it resolves to on its runtime."""

    spec: dict[str, Any]
    resolved: Resolved


def source(job: TrainingJob) -> TrainJobSource:
    if not isinstance(job.source, TrainJobSource):
        raise JobSpecError("spec", f"{job.name}: a TrainJob built without its runtime")  # a bug, not input
    return job.source


def quantity(value: Any) -> float:
    """A Kubernetes quantity (``2``, ``500m``, ``1Gi``) as a number."""
    match = _QUANTITY.fullmatch(str(value))
    if not match or match.group(2) not in _SUFFIX:
        raise JobSpecError("spec.trainer.resourcesPerNode", f"{value!r} is not a quantity")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def _per_node(job: TrainingJob) -> Mapping[str, Any]:
    """resourcesPerNode: the trainer's, else the runtime's ``node`` container's (ExtractResourcePerNodeFromRuntime)."""
    src = source(job)
    given = (src.spec.get("trainer") or {}).get("resourcesPerNode")
    if given:
        return given
    for rjob in src.resolved.jobs:
        if rjob.name == NODE or rjob.ancestor == "trainer":
            container = node_container(rjob.pod_template)
            if container is not None and container.get("resources"):
                return container["resources"]
    return {}


def gpus_per_node(job: TrainingJob) -> int:
    """GetNumGPUPerNode: the first resource whose name holds "gpu", from requests, else limits."""
    res = _per_node(job)

    def count(part: str) -> int:
        found = next((v for k, v in (res.get(part) or {}).items() if "gpu" in k.lower()), 0)
        return math.ceil(quantity(found))

    return count("requests") or count("limits")


def torch_nproc_per_node(job: TrainingJob) -> str:
    given = (source(job).spec.get("trainer") or {}).get("numProcPerNode")
    if given is not None:
        return str(given)
    if gpus_per_node(job) > 0:
        return "auto"
    res = _per_node(job)
    requests = (res.get("requests") or {}).get("cpu")
    cpu = requests if requests is not None and quantity(requests) > 0 else (res.get("limits") or {}).get("cpu")
    return str(max(1, math.ceil(quantity(cpu)) if cpu is not None else 0))


def mpi_slots(job: TrainingJob) -> int:
    src = source(job)
    given = (src.spec.get("trainer") or {}).get("numProcPerNode")
    if given is not None:
        return int(given)
    slots = int((src.resolved.ml_policy.get("mpi") or {}).get("numProcPerNode", 1))
    return gpus_per_node(job) if slots == 1 and gpus_per_node(job) > 1 else slots


def mpi_hosts(job: TrainingJob) -> list[tuple[str, int]]:
    """(job name, pod count) of the pods the hostfile lists, in the runtime's order."""
    resolved = source(job).resolved
    as_node = bool((resolved.ml_policy.get("mpi") or {}).get("runLauncherAsNode"))
    return [(j.name, j.count) for j in resolved.jobs if j.name == NODE or (as_node and j.name == LAUNCHER)]


def hostfile(job: TrainingJob) -> str:
    """The hostfile the MPI plugin writes into ``<name>-mpi-hostfile`` on a cluster."""
    network = (source(job).resolved.runtime.spec.get("template", {}).get("spec", {}).get("network")) or {}
    subdomain = network.get("subdomain") or job.name
    slots = mpi_slots(job)
    return "".join(
        f"{job.name}-{rjob}-0-{i}.{subdomain} slots={slots}\n" for rjob, count in mpi_hosts(job) for i in range(count)
    )
