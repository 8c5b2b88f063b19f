"""P11: the bytes each step's pod downloads before its code starts, for a large prepared dataset, on KFP's backend.

KFP's launcher copies every input artifact of a task into its pod before running the step (testbed/kfp_backend:
kubeflow/pipelines@2.5.0:backend/src/v2/component/launcher_v2.go:619-665). This puts a dataset of SIZE bytes
in the run's bucket (a local S3 server) as the prep step's ``dataset`` output, resolves the compiled
``pytorch-digits`` pipeline's launch, evaluation and export tasks against it with the harness's driver, and
downloads their inputs with the harness's launcher, counting the bytes per task and artifact. Nothing is
trained: what a pod downloads is decided before its step runs.

    python bench/bench_launch_download.py --mib 1024 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed.kfp_backend.driver import DagExecution, RunContext, TaskExecution, resolve_inputs  # noqa: E402
from testbed.kfp_backend.launcher import PodFilesystem, download  # noqa: E402
from testbed.kfp_backend.layout import new_salt, output_uri, run_root  # noqa: E402
from testbed.kfp_backend.runner import PIPELINE_ROOT  # noqa: E402
from testbed.kfp_backend.store import Bucket  # noqa: E402
from testbed.kfp_backend.versions import NEWEST  # noqa: E402
from testbed.s3_server import ACCESS_KEY, SECRET_KEY, MotoServer  # noqa: E402

PACKAGE = ROOT / "pipelines" / "training" / "pytorch_digits" / "pipeline.yaml"
PART = 64 << 20


def put_dataset(bucket: Bucket, uri: str, size: int) -> None:
    """A prepared dataset's worth of bytes under ``uri`` (parts of 64 MiB, as shards would be)."""
    _, key = bucket.key_of(uri)
    block = bytes(range(256)) * (PART // 256)
    for index, start in enumerate(range(0, size, PART)):
        bucket.client.put_object(
            Bucket=bucket.name, Key=f"{key}/train/part-{index:05d}.bin", Body=block[: min(PART, size - start)]
        )


def measure(size: int, work: Path) -> dict[str, Any]:
    spec = next(iter(yaml.safe_load_all(PACKAGE.read_text())))
    run = RunContext(str(uuid.uuid4()), "bench-run", spec["pipelineInfo"]["name"])
    run_dir = run_root(PIPELINE_ROOT, spec["pipelineInfo"]["name"], run.run_id)
    with MotoServer() as moto:
        bucket = Bucket(PIPELINE_ROOT, moto.endpoint, ACCESS_KEY, SECRET_KEY)
        bucket.create()
        dataset = output_uri(run_dir, "prepare-dataset", new_salt(), "dataset")
        model = output_uri(run_dir, "pytorchjob-launch", new_salt(), "model")
        put_dataset(bucket, dataset, size)
        bucket.client.put_object(Bucket=bucket.name, Key=bucket.key_of(model)[1] + "/model.pt", Body=b"m" * 4096)
        root = DagExecution(1, "root", spec["root"], {}, {})
        defaults = spec["root"]["inputDefinitions"]["parameters"]
        root.parameters = {k: v["defaultValue"] for k, v in defaults.items() if "defaultValue" in v}
        artifact = {"type": {"schemaTitle": "system.Dataset"}, "metadata": {}}
        root.tasks["prepare-dataset"] = TaskExecution(
            "prepare-dataset",
            True,
            output_parameters={"dataset_uri": dataset},
            output_artifacts={"dataset": [{**artifact, "uri": dataset}]},
        )
        root.tasks["trainer-args"] = TaskExecution("trainer-args", True, output_parameters={"Output": []})
        root.tasks["pytorchjob-launch"] = TaskExecution(
            "pytorchjob-launch", True, output_artifacts={"model": [{**artifact, "uri": model}]}
        )
        tasks = spec["root"]["dag"]["tasks"]
        gate = spec["components"][tasks["quality-gate-pytorch-cpu"]["componentRef"]["name"]]
        export_spec = spec["components"][gate["dag"]["tasks"]["condition-1"]["componentRef"]["name"]]["dag"]["tasks"]
        measured: dict[str, dict[str, int]] = {}
        seconds: dict[str, float] = {}
        for name, task, dag in (
            ("pytorchjob-launch", tasks["pytorchjob-launch"], root),
            ("evaluate-model", tasks["evaluate-model"], root),
            ("export-model", export_spec["export-model"], _gate_dag(root, model, dataset)),
        ):
            component = spec["components"][task["componentRef"]["name"]]
            _, artifacts = resolve_inputs(task, component, dag, run)
            pod = PodFilesystem(Path(tempfile.mkdtemp(dir=work)))
            start = time.perf_counter()
            measured[name] = {
                key: sum(download(NEWEST, a, bucket, pod) for a in arts) for key, arts in artifacts.items()
            }
            seconds[name] = time.perf_counter() - start
    return {"dataset_bytes": size, "downloaded": measured, "seconds": seconds}


def _gate_dag(root: DagExecution, model: str, dataset: str) -> DagExecution:
    """The gate's inner DAG as the driver gives it its inputs (the model artifact and the dataset's URI)."""
    artifact = {"type": {"schemaTitle": "system.Model"}, "metadata": {}, "uri": model}
    params = {
        "pipelinechannel--dataset_uri": dataset,
        "pipelinechannel--model_name": "digits",
        "pipelinechannel--targets": [],
    }
    return DagExecution(3, "condition-1", {}, params, {"pipelinechannel--model": [artifact]})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        result = measure(args.mib << 20, Path(work))
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
