"""A URI a step is given (a dataset, a model, checkpoints) is checked once, where it enters, and then travels as
written: an unsupported scheme, a control character, a URI past the length bound or an object URI without a
bucket is one line naming the input; ``$(VAR)`` in it reaches every replica as written, on both backends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kftrain.backends.local import expand_k8s_vars
from kftrain.errors import KftrainError
from kftrain.job.kinds import kind_for
from kftrain.launch.inputs import parse_launch_inputs
from kftrain.launch.step import Artifacts
from kftrain.storage import StorageError
from kftrain.storage.uri import MAX_URI_CHARS, check_input_uri
from testbed import step_calls

REFUSED = {
    "an unsupported scheme": ("ftp://host/ds", r"dataset_uri 'ftp://host/ds': ftp:// is not supported"),
    "http": ("https://host/ds", r"https:// is not supported \(local paths, file://, s3://"),
    "a newline": ("s3://b/ds\nx", r"dataset_uri 's3://b/ds\\nx': a control character"),
    "a tab": ("/data/a\tb", r"a control character"),
    "a 1 MiB URI": ("s3://b/" + "k" * (1 << 20), rf"longer than {MAX_URI_CHARS} characters"),
    "no bucket": ("s3:///ds", r"dataset_uri 's3:///ds': no bucket"),
    "no bucket (minio)": ("minio://", r"no bucket"),
    "no bucket (gs)": ("gs:///x", r"no bucket"),
    "no path": ("file://", r"no path"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_uri_that_cannot_be_read_is_refused_naming_the_input(case: str) -> None:
    uri, match = REFUSED[case]
    with pytest.raises(StorageError, match=match) as caught:
        check_input_uri(uri, "dataset_uri")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 600


@pytest.mark.parametrize(
    "uri", ["s3://b/ds", "minio://b/x", "s3a://b/x", "gs://b/x", "file:///data", "relative/ds", "/abs/ds", "s3://b"]
)
def test_supported_uris_pass(uri: str) -> None:
    assert check_input_uri(uri, "dataset_uri") == uri


def test_the_launch_step_checks_its_uris_before_anything_is_created() -> None:
    kind = kind_for("PyTorchJob")
    for field in ("dataset_uri", "checkpoint_uri"):
        with pytest.raises(KftrainError, match=rf"{field} 'ftp://h/x': ftp:// is not supported"):
            parse_launch_inputs(kind, {field: "ftp://h/x"})


@pytest.mark.parametrize("step", [step_calls.evaluate, step_calls.export], ids=["evaluate", "export"])
def test_evaluation_and_export_check_their_uris_in_one_line(
    step: Callable[[Path, str], None], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        step(tmp_path, "ftp://h/ds")
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert (
        err == "ERROR: dataset_uri 'ftp://h/ds': ftp:// is not supported (local paths, file://, s3://, s3a://, "
        "minio://, gs://)\n"
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "isvc").exists()


@pytest.mark.parametrize(
    "uri", ["s3://b/$(HOME)/ds", "s3://b/$$(HOME)", "/data/$(KFTRAIN_MODEL_URI)", "s3://b/a$b", "s3://b/$"]
)
def test_a_uri_reaches_every_replica_as_written(uri: str) -> None:
    """Kubernetes expands ``$(VAR)`` in an env value with the container's env (kubernetes@v1.36:
    third_party/forked/golang/expansion/expand.go, ``$$`` an escaped ``$``); the value each replica gets is the URI
    as the step was given it, whatever the container's env (the local backend expands with the same rule)."""
    env = Artifacts(uri, "s3://b/model").env()
    container_env = {"HOME": "/root", "KFTRAIN_MODEL_URI": "s3://b/model"}
    assert expand_k8s_vars(env["KFTRAIN_DATASET_URI"], container_env) == uri
