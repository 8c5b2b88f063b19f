"""The pytest fixture that makes a :class:`~testbed.kfp_backend.runner.Cluster` for one backend release."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from testbed import reference
from testbed.fake_k8s import FakeKube
from testbed.kfp_backend.runner import NAMESPACE, PIPELINE_ROOT, Cluster, start_operator
from testbed.kfp_backend.store import Bucket
from testbed.kfp_backend.versions import Backend
from testbed.s3_server import ACCESS_KEY, SECRET_KEY, MotoServer

PATH_STYLE = {"S3_IGNORE_SUBDOMAIN_BUCKETNAME": "true"}


def cluster_for(backend: Backend, workdir: Path, *, providers: bool = True) -> Iterator[Cluster]:
    """A namespace of a cluster running ``backend``: the fake API, its store (moto), the simulated operator; the
    ``kfp-launcher`` ConfigMap names the store in ``providers``, or (``providers=False``) holds only
    ``defaultPipelineRoot``, as the release manifests leave it, and the store answers at the release's default."""
    # A store that answers at a cluster name (seaweedfs.kubeflow:9000) serves paths, as MinIO and SeaweedFS do:
    # moto would otherwise read the name's first label as a bucket (virtual-hosted style).
    crds = reference.required(reference.CRD_DIR)  # a skip naming the path without them, before anything starts
    moto = MotoServer(env=PATH_STYLE)
    moto.start()
    try:
        kube = FakeKube(crds).start()
        try:
            kubeconfig = kube.write_kubeconfig(workdir / "kubeconfig", NAMESPACE, user="default-editor")
            bucket = Bucket(PIPELINE_ROOT, moto.endpoint, ACCESS_KEY, SECRET_KEY)
            bucket.create()
            cluster = Cluster(backend, kube, bucket, kubeconfig, workdir)
            cluster.configure_store(moto.endpoint, ACCESS_KEY, SECRET_KEY, providers=providers)
            operator = start_operator(cluster)
            yield cluster
            operator.join(timeout=30)
            assert not operator.errors, operator.errors
        finally:
            kube.stop()
    finally:  # whatever failed, no store outlives its cluster
        moto.stop()
