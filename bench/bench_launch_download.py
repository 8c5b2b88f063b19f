"""P11: the bytes each step's pod downloads before its code starts, on KFP's backend, at every supported release.

KFP's launcher copies every input artifact of a task into its pod before running the step (testbed/kfp_backend:
kubeflow/pipelines@2.5.0:backend/src/v2/component/launcher_v2.go:619-665), and before 2.17 it copies every key
that merely starts with the artifact's key (kubeflow/pipelines@2.5.0:backend/src/v2/objectstore/
object_store.go:123-148). This puts, in the run's bucket (a local S3 server):

- a dataset of SIZE bytes as the prep step's ``dataset`` output;
- the launch step's model folder, and beside it what a training job leaves there, named after the model as
  kftrain names it (:func:`kftrain.storage.derived_uri`): its checkpoints (3 kept, each the weights and the
  optimizer's state: 2x the model), its replicas' logs and TensorBoard files, and the staging prefix of a
  writer killed while publishing (``<model>.partial-<id>``, left for a bucket lifecycle rule);

then resolves the compiled ``pytorch-digits`` pipeline's launch, evaluation and export tasks against them with
the harness's driver and downloads their inputs with the harness's launcher, for each release's rules, counting
the bytes per task and artifact: with the model's URI as the launch step records it
(:func:`kftrain.launch.component.folder_uri`, ``.../model/``) and, beside it, as KFP provisioned it
(``.../model``, what the step recorded before). Nothing is trained: what a pod downloads is decided before its
step runs.

    python bench/bench_launch_download.py --mib 1024 --model-mib 16 --json out.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kftrain.launch.component import folder_uri  # noqa: E402
from kftrain.storage import derived_uri  # noqa: E402
from testbed.kfp_backend.driver import DagExecution, RunContext, TaskExecution, resolve_inputs  # noqa: E402
from testbed.kfp_backend.launcher import PodFilesystem, download  # noqa: E402
from testbed.kfp_backend.layout import new_salt, output_uri, run_root  # noqa: E402
from testbed.kfp_backend.runner import PIPELINE_ROOT  # noqa: E402
from testbed.kfp_backend.store import Bucket  # noqa: E402
from testbed.kfp_backend.versions import BACKENDS, Backend  # noqa: E402
from testbed.s3_server import ACCESS_KEY, SECRET_KEY, MotoServer  # noqa: E402

PACKAGE = ROOT / "pipelines" / "training" / "pytorch_digits" / "pipeline.yaml"
PART = 64 << 20
MIB = 1 << 20
EMPTY = {"STRING": "", "LIST": [], "STRUCT": {}, "BOOLEAN": True, "NUMBER_INTEGER": 0, "NUMBER_DOUBLE": 0.0}


def put_bytes(bucket: Bucket, uri: str, size: int, name: str = "part") -> None:
    """``size`` bytes under ``uri``, in parts of at most 64 MiB (as shards or checkpoint files would be)."""
    _, key = bucket.key_of(uri.rstrip("/"))
    block = bytes(range(256)) * (PART // 256)
    for index, start in enumerate(range(0, size, PART)):
        body = block[: min(PART, size - start)]
        bucket.client.put_object(Bucket=bucket.name, Key=f"{key}/{name}-{index:05d}.bin", Body=body)


def put_model_and_siblings(bucket: Bucket, model: str, model_bytes: int) -> dict[str, int]:
    """The model folder and what a job leaves beside it; the bytes of each."""
    layout = {
        model: model_bytes,
        derived_uri(model, "checkpoints"): 3 * 2 * model_bytes,
        derived_uri(model, "logs"): MIB,
        derived_uri(model, "tensorboard"): MIB,
        f"{model}.partial-{uuid.uuid4().hex[:12]}": model_bytes,
    }
    for uri, size in layout.items():
        put_bytes(bucket, uri, size)
    return {uri.rsplit("/", 1)[-1]: size for uri, size in layout.items()}


def measure(size: int, model_bytes: int, work: Path) -> dict[str, Any]:
    spec = next(iter(yaml.safe_load_all(PACKAGE.read_text())))
    run = RunContext(str(uuid.uuid4()), "bench-run", spec["pipelineInfo"]["name"])
    run_dir = run_root(PIPELINE_ROOT, spec["pipelineInfo"]["name"], run.run_id)
    with MotoServer() as moto:
        bucket = Bucket(PIPELINE_ROOT, moto.endpoint, ACCESS_KEY, SECRET_KEY)
        bucket.create()
        dataset = output_uri(run_dir, "prepare-dataset", new_salt(), "dataset")
        model = output_uri(run_dir, "pytorchjob-launch", new_salt(), "model")
        metrics = output_uri(run_dir, "evaluate-model", new_salt(), "metrics")
        put_bytes(bucket, dataset, size)
        stored = put_model_and_siblings(bucket, model, model_bytes)
        bucket.client.put_object(Bucket=bucket.name, Key=bucket.key_of(metrics)[1], Body=b"{}")
        releases: dict[str, Any] = {}
        seconds: dict[str, float] = {}
        for name, backend in BACKENDS.items():
            releases[name] = {}
            for recorded, model_uri in (("folder", folder_uri(model)), ("provisioned", model)):
                start = time.perf_counter()
                releases[name][recorded] = _downloads(spec, run, backend, bucket, dataset, model_uri, metrics, work)
                seconds[f"{name} {recorded}"] = time.perf_counter() - start
    return {
        "dataset_bytes": size,
        "model_bytes": model_bytes,
        "stored": stored,
        "releases": releases,
        "seconds": seconds,
    }


def _downloads(
    spec: dict[str, Any],
    run: RunContext,
    backend: Backend,
    bucket: Bucket,
    dataset: str,
    model: str,
    metrics: str,
    work: Path,
) -> dict[str, dict[str, int]]:
    """Bytes each task's pod downloads, per input artifact, with the launch's model recorded at ``model``."""
    artifact = {"type": {"schemaTitle": "system.Dataset"}, "metadata": {}}
    root = DagExecution(1, "root", spec["root"], {}, {})
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    root.parameters = {k: v["defaultValue"] for k, v in defaults.items() if "defaultValue" in v}
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
    condition = spec["components"][gate["dag"]["tasks"]["condition-1"]["componentRef"]["name"]]
    measured: dict[str, dict[str, int]] = {}
    for name, task, dag in (
        ("pytorchjob-launch", tasks["pytorchjob-launch"], root),
        ("evaluate-model", tasks["evaluate-model"], root),
        ("export-model", condition["dag"]["tasks"]["export-model"], _condition_dag(condition, model, dataset, metrics)),
    ):
        component = spec["components"][task["componentRef"]["name"]]
        _, artifacts = resolve_inputs(task, component, dag, run)
        pod = PodFilesystem(Path(tempfile.mkdtemp(dir=work)))
        measured[name] = {key: sum(download(backend, a, bucket, pod) for a in arts) for key, arts in artifacts.items()}
        shutil.rmtree(pod.root)
    return measured


def _condition_dag(condition: dict[str, Any], model: str, dataset: str, metrics: str) -> DagExecution:
    """The gate's inner DAG as the driver gives it its inputs: the model artifact, the dataset's URI, the
    evaluation's metrics; every other parameter an empty value of its type."""
    definitions = condition.get("inputDefinitions", {})
    params = {name: EMPTY[spec["parameterType"]] for name, spec in definitions.get("parameters", {}).items()}
    params["pipelinechannel--dataset_uri"] = dataset
    artifacts = {}
    for name, spec in definitions.get("artifacts", {}).items():
        uri = model if name == "pipelinechannel--model" else metrics
        artifacts[name] = [{"type": spec["artifactType"], "metadata": {}, "uri": uri}]
    return DagExecution(3, "condition-1", {}, params, artifacts)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024, help="the dataset's size")
    parser.add_argument("--model-mib", type=int, default=16, help="the model's size")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        result = measure(args.mib * MIB, args.model_mib * MIB, Path(work))
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
