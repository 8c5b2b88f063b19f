"""A tiny TFJob replica for running the official TFJob examples locally.

    kftrain launch -f training-operator-v1.9.0_tensorflow_simple.yaml --local \
        --command "python examples/tf_config_echo.py"

It prints the TF_CONFIG the operator (or the local backend) gave it, then does one small
distributed step, so the example proves its replicas can reach each other:

* workers only (± a chief): a MultiWorkerMirroredStrategy all-reduce of each task's number; every
  task prints the same sum;
* parameter servers present: PS and workers start a gRPC ``tf.distribute.Server`` and block (the
  job ends when the chief succeeds, and the operator/local backend stops them); the chief connects
  to the cluster, keeps a variable on ``/job:ps/task:0`` and adds to it from every worker;
* an evaluator (or no TF_CONFIG at all) only prints.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> int:
    raw = os.environ.get("TF_CONFIG", "")
    print(f"TF_CONFIG={raw}", flush=True)
    if not raw:
        print("no TF_CONFIG: a single process, nothing distributed to check", flush=True)
        return 0
    config = json.loads(raw)
    task_type, index = config["task"]["type"], int(config["task"]["index"])
    cluster = {k: v for k, v in config["cluster"].items() if k != "evaluator" and v}
    print(f"task {task_type}-{index}; cluster {json.dumps(cluster, sort_keys=True)}", flush=True)
    if task_type == "evaluator":
        return 0

    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type=task_type, task_id=index, rpc_layer="grpc"
    )
    if "ps" in cluster:
        if task_type in ("ps", "worker"):
            server = tf.distribute.Server(
                resolver.cluster_spec(), job_name=task_type, task_index=index, protocol="grpc", start=True
            )
            print(f"{task_type}-{index}: gRPC server at {server.target}, serving until stopped", flush=True)
            server.join()
            return 0
        tf.config.experimental_connect_to_cluster(
            resolver.cluster_spec(), job_name=task_type, task_index=index, make_master_device_default=False
        )
        with tf.device("/job:ps/task:0"):
            total = tf.Variable(0.0)
        for w in range(len(cluster.get("worker", []))):
            with tf.device(f"/job:worker/task:{w}"):
                total.assign_add(tf.constant(float(w + 1)))
        print(f"chief: variable on /job:ps/task:0 summed from the workers = {float(total.numpy()):g}", flush=True)
        return 0
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    rank = strategy.cluster_resolver.task_id + (1 if task_type == "worker" and "chief" in cluster else 0)
    value = strategy.run(lambda: tf.constant(float(rank + 1)))
    reduced = strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
    print(
        f"{task_type}-{index}: all-reduce over {strategy.num_replicas_in_sync} replicas = {float(reduced):g}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
