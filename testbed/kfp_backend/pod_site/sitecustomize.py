"""Run by Python at start-up in a harness pod's processes: the pod's own filesystem, and the cluster's DNS.

KFP's SDK maps ``minio://``/``s3://``/``gs://`` URIs to ``/minio/``, ``/s3/``, ``/gcs/`` (kfp/dsl/types/
artifact_types.py); in a pod those are its emptyDir volumes. The harness gives each task pod a folder
(``KFTRAIN_HARNESS_POD_ROOT``) and moves the three mounts under it, so no test writes to ``/minio``.

An in-cluster address (a Service's DNS name or cluster IP, with its port) resolves to the address on this machine
that answers for it (``KFTRAIN_HARNESS_ADDRESSES``, JSON: ``{"seaweedfs.kubeflow:9000": "127.0.0.1:43121"}``), as
the cluster's DNS and Service routing would; every other name resolves as usual.
"""

import json
import os
import socket

_root = os.environ.get("KFTRAIN_HARNESS_POD_ROOT")
if _root:
    from kfp.dsl.types import artifact_types

    artifact_types._GCS_LOCAL_MOUNT_PREFIX = _root + "/gcs/"
    artifact_types._MINIO_LOCAL_MOUNT_PREFIX = _root + "/minio/"
    artifact_types._S3_LOCAL_MOUNT_PREFIX = _root + "/s3/"

_addresses = json.loads(os.environ.get("KFTRAIN_HARNESS_ADDRESSES") or "{}")
if _addresses:
    _resolve = socket.getaddrinfo

    def _cluster_getaddrinfo(host, port, *args, **kwargs):
        here = _addresses.get(f"{host}:{port}")
        if here:
            host, port = here.rsplit(":", 1)
            port = int(port)
        return _resolve(host, port, *args, **kwargs)

    socket.getaddrinfo = _cluster_getaddrinfo
