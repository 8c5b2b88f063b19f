"""``TF_CONFIG`` for a TensorFlow program run by a Kubeflow Trainer v2 TrainJob, which gives it none.

Trainer v2 has no TensorFlow plugin; on a plain runtime each node is a pod of an Indexed Job with
``JOB_COMPLETION_INDEX`` and the DNS name ``<trainjob>-node-0-<index>.<trainjob>`` (JobSet's headless service). From
those and ``KFTRAIN_NUM_NODES`` (the TrainJob's ``numNodes``, set in ``trainer.env``) this builds a worker cluster
on port 2222; locally ``KFTRAIN_TF_WORKERS`` lists the addresses. A ``TF_CONFIG`` already set is kept (a TFJob).

    python -m kftrain.programs.tf_config python train.py   # sets TF_CONFIG, then runs the program
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from collections.abc import Mapping, MutableMapping

NUM_NODES_ENV = "KFTRAIN_NUM_NODES"
WORKERS_ENV = "KFTRAIN_TF_WORKERS"
INDEX_ENV = "JOB_COMPLETION_INDEX"
PORT = 2222  # TFJob's default port, free on a node pod
# <trainjob>-<replicated job>-<job index>-<pod index>: JobSet's pod hostnames.
_HOSTNAME = re.compile(r"(?P<prefix>.+-(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-0-)(?P<index>\d+)")


def tf_config(env: Mapping[str, str], hostname: str, port: int = PORT) -> dict[str, object] | None:
    """The TF_CONFIG of this node, or None when this is not a TrainJob node (no completion index)."""
    if INDEX_ENV not in env:
        return None
    index = int(env[INDEX_ENV])
    if env.get(WORKERS_ENV):
        workers = env[WORKERS_ENV].split(",")
    else:
        match = _HOSTNAME.fullmatch(hostname.split(".", 1)[0])
        if match is None or not env.get(NUM_NODES_ENV):
            raise ValueError(
                f"cannot build TF_CONFIG: need {NUM_NODES_ENV} (the TrainJob's numNodes, in trainer.env) and a "
                f"JobSet pod hostname <trainjob>-node-0-<index> (got {hostname!r})"
            )
        prefix = match.group("prefix")
        # JobSet's subdomain is the TrainJob's name: the prefix without "-<job>-0-".
        subdomain = prefix[: -len(f"-{match.group('job')}-0-")]
        workers = [f"{prefix}{i}.{subdomain}:{port}" for i in range(int(env[NUM_NODES_ENV]))]
    if not 0 <= index < len(workers):
        raise ValueError(f"{INDEX_ENV}={index} is not one of the {len(workers)} nodes")
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}


def ensure_tf_config(env: MutableMapping[str, str] | None = None) -> None:
    """Set ``TF_CONFIG`` in ``env`` (default: this process's) for a TrainJob node, unless it is already set."""
    target = os.environ if env is None else env
    if target.get("TF_CONFIG"):
        return
    config = tf_config(target, socket.gethostname())
    if config is not None:
        target["TF_CONFIG"] = json.dumps(config)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m kftrain.programs.tf_config PROGRAM [ARGS...]")
    ensure_tf_config()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
