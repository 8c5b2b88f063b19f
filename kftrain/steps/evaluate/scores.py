"""Streaming scores: each accumulator takes one batch at a time and keeps a bounded state, whatever the split's size.

:class:`ClassificationScores` (confusion matrix, log loss); :class:`BinaryCurves` (ROC and precision-recall from
histograms of the positive logit, bins of 0.01 on [-20, 20]: an AUC moves by well under 1e-3); :class:`RegressionScores`
(MAE, RMSE, R² from running sums, and a fixed-size sample for the residual plot); :func:`class_scores` reads a
classifier's outputs (logits or probabilities) as probabilities, the predicted class and the positive logit.
"""

from __future__ import annotations

from dataclasses import dataclass

from kftrain.extras import requires

with requires("data", "evaluation"):
    import numpy as np

from kftrain.errors import EvaluationError

EPSILON = 1e-15  # probabilities are clipped to [EPSILON, 1 - EPSILON] for the log loss and the logit


@dataclass(frozen=True)
class ClassScores:
    """A batch of a classifier's outputs, read: each row's class probabilities, its predicted class and, for two
    classes, the positive class's logit (the curves' score)."""

    probabilities: np.ndarray  # [rows, num_classes]
    predicted: np.ndarray  # [rows] class ids
    positive_logit: np.ndarray | None  # [rows], two classes only


