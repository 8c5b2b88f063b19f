"""What the language-model steps log into their task's MLflow run (each request best-effort:
:mod:`kftrain.tracking.client`).

Evaluation: every metric (the base model's as ``base_<name>``), tags ``kftrain.gate.*`` and
``kftrain.evaluation.*`` (split, task metric, the generation config), and under ``evaluation/`` the reports and
``generations.json`` (prompt, response, answer, score; the base's answer beside).

Export: the merged model, reloaded from the export, saved with MLflow's ``transformers`` flavor (a dictionary of model
and tokenizer, task ``text-generation``: mlflow/mlflow@v3.17.2:mlflow/transformers/__init__.py:318-324; its local
checkpoint form fails on Transformers 5, flavor_config.py:213) as the run's ``model`` artifact, which registration
makes a version of. Saved offline: MLflow asks the Hub for a model card and a license by the model's name
(__init__.py:758-759), here a local path that must not leave the machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import logging
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kftrain.tracking.calls import TrackingError, describe
from kftrain.tracking.client import TaskRun
from kftrain.tracking.evaluation import FOLDER, log_verdict

log = logging.getLogger(__name__)
MODEL_ARTIFACT = "model"
REQUIREMENTS = ("transformers", "torch", "safetensors", "tokenizers", "accelerate")


def log_language_evaluation(
    run: TaskRun, evaluation: Any, decision: Any, *, base: Any = None, markdown: str = "", html: str = ""
) -> None:
    """Log ``evaluation`` (a :class:`kftrain.llm.evaluate.LanguageEvaluation`), its base's and the gate's
    ``decision``."""
    scores = {name: value for name, value in evaluation.metrics.items() if math.isfinite(value)}
    scores["rows"] = float(evaluation.rows)
    if base is not None:
        scores.update({f"base_{k}": v for k, v in base.metrics.items() if math.isfinite(v)})
    tags = {
        "kftrain.evaluation.split": evaluation.split,
        "kftrain.evaluation.task": "language",
        "kftrain.evaluation.task_metric": evaluation.task_metric,
        "kftrain.evaluation.generation": evaluation.settings.as_dict(),
    }
    log_verdict(run, scores, tags, decision, markdown, html)
    rows = [dataclasses.asdict(g) for g in evaluation.generations]
    if base is not None:
        for row, before in zip(rows, base.generations, strict=False):
            row["base_answer"] = before.answer
    run.log_json(rows, f"{FOLDER}/generations.json")


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """Hugging Face Hub's offline mode for the block: every request to the Hub is refused before it is sent
    (huggingface/huggingface_hub@v2.5.0:src/huggingface_hub/constants.py:194, read at import;
    utils/_http.py:294, checked on each request), whatever was imported before."""
    from huggingface_hub import constants

    was, env = constants.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE")
    constants.HF_HUB_OFFLINE, os.environ["HF_HUB_OFFLINE"] = True, "1"
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = was
        if env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = env


def log_transformers_model(run: TaskRun, model: Any, tokenizer: Any) -> str:
    """Save ``model`` and ``tokenizer`` with MLflow's transformers flavor and log them as the run's
    :data:`MODEL_ARTIFACT`; its ``runs:/`` URI, or "" (and a warning) when that failed: the export stays done."""
    try:
        import mlflow.transformers
    except ImportError as exc:
        log.warning("mlflow: the transformers flavor cannot be imported (%s); the model is not logged", describe(exc))
        return ""
    requirements = [f"{name}=={importlib.metadata.version(name)}" for name in REQUIREMENTS]
    with tempfile.TemporaryDirectory(prefix="kftrain-mlflow-") as tmp:
        saved = Path(tmp) / MODEL_ARTIFACT
        try:
            with hub_offline():
                mlflow.transformers.save_model(
                    {"model": model, "tokenizer": tokenizer},
                    str(saved),
                    task="text-generation",
                    pip_requirements=requirements,
                )
        except Exception as exc:  # MLflow's own failure: the export is done, only its logging is lost
            log.warning("mlflow: the model could not be saved with the transformers flavor: %s", describe(exc))
            return ""
        try:
            run.call(f"log {MODEL_ARTIFACT}/", "log_artifacts", run.run_id, str(saved), MODEL_ARTIFACT)
        except TrackingError as exc:
            log.warning("%s; the model is not logged", exc)
            return ""
    log.info("logged the model with MLflow's transformers flavor as runs:/%s/%s", run.run_id, MODEL_ARTIFACT)
    return f"runs:/{run.run_id}/{MODEL_ARTIFACT}"
