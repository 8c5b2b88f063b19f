"""The labels the operators put on replica pods, and a replica's name (``worker-1``) read from them."""

from __future__ import annotations

from collections.abc import Mapping

# training-operator and mpi-operator share these keys.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"


def replica_label(labels: Mapping[str, str] | None) -> str:
    """``worker-1`` for a replica pod, from the operator's labels (the prefix of its log lines).

    training-operator sets replica-type (lower case) and replica-index; mpi-operator sets only job-role
    (launcher/worker), plus replica-index on workers. A launcher without an index is ``launcher-0``, as
    the local backend names it.
    """
    labels = labels or {}
    rtype = labels.get(REPLICA_TYPE_LABEL) or labels.get(JOB_ROLE_LABEL) or "pod"
    index = labels.get(REPLICA_INDEX_LABEL) or "0"
    return f"{rtype.lower()}-{index}"
