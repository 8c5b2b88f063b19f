"""The local backend: every replica a process on this machine with the environment its operator would give it.

config (what the caller decides), replica and one_machine (a replica's program and environment here), supervisor,
processes, mountns and workspace (the process each replica runs under), output (its log and console lines), hosted
(workers that only host ranks), backend (the job's lifecycle), exits (what an exit means), running, state and
workdirs (what a running job holds, its record in the state folder, its folders and what is kept of them), jobs
(``kftrain jobs``) and status_server (a TrainJob's progress reports).
"""

from kftrain.backends.local.backend import LocalBackend
from kftrain.backends.local.config import ALL_REPLICA_TYPES, LocalConfig, parse_command_overrides
from kftrain.backends.local.replica import expand_k8s_vars, free_port

__all__ = [
    "ALL_REPLICA_TYPES",
    "LocalBackend",
    "LocalConfig",
    "expand_k8s_vars",
    "free_port",
    "parse_command_overrides",
]
