"""Score a model of any accepted format on one split of a prepared dataset, streaming the split in batches.

The task comes from the dataset (and must agree with the model's ``model.json`` when it says one):
binary classification (accuracy, macro F1, log loss, ROC AUC, average precision, both curves), multi-class
(accuracy, macro F1, log loss, the confusion matrix) or regression (MAE, RMSE, R², a residual sample). Class
labels are the dataset's, of any type. Memory holds one batch and the accumulators, never the split.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from kftrain.extras import requires

with requires("data", "evaluation"):
    import numpy as np

from kftrain.data.dataset import BATCH_ROWS, REGRESSION, TABLE, DatasetInfo, iter_batches, read_info
from kftrain.data.read_ahead import read_ahead
from kftrain.errors import EvaluationError
from kftrain.models import ModelError, ModelSpec, describe_model, predictor_for
from kftrain.models.history import read_history
from kftrain.steps.evaluate import gate
from kftrain.steps.evaluate.scores import (
    BinaryCurves,
    ClassificationScores,
    Curve,
    RegressionScores,
    class_scores,
)

log = logging.getLogger(__name__)


@dataclass
class Evaluation:
    """Everything the reports and the gate need about one model on one split."""

    task: str  # binary, multiclass or regression
    split: str
    rows: int
    model_format: str
    framework: str
    metrics: dict[str, float]
    classes: list[str] = field(default_factory=list)  # display labels, by class id
    confusion: list[list[int]] = field(default_factory=list)
    per_class: list[dict[str, float]] = field(default_factory=list)
    roc: Curve | None = None
    precision_recall: Curve | None = None
    confidence_metrics: list[dict[str, float]] = field(default_factory=list)  # KFP's ROC points, with precision
    residual_sample: list[tuple[float, float]] = field(default_factory=list)  # (prediction, truth)
    history: list[dict[str, float]] = field(default_factory=list)


def task_of(info: DatasetInfo) -> str:
    if info.task == REGRESSION:
        return gate.REGRESSION
    return gate.BINARY if info.num_classes == 2 else gate.MULTICLASS


def check_compatible(spec: ModelSpec, info: DatasetInfo, dataset_uri: str) -> list[int] | None:
    """Refuse, before predicting, a model that cannot be scored on this dataset, saying why; the model's output
    column of each dataset class (:func:`columns_by_name`)."""
    if info.kind != TABLE:
        raise EvaluationError(f"{dataset_uri}: a {info.kind} dataset lists files; evaluation needs feature columns")
    if spec.task and spec.task != info.task:
        raise EvaluationError(
            f"{spec.uri}: model.json says task {spec.task!r} but the dataset {dataset_uri} is {info.task}"
        )
    if spec.inputs and len(spec.inputs[0].shape) == 2 and spec.inputs[0].shape[1] not in (-1, info.num_features):
        raise EvaluationError(
            f"{spec.uri}: the model takes {spec.inputs[0].shape[1]} features but the dataset has "
            f"{info.num_features} ({', '.join(info.feature_names[:5])}{', ...' if info.num_features > 5 else ''})"
        )
    return columns_by_name(spec, info)


def columns_by_name(spec: ModelSpec, info: DatasetInfo) -> list[int] | None:
    """The model's output column of each of the dataset's classes, matched by name where ``model.json`` names the
    classes (the label of each output column): the same classes in another order are scored by name; other classes
    are an error naming both lists, before anything is scored or published. None: the columns are the dataset's."""
    if spec.classes is None or info.task == REGRESSION:
        return None
    model = [str(c) for c in spec.classes]
    column: dict[str, int] = {}
    for i, name in enumerate(model):
        if column.setdefault(name, i) != i:
            raise EvaluationError(f"{spec.uri}: model.json names class {name!r} twice: each output column is one class")
    dataset = [str(c) for c in info.classes]
    if sorted(model) != sorted(dataset):
        raise EvaluationError(
            f"{spec.uri}: model.json's classes {_listed(model)} are not the dataset's {_listed(dataset)}: scored by "
            "position every prediction would be read as another class; evaluate it on data of its own classes"
        )
    order = [column[c] for c in dataset]
    if order == list(range(len(order))):
        return None
    log.info("model.json's classes %s are the dataset's %s in another order: matched by name", model, dataset)
    return order


def _listed(classes: list[str], shown: int = 10) -> str:
    return str(classes[:shown])[:-1] + (", ...]" if len(classes) > shown else "]")


