"""Run by Python at start-up in a harness task pod's processes: the pod's own filesystem is a folder here.

KFP's SDK maps ``minio://``/``s3://``/``gs://`` URIs to ``/minio/``, ``/s3/``, ``/gcs/`` (kfp/dsl/types/
artifact_types.py); in a pod those are its emptyDir volumes. The harness gives each task pod a folder
(``KFTRAIN_HARNESS_POD_ROOT``) and moves the three mounts under it, so no test writes to ``/minio``.
"""

import os

_root = os.environ.get("KFTRAIN_HARNESS_POD_ROOT")
if _root:
    from kfp.dsl.types import artifact_types

    artifact_types._GCS_LOCAL_MOUNT_PREFIX = _root + "/gcs/"
    artifact_types._MINIO_LOCAL_MOUNT_PREFIX = _root + "/minio/"
    artifact_types._S3_LOCAL_MOUNT_PREFIX = _root + "/s3/"