def class_scores(scores: np.ndarray, num_classes: int, kind: str) -> ClassScores:
    """Read a classifier's outputs: logits or probabilities (``kind``), one column per class, or for two classes
    one column, the positive class's.

    The predicted class is the highest score, as the model (and a server of it) ranks them, where there is one score
    per class: a float32 softmax can round two close scores to one probability, which would hand the row to the
    lower class id."""
    scores = np.asarray(scores)
    columns = scores.shape[1]
    if columns == 1 and num_classes == 2:
        scores = np.asarray(scores, dtype=np.float64)
        if kind == "logits":
            z = scores[:, 0]
            p1 = 1.0 / (1.0 + np.exp(-np.clip(z, -500, 500)))
        else:
            p1 = np.clip(scores[:, 0], EPSILON, 1 - EPSILON)
            z = np.log(p1) - np.log1p(-p1)
        probs = np.column_stack([1 - p1, p1])
        return ClassScores(probs, probs.argmax(axis=1), z)
    if columns != num_classes:
        raise EvaluationError(
            f"the model outputs {columns} score(s) per row but the dataset has {num_classes} classes: a classifier "
            "returns one score per class (or, for two classes, one column for the positive class)"
        )
    logit: np.ndarray | None
    if kind == "logits":
        probs = softmax(scores)
        logit = scores[:, 1].astype(np.float64) - scores[:, 0] if num_classes == 2 else None
    else:
        probs = np.clip(np.asarray(scores, dtype=np.float64), 0.0, 1.0)
        clipped = np.clip(probs, EPSILON, 1.0)
        logit = np.log(clipped[:, 1]) - np.log(clipped[:, 0]) if num_classes == 2 else None
    return ClassScores(probs, scores.argmax(axis=1), logit)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Each row's softmax, in the logits' own precision (float32 at least: a float32 model's probabilities are
    float32, as its framework's softmax gives them; float64 logits stay float64), as a ``[rows, classes]`` view of
    a classes-major array.

    A row holds a few classes, so numpy's reductions along rows (``axis=1``) step through short strided rows; the
    transposed copy puts each class in one contiguous run, and the max, exp, sum and division over classes become
    element-wise operations over whole runs: a third of the time of the row-wise form on 65,536 x 10 logits."""
    logits = np.asarray(logits)
    by_class = np.array(logits.T, dtype=np.result_type(logits.dtype, np.float32), order="C")
    by_class -= by_class.max(axis=0)
    np.exp(by_class, out=by_class)
    by_class /= by_class.sum(axis=0)
    return by_class.T


class ClassificationScores:
    """Confusion matrix (rows: truth, columns: prediction) and summed log loss over every batch seen."""

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.confusion = np.zeros((num_classes, num_classes), dtype=np.int64)
        self.log_loss_sum = 0.0

    def update(self, truth: np.ndarray, batch: ClassScores) -> None:
        k = self.num_classes
        truth = truth.astype(np.int64)
        predicted, probs = batch.predicted, batch.probabilities
        self.confusion += np.bincount(truth * k + predicted, minlength=k * k).reshape(k, k)
        picked = probs[np.arange(len(truth)), truth]
        self.log_loss_sum -= float(np.log(np.clip(picked, EPSILON, 1.0)).sum(dtype=np.float64))

    @property
    def rows(self) -> int:
        return int(self.confusion.sum())

    def per_class(self) -> list[dict[str, float]]:
        """Precision, recall, F1 and support of each class id."""
        out = []
        for i in range(self.num_classes):
            tp = float(self.confusion[i, i])
            predicted, actual = float(self.confusion[:, i].sum()), float(self.confusion[i, :].sum())
            precision = tp / predicted if predicted else 0.0
            recall = tp / actual if actual else 0.0
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            out.append({"precision": precision, "recall": recall, "f1": f1, "support": actual})
        return out

    def metrics(self) -> dict[str, float]:
        rows = self.rows
        if not rows:
            return {"accuracy": float("nan"), "macro_f1": float("nan"), "log_loss": float("nan")}
        return {
            "accuracy": float(np.trace(self.confusion)) / rows,
            "macro_f1": float(np.mean([c["f1"] for c in self.per_class()])),
            "log_loss": self.log_loss_sum / rows,
        }


@dataclass
class Curve:
    """Points of a curve, and the probability threshold of each (predict positive when p >= threshold)."""

    x: list[float]
    y: list[float]
    thresholds: list[float]


class BinaryCurves:
    """ROC and precision-recall curves of a binary classifier, from logit histograms of each class."""

    LIMIT = 20.0
    BINS = 4000

    def __init__(self) -> None:
        self.positives = np.zeros(self.BINS, dtype=np.int64)
        self.negatives = np.zeros(self.BINS, dtype=np.int64)

    def update(self, truth: np.ndarray, logit: np.ndarray) -> None:
        scaled = (np.clip(logit, -self.LIMIT, self.LIMIT) + self.LIMIT) / (2 * self.LIMIT) * self.BINS
        bins = np.minimum(scaled.astype(np.int64), self.BINS - 1)
        positive = truth.astype(bool)
        self.positives += np.bincount(bins[positive], minlength=self.BINS)
        self.negatives += np.bincount(bins[~positive], minlength=self.BINS)

    def _cumulative(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """True and false positives when the threshold is each bin's lower edge, from the highest bin down."""
        tp = np.cumsum(self.positives[::-1])
        fp = np.cumsum(self.negatives[::-1])
        lower_edges = -self.LIMIT + np.arange(self.BINS)[::-1] * (2 * self.LIMIT / self.BINS)
        thresholds = 1.0 / (1.0 + np.exp(-lower_edges))
        thresholds[-1] = 0.0  # the lowest bin also holds every logit below -LIMIT
        return tp, fp, thresholds

    def roc(self) -> tuple[Curve, float]:
        """The ROC curve (x: false positive rate, y: true positive rate) and its area."""
        tp, fp, thresholds = self._cumulative()
        positives, negatives = tp[-1], fp[-1]
        if not positives or not negatives:
            return Curve([], [], []), float("nan")
        tpr = np.concatenate([[0.0], tp / positives])
        fpr = np.concatenate([[0.0], fp / negatives])
        area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
        return _curve(fpr, tpr, np.concatenate([[1.0], thresholds])), area

    def confidence_metrics(self) -> list[dict[str, float]]:
        """Points along the ROC curve as KFP's ClassificationMetrics records them, with the precision of each."""
        tp, fp, thresholds = self._cumulative()
        positives, negatives = tp[-1], fp[-1]
        if not positives or not negatives:
            return []
        tpr, fpr = tp / positives, fp / negatives
        predicted = tp + fp
        precision = np.divide(tp, predicted, out=np.ones(len(tp)), where=predicted > 0)
        return [
            {
                "confidenceThreshold": float(thresholds[i]),
                "recall": float(tpr[i]),
                "falsePositiveRate": float(fpr[i]),
                "precision": float(precision[i]),
            }
            for i in _thin(fpr, tpr)
        ]

    def precision_recall(self) -> tuple[Curve, float]:
        """The precision-recall curve (x: recall, y: precision) and the average precision."""
        tp, fp, thresholds = self._cumulative()
        positives = tp[-1]
        if not positives:
            return Curve([], [], []), float("nan")
        predicted = tp + fp
        seen = predicted > 0
        recall = tp[seen] / positives
        precision = tp[seen] / predicted[seen]
        average_precision = float(np.sum(np.diff(np.concatenate([[0.0], recall])) * precision))
        return _curve(recall, precision, thresholds[seen]), average_precision


def _thin(x: np.ndarray, y: np.ndarray, points: int = 200) -> np.ndarray:
    """Indices of at most about ``points`` points of a curve: where it moves, evenly along its length, ends kept."""
    moved = np.concatenate([[True], (np.diff(x) != 0) | (np.diff(y) != 0)])
    moved[-1] = True
    index = np.flatnonzero(moved)
    if len(index) > points:
        xs, ys = x[index], y[index]
        length = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(xs), np.diff(ys)))])
        marks = np.searchsorted(length, np.linspace(0.0, length[-1], points)).clip(0, len(index) - 1)
        index = index[np.unique(np.concatenate([marks, [0, len(index) - 1]]))]
    return index


