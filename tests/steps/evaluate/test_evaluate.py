"""Evaluation: streaming scores against scikit-learn's, on real bundled data, and the quality gate."""

from __future__ import annotations

import numpy as np
import pytest

from kftrain.models import save_model
from kftrain.steps.evaluate import EvaluationError, evaluate_model, gate_metric, quality_gate
from kftrain.steps.evaluate.scores import (
    BinaryCurves,
    ClassificationScores,
    RegressionScores,
    class_scores,
    softmax,
)
from kftrain.steps.prep import prepare_dataset
from testbed.bundled import fit_linear, least_squares, table_source


def test_binary_scores_match_scikit_learn_while_streaming_in_small_batches(breast_cancer):
    import torch
    from sklearn import metrics as skm

    model_uri, dataset_uri, model = breast_cancer
    from kftrain.data.dataset import load_split

    x, y = load_split(dataset_uri, "test")
    with torch.no_grad():
        logits = model(torch.from_numpy(x)).numpy()
    p1 = torch.softmax(torch.from_numpy(logits), 1).numpy()[:, 1]
    result = evaluate_model(model_uri, dataset_uri, batch_rows=16)  # several batches: the scores accumulate
    assert result.task == "binary" and result.rows == len(y) > 100
    assert result.metrics["accuracy"] == pytest.approx(skm.accuracy_score(y, logits.argmax(1)))
    assert result.metrics["roc_auc"] == pytest.approx(skm.roc_auc_score(y, p1), abs=1e-3)
    assert result.metrics["pr_auc"] == pytest.approx(skm.average_precision_score(y, p1), abs=5e-3)
    assert result.metrics["log_loss"] == pytest.approx(skm.log_loss(y, p1), rel=1e-4)
    assert result.metrics["macro_f1"] == pytest.approx(skm.f1_score(y, logits.argmax(1), average="macro"))
    assert result.confusion == skm.confusion_matrix(y, logits.argmax(1)).tolist()
    assert result.metrics["roc_auc"] > 0.98
    roc = result.roc
    assert roc is not None and roc.x[0] == 0 and roc.x[-1] == 1 and roc.y[-1] == 1 and len(roc.x) <= 202
    assert all(a <= b for a, b in zip(roc.x, roc.x[1:], strict=False))
    points = result.confidence_metrics
    assert {"confidenceThreshold", "recall", "falsePositiveRate", "precision"} == set(points[0])


def test_multiclass_labels_of_any_type(tmp_path):
    from sklearn.datasets import load_digits
    from torch import nn

    data = load_digits()
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])
    source = table_source(tmp_path, "digits", data.data, names[data.target], [f"p{i}" for i in range(64)])
    prepare_dataset(str(tmp_path / "ds"), source=source, label_column="target")
    from kftrain.data.dataset import load_split, read_info

    info = read_info(str(tmp_path / "ds"))
    assert info.classes == sorted(names.tolist())
    x, y = load_split(str(tmp_path / "ds"), "train")
    model = fit_linear(x, y, 10, nn.CrossEntropyLoss(), epochs=200)
    save_model(model, str(tmp_path / "m"), example_input=x[:2], format="onnx")
    result = evaluate_model(str(tmp_path / "m"), str(tmp_path / "ds"), batch_rows=50)
    assert result.task == "multiclass" and result.classes == info.classes
    assert result.metrics["accuracy"] > 0.9 and "roc_auc" not in result.metrics
    assert np.array(result.confusion).sum() == result.rows


def test_regression_scores_match_scikit_learn(tmp_path):
    import torch
    from sklearn import metrics as skm
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    source = table_source(tmp_path, "diabetes", data.data, data.target, list(data.feature_names))
    prepare_dataset(str(tmp_path / "ds"), source=source, label_column="target", task="regression")
    from kftrain.data.dataset import load_split

    x, y = load_split(str(tmp_path / "ds"), "train")
    model = least_squares(x, y)
    save_model(model, str(tmp_path / "m"), example_input=x[:2], task="regression")
    xt, yt = load_split(str(tmp_path / "ds"), "test")
    with torch.no_grad():
        pred = model(torch.from_numpy(xt)).numpy()[:, 0]
    result = evaluate_model(str(tmp_path / "m"), str(tmp_path / "ds"), batch_rows=7)
    assert result.task == "regression" and result.rows == len(yt)
    assert result.metrics["mae"] == pytest.approx(skm.mean_absolute_error(yt, pred), rel=1e-5)
    assert result.metrics["rmse"] == pytest.approx(np.sqrt(skm.mean_squared_error(yt, pred)), rel=1e-5)
    assert result.metrics["r2"] == pytest.approx(skm.r2_score(yt, pred), abs=1e-6)
    assert 0.3 < result.metrics["r2"] < 0.7  # a linear model on diabetes explains about half the variance
    assert len(result.residual_sample) == len(yt)


