"""A credential refused after the create (a token that expired mid-launch): the step says the job was created,
where it is, and whether deleting it worked, in one line; no traceback."""

from __future__ import annotations

import pytest

from kftrain.errors import KftrainError
from testbed.fake_k8s import FakeKube
from testbed.k8s_harness import make_backend, pytorch_job, stamped


@pytest.mark.parametrize("delete_refused", [False, True], ids=["delete-works", "delete-refused"])
def test_a_401_after_the_create_names_the_job_and_what_its_delete_did(kube: FakeKube, delete_refused: bool) -> None:
    kube.fault("401", method="GET", times=10_000)  # every read after the create
    if delete_refused:
        kube.fault("401", method="DELETE", times=10_000)
    backend, out = make_backend(kube)
    with pytest.raises(KftrainError) as caught:
        backend.run(stamped(pytorch_job(), "run-1", "task-1"))
    line = str(caught.value)
    assert "\n" not in line and "HTTP 401" in line, line
    (where,) = [said.split("created ", 1)[1] for said in out.getvalue().splitlines() if "created PyTorchJob" in said]
    if delete_refused:
        assert f"{where} was created and is left on the cluster: deleting it failed" in line, line
        assert len(kube.jobs_of("pytorchjobs")) == 1
    else:
        assert f"deleted {where}" in out.getvalue(), out.getvalue()
        assert not kube.jobs_of("pytorchjobs")