def _curve(x: np.ndarray, y: np.ndarray, thresholds: np.ndarray) -> Curve:
    keep = _thin(x, y)
    return Curve([float(v) for v in x[keep]], [float(v) for v in y[keep]], [float(v) for v in thresholds[keep]])


class RegressionScores:
    """Running sums for MAE, RMSE and R², and a uniform sample of (prediction, truth) pairs for plots."""

    SAMPLE = 2000

    def __init__(self, seed: int = 0) -> None:
        self.rows = 0
        self.abs_error = 0.0
        self.squared_error = 0.0
        self.mean = 0.0  # Welford: the target's running mean and sum of squared deviations
        self.m2 = 0.0
        self.sample = np.zeros((0, 2))
        self._keys = np.zeros(0)
        self._rng = np.random.default_rng(seed)

    def update(self, truth: np.ndarray, prediction: np.ndarray) -> None:
        truth = truth.astype(np.float64)
        prediction = prediction.astype(np.float64)
        if not np.all(np.isfinite(prediction)):
            raise EvaluationError("the model predicted NaN or infinity for some rows")
        error = truth - prediction
        self.abs_error += float(np.abs(error).sum())
        self.squared_error += float((error**2).sum())
        n, batch_mean = len(truth), float(truth.mean()) if len(truth) else 0.0
        if n:
            batch_m2 = float(((truth - batch_mean) ** 2).sum())
            total = self.rows + n
            delta = batch_mean - self.mean
            self.m2 += batch_m2 + delta**2 * self.rows * n / total
            self.mean += delta * n / total
            self.rows = total
        # A uniform sample of every row seen: keep the SAMPLE rows with the smallest random keys.
        keys = self._rng.random(n)
        pairs = np.concatenate([self.sample, np.column_stack([prediction, truth])])
        all_keys = np.concatenate([self._keys, keys])
        keep = np.argsort(all_keys)[: self.SAMPLE]
        self.sample, self._keys = pairs[keep], all_keys[keep]

    def metrics(self) -> dict[str, float]:
        if not self.rows:
            return {"mae": float("nan"), "rmse": float("nan"), "r2": float("nan")}
        return {
            "mae": self.abs_error / self.rows,
            "rmse": float(np.sqrt(self.squared_error / self.rows)),
            "r2": 1.0 - self.squared_error / self.m2 if self.m2 > 0 else float("nan"),
        }