def test_a_model_that_does_not_fit_the_dataset_is_refused_before_predicting(breast_cancer, tmp_path):
    from torch import nn

    _, dataset_uri, _ = breast_cancer
    save_model(nn.Linear(4, 2), str(tmp_path / "narrow"), example_input=np.zeros((1, 4), np.float32))
    with pytest.raises(EvaluationError, match="the model takes 4 features but the dataset has 30"):
        evaluate_model(str(tmp_path / "narrow"), dataset_uri)
    save_model(nn.Linear(30, 3), str(tmp_path / "wide"))
    with pytest.raises(EvaluationError, match="outputs 3 score\\(s\\) per row but the dataset has 2 classes"):
        evaluate_model(str(tmp_path / "wide"), dataset_uri)
    save_model(nn.Linear(30, 1), str(tmp_path / "reg"), task="regression")
    with pytest.raises(EvaluationError, match=r"says task 'regression' but the dataset .* is classification"):
        evaluate_model(str(tmp_path / "reg"), dataset_uri)


def test_memory_stays_bounded_by_the_batch(breast_cancer, monkeypatch):
    import kftrain.steps.evaluate.evaluation as evaluation

    seen: list[int] = []
    real = evaluation.predictor_for

    def spy(spec):
        predict = real(spec)
        return lambda x: seen.append(len(x)) or predict(x)

    monkeypatch.setattr(evaluation, "predictor_for", spy)
    model_uri, dataset_uri, _ = breast_cancer
    result = evaluate_model(model_uri, dataset_uri, batch_rows=10)
    assert max(seen) <= 10 and sum(seen) == result.rows > 100


def test_one_column_binary_outputs_and_probabilities():
    batch = class_scores(np.array([[0.0], [2.0]]), 2, "logits")
    np.testing.assert_allclose(batch.probabilities[:, 1], [0.5, 1 / (1 + np.exp(-2))])
    assert batch.predicted.tolist() == [0, 1]  # a positive logit of 0 is even odds: the lower class id
    batch = class_scores(np.array([[0.2, 0.8], [0.9, 0.1]]), 2, "probabilities")
    np.testing.assert_allclose(batch.positive_logit, [np.log(4), np.log(1 / 9)])
    assert batch.predicted.tolist() == [1, 0]
    assert class_scores(np.array([[0.1, 0.3, 0.6]]), 3, "probabilities").positive_logit is None
    with pytest.raises(EvaluationError, match="outputs 3 score"):
        class_scores(np.zeros((2, 3)), 2, "logits")


@pytest.mark.parametrize(
    "logits",
    [
        np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=np.float32),
        np.array([[1000.0, -1000.0], [-1e30, 1e30]]),  # no overflow: each row shifted by its max
        np.array([[5.0]]),  # one class
        np.random.default_rng(0).normal(size=(1000, 10)).astype(np.float32),
    ],
)
def test_softmax_is_the_row_wise_softmax_in_the_logits_precision(logits):
    z = logits.astype(np.float64)
    expected = np.exp(z - z.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    probs = softmax(logits)
    assert probs.shape == logits.shape and probs.dtype == logits.dtype  # float32 stays float32, float64 float64
    tolerance = 1e-6 if logits.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(probs, expected, rtol=tolerance, atol=tolerance * 1e-3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=tolerance)


def test_the_prediction_is_the_highest_score_even_where_float32_probabilities_tie():
    # Two scores one float32 step apart near 0: their float32 probabilities round to one value.
    low = np.float32(1e-3)
    logits = np.array([[low, np.nextafter(low, np.float32(1))]], dtype=np.float32)
    batch = class_scores(logits, 2, "logits")
    assert batch.probabilities[0, 0] == batch.probabilities[0, 1]  # argmax of these would say class 0
    assert batch.predicted.tolist() == [1]
    scores = ClassificationScores(2)
    scores.update(np.array([1]), batch)
    assert scores.confusion.tolist() == [[0, 0], [0, 1]]


def test_softmax_of_integer_or_half_logits_is_float32_at_least():
    assert softmax(np.array([[1, 2]], dtype=np.int64)).dtype == np.float64  # numpy's own promotion of int64
    assert softmax(np.array([[1, 2]], dtype=np.float16)).dtype == np.float32


def test_accumulators_agree_with_one_pass_computation():
    from sklearn import metrics as skm

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 5000)
    z = rng.normal(size=5000) + 1.5 * y
    curves = BinaryCurves()
    for chunk in np.array_split(np.arange(5000), 7):
        curves.update(y[chunk], z[chunk])
    assert curves.roc()[1] == pytest.approx(skm.roc_auc_score(y, z), abs=1e-3)
    truth, pred = rng.normal(size=3000) * 10 + 50, rng.normal(size=3000) * 10 + 50
    reg = RegressionScores()
    for chunk in np.array_split(np.arange(3000), 5):
        reg.update(truth[chunk], pred[chunk])
    assert reg.metrics()["r2"] == pytest.approx(skm.r2_score(truth, pred), abs=1e-9)
    assert len(reg.sample) == RegressionScores.SAMPLE
    scores = ClassificationScores(3)
    scores.update(np.array([0, 1, 2, 2]), class_scores(np.eye(3)[[0, 2, 2, 1]], 3, "probabilities"))
    assert scores.confusion.tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 1]]


