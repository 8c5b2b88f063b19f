"""The rows several steps' input tables share, each declared once: the same input (name, meaning, checks) wherever
a step takes it. A table writes ``gate_threshold: float = rows.gate_threshold(0.9)``; a row whose text depends on
the step takes that part as an argument. The launch step's tracking URI is :func:`mlflow_tracking_uri` too.
"""

from __future__ import annotations

from typing import Any

from kftrain.inputs import REQUIRED, Output, artifact, component_input

DATASET_BY_URI = (
    "It is read by URI, only the split it needs and in batches: as an input artifact, KFP's backend would copy the "
    "whole dataset into the pod before the step starts."
)
TRAINED_MODEL = "The trained model (a folder following the model contract)."
FINETUNED_MODEL = (
    "The fine-tuned model: the training program's model folder (kftrain-llm.json, the tokenizer, the weights or a "
    "LoRA adapter)."
)
# KFP 2.17 gives a step its task's MLflow run only with its plugin's injectUserEnvVars on, off by default
# (kftrain.tracking.env): without it, this input is where the step logs. No credential travels in it.
TRACKING_URI_DOC = (
    "MLflow server where the step makes a run of its own (nested under the pipeline's; the launch step's replicas "
    "log into it) when KFP gives the step no run (its MLflow plugin's injectUserEnvVars off, the default); empty: "
    "only the run KFP gives, if any. Credentials by MLFLOW_TRACKING_TOKEN (or _USERNAME/_PASSWORD) from a Secret, "
    "never in the URI."
)


def mlflow_tracking_uri() -> Any:
    """Where a step logs when KFP gives it no MLflow run (checked by :func:`kftrain.tracking.env.tracking_uri`)."""
    return component_input("", TRACKING_URI_DOC)


def model(doc: str) -> Any:
    """The model a step reads (:data:`TRAINED_MODEL` or :data:`FINETUNED_MODEL`)."""
    return artifact("dsl.Input[dsl.Model]", doc)


def dataset_uri(what: str) -> Any:
    """The prepared dataset a step reads by URI; ``what``: which dataset, and what the step reads of it."""
    return component_input(REQUIRED, f"URI of the {what} {DATASET_BY_URI}")


def split() -> Any:
    return component_input("test", "Split to evaluate on.")


def gate_metric(which: str) -> Any:
    """The metric the quality gate checks; ``which``: the metrics it may be, and the default."""
    return component_input("", f"Metric the gate checks: {which}")


def gate_threshold(default: float) -> Any:
    return component_input(default, "Value the gate metric must reach (at most, for one that passes at or below it).")


def max_new_tokens(use: str) -> Any:
    """The generation config's length of an answer, the same for evaluation and export (``use``: what it is for)."""
    return component_input(32, f"Generation config: the most tokens of a greedy answer; {use}.")


def scores(what: str) -> Any:
    """An evaluation's scalar metrics output; ``what``: which."""
    return artifact("dsl.Output[dsl.Metrics]", f"Scalar metrics shown in the run's UI: {what}.")


def markdown_report(what: str) -> Any:
    return artifact("dsl.Output[dsl.Markdown]", f"A Markdown report: {what}.")


def html_report(what: str) -> Any:
    return artifact("dsl.Output[dsl.HTML]", f"An HTML report: {what}.")


def exported(layout: str) -> Any:
    """An export's output; ``layout``: what it holds."""
    return artifact("dsl.Output[dsl.Model]", f"The export: {layout}.")


def inference_service(serving: str) -> Any:
    """The KServe manifest an export writes; ``serving``: what it serves, and how."""
    return artifact("dsl.Output[dsl.Artifact]", f"A KServe InferenceService (YAML) serving {serving}.")


def model_name() -> Any:
    return component_input("model", "Name of the served model and of its InferenceService (a Kubernetes name).")


def register_model() -> Any:
    return component_input(
        "",
        "Name of the MLflow registered model the export becomes a new version of (created if missing), its source "
        "the export's URI, tagged with the pipeline run, `evaluation_metrics` and `gate_passed`; empty: not "
        "registered. Needs MLflow tracking (the run KFP gives the step, or mlflow_tracking_uri).",
    )


def evaluation_metrics() -> Any:
    return artifact(
        "Optional[dsl.Input[dsl.Metrics]]",
        "The evaluation's Metrics, tagged on the registered version (optional).",
        default=None,
    )


def gate_passed() -> Any:
    return component_input(None, "The quality gate's verdict, tagged on the registered version (optional).")


def prepared(what: str) -> Any:
    """A prep step's dataset output; ``what``: its files."""
    return artifact("dsl.Output[dsl.Dataset]", f"The prepared dataset: {what}.")


def file_format(kinds: str) -> Any:
    return component_input("auto", f"auto (from the file names), {kinds}.")


def split_seed(how: str) -> Any:
    return component_input(42, f"Seed of the split ({how}).")


def test_fraction(default: float, of: str) -> Any:
    return component_input(default, f"Share of the {of} held out for the final test (evaluation, export's checks).")


def dataset_uri_output(readers: str) -> Output:
    """A prep step's ``dataset_uri`` output; ``readers``: the steps that read the dataset by URI."""
    return Output(
        "dataset_uri",
        str,
        f"Where the dataset was published: steps that read it by URI ({readers}) take this rather than the "
        "artifact, which KFP's backend copies whole into a step's pod before the step starts.",
    )