def by_name(scores: np.ndarray, order: list[int] | None, kind: str) -> np.ndarray:
    """The model's ``scores`` with the dataset's class ``i`` in column ``i`` (``order``: :func:`columns_by_name`).
    One column (two classes) is the score of the model's second class: where that is the dataset's first, the
    column is turned into the other class's (a logit negated, a probability p as 1 - p)."""
    if order is None:
        return scores
    if scores.shape[1] == 1 and len(order) == 2:
        return -scores if kind == "logits" else 1.0 - scores
    if scores.shape[1] != len(order):
        return scores  # the wrong number of columns: class_scores names it
    return scores[:, order]


def evaluate_model(
    model_uri: str, dataset_uri: str, split: str = "test", *, batch_rows: int = BATCH_ROWS
) -> Evaluation:
    """Score the model at ``model_uri`` on ``split`` of the dataset at ``dataset_uri``."""
    spec = describe_model(model_uri)
    info = read_info(dataset_uri)
    order = check_compatible(spec, info, dataset_uri)
    task = task_of(info)
    predict = predictor_for(spec)
    classification = ClassificationScores(info.num_classes) if task != gate.REGRESSION else None
    curves = BinaryCurves() if task == gate.BINARY else None
    regression = RegressionScores() if task == gate.REGRESSION else None
    # The next batch is read while the model scores this one.
    for x, y in read_ahead(iter_batches(dataset_uri, split, batch_rows=batch_rows, info=info)):
        scores = _predict(predict, x, spec)
        if regression is not None:
            if scores.shape[1] != 1:
                raise EvaluationError(
                    f"{spec.uri}: a regressor returns one column; the model returned {scores.shape[1]}"
                )
            regression.update(y, scores[:, 0])
            continue
        assert classification is not None
        batch = class_scores(by_name(scores, order, spec.scores), info.num_classes, spec.scores)
        classification.update(y, batch)
        if curves is not None and batch.positive_logit is not None:
            curves.update(y, batch.positive_logit)
    evaluation = Evaluation(
        task=task,
        split=split,
        rows=0,
        model_format=spec.format,
        framework=spec.framework,
        metrics={},
        history=read_history(model_uri),
    )
    if regression is not None:
        evaluation.rows = regression.rows
        evaluation.metrics = regression.metrics()
        evaluation.residual_sample = [(float(p), float(t)) for p, t in regression.sample]
    else:
        assert classification is not None
        evaluation.rows = classification.rows
        evaluation.metrics = classification.metrics()
        evaluation.classes = [str(c) for c in info.classes]
        evaluation.confusion = classification.confusion.tolist()
        evaluation.per_class = classification.per_class()
        if curves is not None:
            evaluation.roc, evaluation.metrics["roc_auc"] = curves.roc()
            evaluation.precision_recall, evaluation.metrics["pr_auc"] = curves.precision_recall()
            evaluation.confidence_metrics = curves.confidence_metrics()
    if not evaluation.rows:
        raise EvaluationError(f"{dataset_uri}: the {split} split has no rows")
    shown = ", ".join(f"{k} {v:.4f}" for k, v in evaluation.metrics.items())
    log.info("%s model (%s) on %d %s rows: %s", spec.format, task, evaluation.rows, split, shown)
    return evaluation


def _predict(predict: Any, x: np.ndarray, spec: ModelSpec) -> np.ndarray:
    """The model's scores for a batch; a failure inside the framework is reported with the shapes involved, and
    scores that are not finite numbers (NaN, infinity) are an error naming the model: nothing can be scored on
    them (a NaN has no class, no loss)."""
    try:
        scores = np.asarray(predict(x))
    except (EvaluationError, ModelError):  # ModelError: an output the contract refuses (models.predictors)
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise EvaluationError(
            f"{spec.location}: the model failed on a batch of shape {list(x.shape)} (rows x features): {first}"
        ) from exc
    if not np.isfinite(scores).all():  # one pass over the whole batch; the rows are found only when one is bad
        bad = np.flatnonzero(~np.isfinite(scores).reshape(len(scores), -1).all(axis=1))
        raise EvaluationError(
            f"{spec.location}: the model output NaN or infinity for {len(bad)} of {len(scores)} rows of a batch "
            f"(the first at row {int(bad[0])} of it): its scores cannot be evaluated; check the model (a diverged "
            "training, a log of 0)"
        )
    return scores