@pytest.mark.parametrize(
    ("metric", "threshold", "baseline", "passed", "reason"),
    [
        ("accuracy", 0.9, None, True, "accuracy 0.9500 >= 0.9"),
        ("accuracy", 0.96, None, False, "accuracy 0.9500 fails >= 0.96"),
        ("rmse", 50.0, None, True, "rmse 40.0000 <= 50.0"),
        ("rmse", 30.0, None, False, "rmse 40.0000 fails <= 30.0"),
        ("accuracy", 0.9, {"accuracy": 0.94, "rmse": 1}, True, "accuracy 0.9500 >= 0.9 and >= baseline 0.9400"),
        ("accuracy", 0.9, {"accuracy": 0.97, "rmse": 1}, False, "accuracy 0.9500 is worse than the baseline's 0.9700"),
        ("rmse", 50.0, {"accuracy": 1, "rmse": 30.0}, False, "rmse 40.0000 is worse than the baseline's 30.0000"),
        ("roc_auc", 0.5, None, False, "roc_auc is undefined on this split"),
    ],
)
def test_quality_gate(metric, threshold, baseline, passed, reason):
    scores = {"accuracy": 0.95, "rmse": 40.0, "roc_auc": float("nan")}
    decision = quality_gate(scores, metric, threshold, baseline)
    assert (decision.passed, decision.reason) == (passed, reason)


def test_gate_metric_is_checked_against_the_task():
    assert gate_metric("regression", "") == "r2" and gate_metric("binary", "") == "accuracy"
    with pytest.raises(EvaluationError, match="gate_metric: 'roc_auc' is not a multiclass metric"):
        gate_metric("multiclass", "roc_auc")


def _model_of_one_feature(tmp_path, name, weights, bias, classes):
    """A linear model of one feature whose output columns are ``classes`` (model.json), by their names."""
    import torch
    from torch import nn

    model = nn.Linear(1, len(weights))
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[w] for w in weights], dtype=torch.float32))
        model.bias.copy_(torch.tensor(bias, dtype=torch.float32))
    save_model(model, str(tmp_path / name), example_input=np.zeros((1, 1), np.float32), classes=classes)
    return str(tmp_path / name)


# Each case: the model's classes (model.json, the label of each output column), its weights and biases on the one
# feature x, the dataset's two labels (x is 0 for the first, 1 for the second); the accuracy by name, or the error.
CLASS_CASES = {
    # the same classes in another order: column 0 is b's score, high where x is 1, where the label is b
    "the same classes in another order": (["b", "a"], [10, -10], [-5, 5], ("a", "b"), 1.0),
    # one column, the score of model.json's second class (a), high where x is 0, where the label is a
    "one column for the other positive class": (["b", "a"], [-10], [5], ("a", "b"), 1.0),
    "the same classes in the same order": (["a", "b"], [-10, 10], [5, -5], ("a", "b"), 1.0),
    # classes [a, b] scored on [b, c]: by position every row would be right, by name every one is wrong
    "other classes": (
        ["a", "b"],
        [-10, 10],
        [5, -5],
        ("b", "c"),
        r"m: model.json's classes \['a', 'b'\] are not the dataset's \['b', 'c'\]",
    ),
    "a class named twice": (["a", "a"], [-10, 10], [5, -5], ("a", "b"), r"m: model.json names class 'a' twice"),
}


@pytest.mark.parametrize("case", CLASS_CASES)
def test_classes_are_matched_by_name_not_by_position(case, tmp_path):
    classes, weights, bias, labels, expected = CLASS_CASES[case]
    x = np.repeat([0.0, 1.0], 50)[:, None]
    y = np.where(x[:, 0] == 0, labels[0], labels[1])
    prepare_dataset(str(tmp_path / "ds"), source=table_source(tmp_path, "t", x, y, ["x"]), label_column="target")
    model_uri = _model_of_one_feature(tmp_path, "m", weights, bias, classes)
    if isinstance(expected, str):
        with pytest.raises(EvaluationError, match=expected) as caught:
            evaluate_model(model_uri, str(tmp_path / "ds"))
        assert "\n" not in str(caught.value)
        return
    result = evaluate_model(model_uri, str(tmp_path / "ds"))
    assert result.metrics["accuracy"] == expected and result.classes == list(labels)
