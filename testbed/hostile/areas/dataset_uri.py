"""A step's dataset_uri (kftrain/storage/uri.py ``check_input_uri``, where it enters a launch, an evaluation or an
export; kftrain/launch/step.py ``as_written``): ftp://, $(HOME) inside it, a newline, a 1 MiB URI, s3:///ds, and
the URIs a step takes.

The URIs are tests/storage/test_input_uris.py's; its evaluation and export calls are
``evaluate_component``/``export_component`` with artifacts of the case's folder, as the test gives them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from testbed import step_calls
from testbed.hostile.case import CLEAR, FINE, WRONG, Case, Observed, Sandbox

AREA = "dataset-uri"
MIB_URI = "s3://b/" + "k" * (1 << 20)


def _checked(uri: str, field: str = "dataset_uri") -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        from kftrain.storage.uri import check_input_uri

        sb.ready()
        check_input_uri(uri, field)

    return run


def _launch(uri: str, field: str = "dataset_uri") -> Callable[[Sandbox], None]:
    """The PyTorchJob launch component's body with ``field`` = ``uri`` (the job's run replaced by a record of it);
    for a URI it takes, the value every replica's ``KFTRAIN_DATASET_URI`` expands to must be the URI as given."""

    def run(sb: Sandbox) -> None:
        import pytest

        from kftrain.backends.local import expand_k8s_vars
        from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
        from testbed.launch_harness import render_launch

        sb.ready()
        with pytest.MonkeyPatch.context() as patch:
            rendered = render_launch(pytorchjob_launch, patch, sb.work, **{field: uri})
        if field != "dataset_uri":
            return
        for rtype, spec in rendered.manifest["spec"]["pytorchReplicaSpecs"].items():
            env = {e["name"]: e.get("value", "") for e in spec["template"]["spec"]["containers"][0].get("env", [])}
            seen = expand_k8s_vars(env["KFTRAIN_DATASET_URI"], {"HOME": "/root", **env})
            if seen != uri:
                raise Observed(WRONG, f"the {rtype} replicas would read {seen!r}, not {uri!r}")

    return run


def _evaluate(uri: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        sb.ready()
        step_calls.evaluate(sb.work, uri)

    return run


def _export(uri: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        sb.ready()
        step_calls.export(sb.work, uri)

    return run


# Rank 0 writes what it was given as its dataset, and a model where the step says.
SEEN = """
import os, pathlib, sys
pathlib.Path(sys.argv[1]).write_text(os.environ["KFTRAIN_DATASET_URI"])
model = pathlib.Path(os.environ["KFTRAIN_MODEL_URI"])
model.mkdir(parents=True, exist_ok=True)
(model / "model.bin").write_bytes(b"weights")
"""


def _replica_reads(uri: str) -> Callable[[Sandbox], None]:
    """The launch component run whole on the local backend: the one replica writes what it got."""

    def run(sb: Sandbox) -> None:
        from kftrain_components.training.pytorchjob_launch.component import pytorchjob_launch
        from testbed.launch_harness import call_launch

        seen = sb.work / "seen.txt"
        sb.ready()
        call_launch(
            pytorchjob_launch,
            sb.work,
            backend="local",
            dataset_uri=uri,
            command=[sys.executable, "-c", SEEN, str(seen)],
            workers=0,
        )
        if seen.read_text() != uri:
            raise Observed(WRONG, f"the replica read {seen.read_text()!r}, not {uri!r}")

    return run


REFUSED: list[tuple[str, str, str]] = [
    ("ftp://", "ftp://host/ds", "ftp://"),
    ("https://", "https://host/ds", "https://"),
    ("a newline", "s3://b/ds\nx", "control character"),
    ("a NUL", "s3://b/ds\0x", "control character"),
    ("a 1 MiB URI", MIB_URI, "longer than"),
    ("s3:///ds", "s3:///ds", "no bucket"),
    ("minio:// alone", "minio://", "no bucket"),
    ("gs:///x", "gs:///x", "no bucket"),
]
TAKEN = ["minio://b/x", "relative/ds"]
AS_WRITTEN = ["s3://b/$(HOME)/ds", "s3://b/$$(HOME)", "/data/$(KFTRAIN_MODEL_URI)", "s3://b/$"]


def _cases() -> list[Case]:
    out: list[Case] = []
    for name, uri, said in REFUSED:
        out.append(
            Case(
                AREA,
                f"{name} (launch)",
                CLEAR,
                "pytorchjob_launch(dataset_uri=...)",
                _launch(uri),
                names=("dataset_uri", said),
            )
        )
    for name, run in (("evaluate", _evaluate), ("export", _export)):
        for label, uri, said in (REFUSED[0], REFUSED[6]):
            out.append(
                Case(
                    AREA,
                    f"{label} ({name})",
                    CLEAR,
                    f"{name}_component(dataset_uri=...)",
                    run(uri),
                    names=("dataset_uri", said),
                    needs=("pyarrow",),
                )
            )
    out.append(
        Case(
            AREA,
            "ftp:// as checkpoint_uri (launch)",
            CLEAR,
            "pytorchjob_launch(checkpoint_uri=...)",
            _launch("ftp://h/x", "checkpoint_uri"),
            names=("checkpoint_uri", "ftp://"),
        )
    )
    out += [Case(AREA, f"{uri} (check_input_uri)", FINE, "check_input_uri", _checked(uri)) for uri in TAKEN]
    out.append(
        Case(
            AREA,
            "a newline (check_input_uri)",
            CLEAR,
            "check_input_uri(uri, 'dataset_uri')",
            _checked("s3://b/ds\nx"),
            names=("dataset_uri", "control character"),
        )
    )
    out += [
        Case(AREA, f"{uri} reaches every replica as written", FINE, "pytorchjob_launch(dataset_uri=...)", _launch(uri))
        for uri in AS_WRITTEN
    ]
    out.append(
        Case(
            AREA,
            "$(HOME) inside it, read by a local replica",
            FINE,
            "pytorchjob_launch(dataset_uri=..., backend='local')",
            _replica_reads("s3://b/$(HOME)/ds"),
            timeout_s=120,
        )
    )
    return out


CASES: list[Case] = _cases()
