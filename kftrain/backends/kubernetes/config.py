"""How the Kubernetes backend runs a job; importing this module does not import the Kubernetes client."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kftrain.backends.base import BackendConfig
from kftrain.kube_client import CALL_DEADLINE_S, SERVICE_ACCOUNT_NAMESPACE
from kftrain.retry import RetryPolicy


@dataclass
class KubernetesConfig(BackendConfig):
    # Where the job is created; None: the job's metadata.namespace, else this pod's, else kubeconfig's, else default.
    namespace: str | None = None
    # The launcher pod that owns the job; None reads KFP_POD_NAME / KFP_POD_UID.
    owner_pod_name: str | None = None
    owner_pod_uid: str | None = None
    # The apiVersion to create of a kind served in several (MPIJob: kubeflow.org/v2beta1 or v1), by kind; a kind
    # not named here is created in the preferred version the cluster serves (discovery).
    api_versions: dict[str, str] = field(default_factory=dict)
    stream_logs: bool = True
    # A pod left unscheduled this long fails the job (and is deleted); None: never. A Volcano gang still
    # gathering and a pod the cluster autoscaler is adding a node for wait instead; an image that cannot
    # be pulled or a broken container config fails at once (see .pending).
    pending_timeout_s: float | None = 600.0
    # A job Suspended this long fails (and is deleted); None: wait (a queue such as Kueue may resume it).
    suspended_timeout_s: float | None = None
    # One watch request lasts this long (server side) before the next one resumes where it ended: renewing the
    # two watches is all a running job costs the API server.
    watch_window_s: int = 300
    # How often what no watch shows is read: the autoscaler's events about unscheduled pods.
    poll_interval_s: float = 2.0
    event_lines: int = 10
    # How long to let log streams finish once the job has ended.
    log_drain_s: float = 5.0
    propagation_policy: str = "Background"
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # How long the wait's watches ride over an API server they cannot reach (refused connections, 5xx, 429: a
    # control-plane upgrade restarts kube-apiserver) before the step gives up; the job runs on meanwhile.
    outage_s: float = 300.0
    namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE
    # Every API call, its retries included, ends within this (kftrain.kube_client.CALL_DEADLINE_S); a run's calls
    # also by the step's timeout, and a ``kftrain jobs`` command's by this from its start.
    call_deadline_s: float = CALL_DEADLINE_S
    # What a stop (the delete after a SIGTERM or the timeout, the eviction check before it) may take in all: within
    # the 30 s a pod is given to end (terminationGracePeriodSeconds, k8s.io/api@v0.34.0:core/v1/types.go).
    stop_s: float = 20.0

    REPLICA_LIMIT_WHY = (
        "more than {limit}: the launch step follows one log stream per replica of a job; raise "
        "KubernetesConfig.max_replicas if the step's pod and the API server can take more"
    )
