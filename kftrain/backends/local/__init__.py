"""The local backend: every replica a process on this machine with the environment its operator would give it.

config.py (what the caller decides), replica.py (a replica's program and environment here, checked before
it starts), one_machine.py (what one machine changes in the operator's contract), supervisor.py (the stdlib-only
process each replica runs under, tying its tree to kftrain), processes.py (starting and stopping replicas under
it), output.py (a replica's output: whole in its log, bounded lines on the console), hosted.py (workers that only
host ranks), backend.py (the job's lifecycle), exits.py (what a replica's exit means: restarts, the success rule,
the failure), running.py (what the backend holds of a running job, and its record as it starts and ends), state.py
(the jobs recorded for ``kftrain jobs``, in the user's own state folder), workdirs.py (a job's folders: where its
replicas run, what is kept of them when it ends) and jobs.py (those jobs listed, read, followed and deleted from any
shell).
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
