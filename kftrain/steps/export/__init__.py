"""Model export: a model of any accepted format, in the layouts model servers load, verified before it is published.

Targets (by default every one the model's format allows): ``triton`` (a Triton model repository in the model's own
runtime: TorchScript, ONNX or a SavedModel), ``triton-onnx`` (a PyTorch model as ONNX) and ``tfserving``. Every
written model is reloaded with the runtime that serves it and must reproduce the model's outputs on the verification
split before anything is published; the export also holds ``export.json`` and the KServe ``InferenceService``
serving the first target (:mod:`kftrain.models.kserve`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kftrain.extras import requires

with requires("data", "export"):
    import numpy as np

from kftrain import storage
from kftrain.data.dataset import BATCH_ROWS, CLASSIFICATION, TABLE, iter_batches, read_info
from kftrain.errors import ExportError
from kftrain.models import describe_model, kserve, predictor_for
from kftrain.models.kserve import check_model_name
from kftrain.models.spec import KERAS, KFTRAIN_MLP, ONNX, SAVEDMODEL, TORCHSCRIPT
from kftrain.steps.export import serving
from kftrain.steps.export.serving import Tensor
from kftrain.steps.export.targets import (
    Written,
    savedmodel_files,
    temporary_folder,
    write_onnx,
    write_savedmodel,
    write_torchscript,
)
from kftrain.storage.uri import split_uri

log = logging.getLogger(__name__)

TRITON, TRITON_ONNX, TFSERVING = "triton", "triton-onnx", "tfserving"
TARGETS_OF = {
    TORCHSCRIPT: (TRITON, TRITON_ONNX),
    KFTRAIN_MLP: (TRITON, TRITON_ONNX),
    ONNX: (TRITON,),
    SAVEDMODEL: (TRITON, TFSERVING),
    KERAS: (TRITON, TFSERVING),
}
TOLERANCE = 1e-4
MANIFEST = "kserve/inferenceservice.yaml"

__all__ = ["ExportError", "ExportReport", "ExportedModel", "export_model"]


@dataclass
class ExportedModel:
    target: str
    format: str
    path: str
    max_abs_diff: float
    same_predictions: bool


@dataclass
class ExportReport:
    model_name: str
    source_format: str
    framework: str
    rows_compared: int = 0
    exports: list[ExportedModel] = field(default_factory=list)
    inference_service: dict[str, Any] = field(default_factory=dict)
    service_account: dict[str, Any] = field(default_factory=dict)  # empty: the namespace's default serves it

    def manifest(self) -> str:
        """The InferenceService, then the ServiceAccount it names if any: the manifest ``kubectl apply`` takes."""
        return kserve.manifest_yaml(self.inference_service, *([self.service_account] if self.service_account else []))

    def to_metadata(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "source_format": self.source_format,
            "framework": self.framework,
            "targets": [e.target for e in self.exports],
            "formats": [e.format for e in self.exports],
            "paths": {e.target: e.path for e in self.exports},
            "max_abs_diff": {e.target: e.max_abs_diff for e in self.exports},
            "rows_compared": self.rows_compared,
            "inference_service": MANIFEST,
        }


def export_model(
    model_uri: str,
    dataset_uri: str,
    output_uri: str,
    *,
    model_name: str = "model",
    targets: tuple[str, ...] | None = None,
    verify_split: str = "test",
    verify_rows: int = 0,
    tolerance: float = TOLERANCE,
) -> ExportReport:
    """Write the model at ``model_uri`` to ``output_uri`` in each target's layout, each verified by reloading it.

    ``verify_rows`` caps the rows compared (0: the whole split, streamed in batches).
    """
    check_model_name(model_name)
    spec = describe_model(model_uri)
    info = read_info(dataset_uri)
    if info.kind != TABLE:
        raise ExportError(f"{dataset_uri}: a {info.kind} dataset has no feature rows to verify the export on")
    allowed = TARGETS_OF[spec.format]
    wanted = tuple(targets or allowed)
    for target in wanted:
        if target not in allowed:
            raise ExportError(
                f"targets: {target!r} is not available for a {spec.format} model (available: {', '.join(allowed)})"
            )
    original = predictor_for(spec)
    report = ExportReport(model_name=model_name, source_format=spec.format, framework=spec.framework)
    with storage.ArtifactWriter(output_uri) as writer, temporary_folder() as tmp:
        written: list[Written] = []
        savedmodel = None
        for target in wanted:
            if target == TRITON and spec.format in (TORCHSCRIPT, KFTRAIN_MLP):
                written.append(write_torchscript(spec, writer, f"triton/{model_name}", info.num_features))
            elif target == TRITON and spec.format == ONNX:
                written.append(write_onnx(spec, writer, f"triton/{model_name}", info.num_features))
            elif target == TRITON_ONNX:
                onnx = write_onnx(spec, writer, f"triton/{model_name}-onnx", info.num_features)
                onnx.target = TRITON_ONNX
                written.append(onnx)
            else:
                savedmodel = savedmodel or savedmodel_files(spec, Path(tmp))
                model_dir = f"triton/{model_name}" if target == TRITON else f"tfserving/{model_name}"
                written.append(write_savedmodel(spec, writer, model_dir, target, savedmodel))
        diffs, same, rows = _compare(original, written, dataset_uri, verify_split, verify_rows, info, writer, tolerance)
        if not rows:
            raise ExportError(f"{dataset_uri}: the {verify_split} split has no rows to verify the export on")
        report.rows_compared = rows
        for w in written:
            report.exports.append(ExportedModel(w.target, w.format, w.path, diffs[w.target], same[w.target]))
            log.info(
                "exported %s (%s) to %s: max |diff| %.2e over %d rows",
                w.target,
                w.format,
                storage.join(output_uri, w.path),
                diffs[w.target],
                rows,
            )
        first = written[0]
        served = storage.join(output_uri, "triton") if first.platform else storage.join(output_uri, first.model_dir)
        # A store at an endpoint of its own (KFP's MinIO) is reached through a ServiceAccount naming it.
        endpoint = storage.s3_endpoint(output_uri) if split_uri(output_uri)[0] == "s3" else None
        if endpoint:
            report.service_account = kserve.service_account(f"{model_name}-storage", endpoint)
        account = report.service_account.get("metadata", {}).get("name", "")
        report.inference_service = kserve.inference_service(
            model_name, first.target, kserve.storage_uri(served), account
        )
        writer.write_bytes(MANIFEST, report.manifest().encode())
        writer.metadata = report.to_metadata()
        writer.write_json("export.json", report.to_metadata())
    return report


def _compare(
    original: Any,
    written: list[Written],
    dataset_uri: str,
    split: str,
    limit: int,
    info: Any,
    writer: storage.ArtifactWriter,
    tolerance: float,
) -> tuple[dict[str, float], dict[str, bool], int]:
    """Run every written model beside the original on the split; write Triton configs from the first batch."""
    diffs = {w.target: 0.0 for w in written}
    same = {w.target: True for w in written}
    rows = 0
    for x, _ in iter_batches(dataset_uri, split, batch_rows=BATCH_ROWS, info=info):
        if limit and rows >= limit:
            break
        if limit:
            x = x[: limit - rows]
        expected = original(x)
        if not np.all(np.isfinite(expected)):
            raise ExportError(
                f"the model outputs NaN or infinity on the {split} split (in rows {rows}-{rows + len(x) - 1}): "
                "such a model cannot be verified, nor served"
            )
        for w in written:
            raw = np.asarray(w.predict(x))
            if rows == 0 and w.platform:
                inputs = [Tensor.measured(w.input_name, x.astype(w.input_dtype))]
                outputs = [Tensor.measured(w.output_name, raw)]
                config = serving.triton_config(w.model_dir.rsplit("/", 1)[-1], w.platform, inputs, outputs)
                writer.write_bytes(f"{w.model_dir}/config.pbtxt", config.encode())
            got = raw.reshape(len(x), -1).astype(np.float64)
            if got.shape != expected.shape:
                raise ExportError(
                    f"{w.target} export outputs shape {list(raw.shape)}, the model {list(expected.shape)}"
                )
            diff = np.abs(got - expected)
            diffs[w.target] = max(diffs[w.target], float(diff.max()) if diff.size else 0.0)
            if not np.allclose(got, expected, rtol=tolerance, atol=tolerance):
                raise ExportError(
                    f"{w.target} export ({w.format}) does not reproduce the model: max |diff| {diff.max():.2e} "
                    f"> tolerance {tolerance}"
                )
            if (
                info.task == CLASSIFICATION
                and got.shape[1] > 1
                and not np.array_equal(got.argmax(1), expected.argmax(1))
            ):
                same[w.target] = False
                raise ExportError(f"{w.target} export ({w.format}) predicts other classes than the model")
        rows += len(x)
    return diffs, same, rows
