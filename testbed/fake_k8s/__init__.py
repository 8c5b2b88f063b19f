"""A fake Kubernetes API server (real HTTP, for the real client) and a simulated training operator."""

from testbed.fake_k8s.operator import JobGone, JobSim, OperatorSim, Scenario, kueue_webhook
from testbed.fake_k8s.server import FakeKube, Fault

__all__ = ["FakeKube", "Fault", "JobGone", "JobSim", "OperatorSim", "Scenario", "kueue_webhook"]
