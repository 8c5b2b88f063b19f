"""Issue 52, class 9: data and models accepted wrongly (kftrain/steps/prep/overlap.py, models/predictors.py,
steps/export/pbtxt.py, job/kinds/trainjob/convert.py, catalog.py): 200 rows that are 10 distinct rows repeated (prep
must say that its test rows are training rows); a model returning int64 class ids of shape [batch] (evaluation must
refuse it, not score it as logits); a tensor name holding a quote, newlines and an ``instance_group`` block (Triton's
config.pbtxt must hold no field it did not write); ``kftrain convert --runtime deepspeed-distributed`` of a
PyTorchJob and ``--runtime torch-distributed`` of an MPIJob (refused: another ML policy); a runtimes file whose
ClusterTrainingRuntime replaces the built-in of its name (taken, with a line saying so).

Setups from tests/steps/prep/test_prep_overlap.py, tests/models/test_predictors.py (``_argmax_model``),
tests/steps/export/test_pbtxt.py and tests/job/kinds/trainjob/test_catalog.py (``training_runtime``).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable

from testbed.hostile.case import CLEAR, FINE, WRONG, Case, Observed, Sandbox

AREA = "data-models"
INJECTED = 'out"\n}\ninstance_group [ { kind: "KIND_GPU" count: 8 } ]\n#'


def _warnings_of(logger: str) -> tuple[io.StringIO, logging.Handler]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setLevel(logging.WARNING)
    logging.getLogger(logger).addHandler(handler)
    return out, handler


def _repeated_rows(sb: Sandbox) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kftrain.steps.prep import prepare_dataset

    x = np.resize(np.arange(10, dtype=np.float64), 200)
    pq.write_table(pa.table({"x": x, "y": (x % 2).astype(np.int64)}), sb.work / "src.parquet")
    sb.ready()
    out, handler = _warnings_of("kftrain.steps.prep")
    info = prepare_dataset(str(sb.work / "ds"), source=str(sb.work / "src.parquet"), label_column="y")
    said = out.getvalue()
    print(said.strip().splitlines()[-1] if said.strip() else "no warning")
    if f"{info.rows['test']} of {info.rows['test']} test rows are also training rows" not in said:
        raise Observed(WRONG, "every test row is a training row, and prep said nothing of it")
    logging.getLogger("kftrain.steps.prep").removeHandler(handler)


def _class_ids(fmt: str | None) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        import numpy as np

        from kftrain.steps.evaluate import evaluate_model
        from kftrain.steps.prep import prepare_dataset
        from testbed.bundled import table_source
        from tests.models.test_predictors import _argmax_model

        x = np.repeat([0.0, 1.0], 50)[:, None]
        y = np.where(x[:, 0] == 0, "a", "b")
        prepare_dataset(str(sb.work / "ds"), source=table_source(sb.work, "t", x, y, ["x"]), label_column="target")
        model = _argmax_model(sb.work, fmt)
        sb.ready()
        evaluate_model(model, str(sb.work / "ds"))

    return run


def _injected_tensor(where: str) -> Callable[[Sandbox], None]:
    def run(sb: Sandbox) -> None:
        from kftrain.steps.export.serving import Tensor, triton_config

        sb.ready()
        tensors = {
            "inputs": [Tensor(INJECTED if where == "input" else "x", "float32", (1,))],
            "outputs": [Tensor(INJECTED if where == "output" else "y", "float32", (2,))],
        }
        config = triton_config("m", "pytorch_libtorch", **tensors)
        fields = [line.strip().split(" ")[0] for line in config.splitlines() if not line.startswith((" ", "\t"))]
        if any(field.startswith("instance_group") for field in fields) or config.count("instance_group") > 1:
            raise Observed(WRONG, f"the tensor name added a field to config.pbtxt: {config!r}"[:300])
        print(config.encode("unicode_escape").decode()[:200])

    return run


def _convert(kind: str, runtime: str) -> Callable[[Sandbox], int]:
    def run(sb: Sandbox) -> int:
        import yaml

        from testbed.manifests import mpijob_v2, pytorchjob, replica

        if kind == "PyTorchJob":
            job = pytorchjob({"Master": replica(1, "pytorch"), "Worker": replica(2, "pytorch")}, name="cj")
        else:
            job = mpijob_v2({"Launcher": replica(1, "mpi", command=["mpirun"]), "Worker": replica(2, "mpi")})
        path = sb.write("job.yaml", yaml.safe_dump(job))
        return sb.cli("convert", "-f", path, "--runtime", runtime)

    return run


def _replacing_runtime(sb: Sandbox) -> int:
    """A runtimes file whose ClusterTrainingRuntime is named torch-distributed: taken, and a line says so."""
    import contextlib

    import yaml

    from testbed.manifests import pytorchjob, replica, training_runtime

    runtimes = sb.write("runtimes.yaml", yaml.safe_dump(training_runtime(name="torch-distributed")))
    job = sb.write("job.yaml", yaml.safe_dump(pytorchjob({"Master": replica(1, "pytorch")}, name="cj")))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = sb.cli("convert", "-f", job, "--runtimes", runtimes)
    said = err.getvalue()
    print(said.strip())
    if code == 0 and "torch-distributed" not in said:
        raise Observed(WRONG, "the built-in torch-distributed was replaced with no word")
    return code


CASES: list[Case] = [
    Case(
        AREA,
        "200 rows that are 10 rows repeated",
        FINE,
        "prepare_dataset",
        _repeated_rows,
        needs=("pyarrow",),
    ),
    *(
        Case(
            AREA,
            f"a model returning int64 class ids ({fmt or 'torchscript'})",
            CLEAR,
            "evaluate_model",
            _class_ids(fmt),
            names=("class ids",),
            needs=("torch", "pyarrow", *(("onnxruntime",) if fmt == "onnx" else ())),
            timeout_s=120,
        )
        for fmt in (None, "onnx")
    ),
    *(
        Case(AREA, f"an {where} tensor name injecting instance_group", FINE, "triton_config", _injected_tensor(where))
        for where in ("input", "output")
    ),
    Case(
        AREA,
        "convert a PyTorchJob --runtime deepspeed-distributed",
        CLEAR,
        "kftrain convert",
        _convert("PyTorchJob", "deepspeed-distributed"),
        names=("--runtime", "deepspeed-distributed", "mpi"),
    ),
    Case(
        AREA,
        "convert an MPIJob --runtime torch-distributed",
        CLEAR,
        "kftrain convert",
        _convert("MPIJob", "torch-distributed"),
        names=("--runtime", "torch-distributed"),
    ),
    Case(
        AREA,
        "a runtimes file replacing a built-in runtime",
        FINE,
        "kftrain convert --runtimes",
        _replacing_runtime,
    ),
]
