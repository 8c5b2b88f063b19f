"""A fake Kubeflow Pipelines API server (v2beta1 REST, real HTTP) for the real ``kfp.Client``."""

from tests.fake_kfp.server import ApiError, FakeKFP, Request

__all__ = ["ApiError", "FakeKFP", "Request"]
