"""The launch inputs a PyTorchJob adds, and this release's PyTorch DDP program."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kftrain.errors import JobSpecError
from kftrain.job import pod_checks as check
from kftrain.job.kinds import programs
from kftrain.job.kinds.options import KindOptions, Program, launch_input
from kftrain.job.kinds.pytorchjob.spec import ElasticPolicy, PyTorchJobSpec, RdzvConf

# The rendezvous backends torchrun knows (torch.distributed.elastic.rendezvous).
RDZV_BACKENDS = ("c10d", "etcd", "etcd-v2", "static")


def nproc_per_node(value: object) -> str:
    """The operator's ``nprocPerNode`` (a string: "supported values: [auto, cpu, gpu, int]",
    kubeflow/training-operator@v1.9.0:pkg/apis/kubeflow.org/v1/pytorch_types.go); a number is the string it means."""
    text = check.text("nproc_per_node", value).strip()
    if text in ("auto", "cpu", "gpu") or (text.isdigit() and 0 < int(text) <= check.INT32_MAX):
        return text
    raise JobSpecError("nproc_per_node", f"{check.shown(text)} must be auto, cpu, gpu or a number of processes >= 1")


@dataclass
class PyTorchJobOptions(KindOptions):
    """``nproc_per_node`` processes per replica (one unless asked: the operator's default, auto, is one per core
    or GPU); elastic between ``elastic_min_workers`` and ``elastic_max_workers`` Workers when the maximum is
    set: the operator's ``elasticPolicy``, with the rendezvous backend and its settings (``rdzvConf``, e.g.
    ``join_timeout``, ``last_call_timeout``), the restarts torchrun allows, and an HPA's ``metrics``."""

    # PyTorch's data loader workers and NCCL share memory through /dev/shm.
    INPUT_DEFAULTS = {"shm_size": "2Gi"}

    workers: int = launch_input(1, "Worker replicas besides the Master; elastic: the Workers to start with.")
    nproc_per_node: str = launch_input("1", "Processes per replica (auto, cpu, gpu or a number).")
    elastic_min_workers: int = launch_input(0, "Elastic: the fewest Workers the job trains with (0: 1).")
    elastic_max_workers: int = launch_input(0, "Elastic: the most Workers (0: not elastic); sets the elasticPolicy.")
    elastic_max_restarts: int = launch_input(
        3, "Elastic: worker-group restarts torchrun allows (a lost worker is one)."
    )
    elastic_rdzv_backend: str = launch_input("c10d", "Elastic: the rendezvous backend (c10d, etcd, etcd-v2, static).")
    elastic_rdzv_conf: Mapping[str, object] = launch_input(
        {}, 'Elastic: rendezvous settings, e.g. {"join_timeout": "600", "last_call_timeout": "30"} (rdzvConf).'
    )
    elastic_metrics: Sequence[Mapping[str, object]] = launch_input(
        [], "Elastic: autoscaling/v2 MetricSpecs for an HPA on the Workers (metrics)."
    )

    @property
    def elastic(self) -> bool:
        return self.elastic_max_workers > 0

    @property
    def per_replica_launcher(self) -> bool:
        # python alone is one process: WORLD_SIZE counts nprocPerNode per replica, torchrun starts them.
        return self.elastic or self.nproc_per_node != "1"

    def validate(self) -> None:
        for field in ("workers", "elastic_min_workers", "elastic_max_workers", "elastic_max_restarts"):
            low = -check.INT32_MAX - 1 if field == "elastic_max_workers" else 0  # its own message below
            setattr(self, field, check.integer(field, getattr(self, field), low=low, high=check.INT32_MAX))
        self.nproc_per_node = nproc_per_node(self.nproc_per_node)
        if not self.elastic:
            given = [n for n, v in (("elastic_min_workers", self.elastic_min_workers),
                                    ("elastic_rdzv_conf", self.elastic_rdzv_conf),
                                    ("elastic_metrics", self.elastic_metrics)) if v]  # fmt: skip
            if given or self.elastic_max_workers < 0:
                raise JobSpecError(
                    "elastic_max_workers", f"must be >= 1 for an elastic job ({', '.join(given) or 'it'} is set)"
                )
            return
        low = self.elastic_min_workers or 1
        if low < 1:
            raise JobSpecError("elastic_min_workers", f"must be >= 1, got {low}")
        if low > self.elastic_max_workers:
            raise JobSpecError(
                "elastic_max_workers", f"must be >= elastic_min_workers ({low}), got {self.elastic_max_workers}"
            )
        if not low <= self.workers <= self.elastic_max_workers:
            raise JobSpecError(
                "workers",
                f"must be between elastic_min_workers ({low}) and elastic_max_workers ({self.elastic_max_workers}), "
                f"got {self.workers}",
            )
        if self.elastic_max_restarts < 0:
            raise JobSpecError("elastic_max_restarts", f"must be >= 0, got {self.elastic_max_restarts}")
        if self.elastic_rdzv_backend not in RDZV_BACKENDS:
            raise JobSpecError(
                "elastic_rdzv_backend", f"{self.elastic_rdzv_backend!r} is not one of: {', '.join(RDZV_BACKENDS)}"
            )
        for key in self.elastic_rdzv_conf:
            if not str(key) or "=" in str(key) or "," in str(key):
                raise JobSpecError("elastic_rdzv_conf", f"{key!r} is not a rendezvous setting name")
        for i, metric in enumerate(self.elastic_metrics):
            if not isinstance(metric, Mapping) or not metric.get("type"):
                raise JobSpecError(f"elastic_metrics[{i}]", "must be an autoscaling/v2 MetricSpec with a type")

    def replica_counts(self) -> dict[str, int]:
        return {"Worker": self.workers} if self.workers else {}

    def fixed_replicas(self, declared: tuple[str, ...]) -> tuple[str, ...]:
        # Elastic: Workers only, as the operator's elastic examples; the rendezvous replaces the Master.
        return () if self.elastic else declared

    def default_env(self) -> dict[str, str]:
        # A fresh worker store per rendezvous round: agents whose restart counts diverged after a lost worker
        # otherwise keep meeting stale peer addresses in the store shared with the workers.
        return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if self.elastic else {}

    def spec(self) -> PyTorchJobSpec:
        elastic = None
        if self.elastic:
            elastic = ElasticPolicy(
                min_replicas=self.elastic_min_workers or 1,
                max_replicas=self.elastic_max_workers,
                max_restarts=self.elastic_max_restarts,
                rdzv_backend=self.elastic_rdzv_backend,
                rdzv_conf=[RdzvConf(key=str(k), value=str(v)) for k, v in self.elastic_rdzv_conf.items()] or None,
                metrics=[dict(m) for m in self.elastic_metrics] or None,
            )
        return PyTorchJobSpec(nproc_per_node=self.nproc_per_node, elastic_policy=elastic)

    def default_program(self, runtimes: Any = None) -> Program:
        # One process per replica: python itself (the operator's MASTER_ADDR, RANK, WORLD_SIZE). Elastic, or more
        # processes per replica: torchrun, which reads the operator's PET_* variables (nodes, or min:max and the
        # rendezvous, restarts, processes per node) and starts the replica's processes.
        return programs.TORCH_DDP_TORCHRUN if self.per_replica_launcher else programs.TORCH_DDP
