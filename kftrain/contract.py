"""What a launch step and the programs it runs agree on, whichever backend runs them: the environment variables
that carry the artifact URIs and the place where mounted object-store credentials are found.

Standard library only: the programs, the launch step and storage all import it.
"""

from __future__ import annotations

DATASET_ENV = "KFTRAIN_DATASET_URI"
MODEL_ENV = "KFTRAIN_MODEL_URI"
CHECKPOINT_ENV = "KFTRAIN_CHECKPOINT_URI"
# Where a Trainer initializer writes, and its trainer reads, what Trainer mounts at /workspace on a cluster: the
# local backend gives each job a private folder there instead.
WORKSPACE_ENV = "KFTRAIN_WORKSPACE"
# Set to "local" in every replica the local backend runs (unset on a cluster): what a replica does differently on this
# machine, such as a function's runner that never installs into kftrain's own environment (kftrain.launch.function).
BACKEND_ENV = "KFTRAIN_BACKEND"
# A storage secret (keys accesskey/secretkey, KFP's mlpipeline-minio-artifact layout) is mounted here in every
# replica; processes that do not inherit the container's environment (MPI ranks started over ssh) read it here.
MOUNTED_CREDENTIALS_DIR = "/var/run/secrets/kftrain/object-store"
CREDENTIALS_DIR_ENV = "KFTRAIN_S3_CREDENTIALS_DIR"
