"""JAX on Kubeflow Trainer's jax runtime, as Trainer's JAX guide has it (docs/user-guides/jax.md): initialize with
the process count and id the jax plugin gives (JAX reads JAX_COORDINATOR_ADDRESS itself), then one collective.

With ``bare``: ``jax.distributed.initialize()`` with no arguments, which takes the count and id only from a cluster
it detects (jax 0.10.2: jax/_src/clusters/; on Kubernetes by reading its pod and Job through the API)."""

import os
import sys

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

if sys.argv[1:] == ["bare"]:
    jax.distributed.initialize()
else:
    jax.distributed.initialize(
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]), process_id=int(os.environ["JAX_PROCESS_ID"])
    )
total = multihost_utils.process_allgather(jnp.array([jax.process_index() + 1.0])).sum()
print(f"process {jax.process_index()} of {jax.process_count()} sum {int(total)}", flush=True)
jax.distributed.shutdown()
