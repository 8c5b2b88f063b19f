"""A fake Kubeflow Pipelines API server (v2beta1 REST, real HTTP) for the real ``kfp.Client``."""

from testbed.fake_kfp.server import ApiError, FakeKFP, Request

__all__ = ["ApiError", "FakeKFP", "Request"]
