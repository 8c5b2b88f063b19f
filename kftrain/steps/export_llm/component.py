"""The body of the ``export_language_model`` component: export, then hand KFP the model and the KServe manifest, and
log and register it in MLflow when tracking is on (best-effort: a tracking failure never fails the step).

Every input is checked (the model name, the registered name, the generation config, the model folder, the split)
before anything is written.
"""

from __future__ import annotations

import logging
from typing import Any

from kftrain import storage
from kftrain.errors import ExportError
from kftrain.inputs.export_llm import ExportLanguageModelInputs
from kftrain.llm.generate import GenerationSettings
from kftrain.models.kserve import check_model_name
from kftrain.step import component_step
from kftrain.storage.io import write_once
from kftrain.tracking.client import task_run
from kftrain.tracking.export import check_registration, log_export
from kftrain.tracking.llm import log_transformers_model

log = logging.getLogger(__name__)


def export_llm_component(**values: Any) -> tuple[str]:
    """Export the fine-tuned model into ``exported``; write the InferenceService serving it into
    ``inference_service``; with MLflow tracking, tag the run, log the model with the transformers flavor and, given
    ``register_model``, register it. ``values``: :class:`ExportLanguageModelInputs`; returns the registered version
    ("" when none)."""
    from kftrain.llm.export import MODEL_DIR, export_language_model
    from kftrain.llm.instructions import read_split
    from kftrain.llm.model_io import load_model
    from kftrain.steps.export.component import register as register_export_step

    given = ExportLanguageModelInputs(**values)
    exported, service = given.exported, given.inference_service
    version = ""
    with (
        component_step(exported, service, inputs={"model": given.model.uri, "dataset_uri": given.dataset_uri}),
        task_run("export's MLflow logging", given.mlflow_tracking_uri, "export-language-model") as tracked,
    ):
        check_model_name(given.model_name)
        register = check_registration(given.register_model, given.mlflow_tracking_uri)
        settings = GenerationSettings(max_new_tokens=given.max_new_tokens)
        if given.check_prompts < 1:
            raise ExportError(f"check_prompts: {given.check_prompts}; at least one prompt checks the export")
        prompts = [e.prompt for e in read_split(given.dataset_uri, "test")[: given.check_prompts]]
        report = export_language_model(
            given.model.uri,
            exported.uri,
            prompts,
            model_name=given.model_name,
            merge_adapters=given.merge_adapters,
            settings=settings,
        )
        # Whole or not at all: a step killed while writing leaves no half manifest at the output.
        write_once(iter([report.manifest().encode()]), service.uri)
        exported.metadata.update(report.to_metadata())
        service.metadata.update(
            {"kind": "InferenceService", "name": given.model_name, "storageUri": report.served_uri()}
        )
        for check in report.checks:
            print(f"export check: {check['prompt']!r} -> {check['answer']!r}")
        if tracked is not None:
            log_export(tracked, exported.uri, {"huggingface": MODEL_DIR}, report.served_uri(), service.uri)
            logged = ""
            if report.merged or report.method == "full":
                # The published export, loaded as a server loads it.
                logged = log_transformers_model(tracked, *load_model(storage.join(exported.uri, MODEL_DIR)))
            else:
                log.warning(
                    "mlflow: a kept LoRA adapter is registered as the export's files; the transformers "
                    "flavor needs merged weights (merge_adapters)"
                )
            if register:
                version = register_export_step(tracked, given, source=logged)
    return (version,)
