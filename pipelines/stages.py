"""What the shipped training pipelines share, declared once: their parameters and their wiring.

Every shipped pipeline is data prep -> the trainers' flags -> a training launch -> evaluation -> a quality
gate -> export. What differs is the launch (which job kind, its replicas) and a few parameters;
:func:`training_pipeline` builds a pipeline from those. KFP reads a pipeline's parameters, defaults and
descriptions from its function's signature and docstring, so the function is given both, from the
:class:`Param` tables below, and calls the pipeline's own ``launch`` for the one step that differs.

Every pipeline parameter reaches a step as that step's own input, never inside a list or dict written
here: KFP's backend fills parameters into task inputs only (``tests/test_compile.py`` checks every
compiled file for placeholders inside constants).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from kfp import dsl, kubernetes

from kftrain_components.data.prepare_dataset.component import prepare_dataset
from kftrain_components.evaluation.evaluate_classifier.component import evaluate_classifier
from kftrain_components.export.export_model.component import export_model
from kftrain_components.training.trainer_args.component import trainer_args


@dataclass(frozen=True)
class Param:
    """A pipeline parameter: name, Python type (str, int, float, list, dict), default and description."""

    name: str
    type: type
    default: Any
    doc: str


DATA = (
    Param("source", str, "builtin:digits", "Dataset: builtin:digits or a Parquet/CSV URI with a label column."),
    Param("seed", int, 42, "Seed of the data split and of the model's initialization."),
)
QUALITY = (
    Param("min_accuracy", float, 0.9, "Test accuracy the model needs to be exported."),
    Param(
        "baseline_model_uri",
        str,
        "",
        "URI of the model in production (optional): export only if not worse on the test split.",
    ),
)
# Where and how the training job runs: what a platform engineer sets for a cluster.
PLATFORM = (
    Param("backend", str, "auto", "Where the job runs: auto (kubernetes when run by KFP in a pod), local, kubernetes."),
    Param("timeout_seconds", int, 3600, "Fail and delete the training job after this long."),
    Param("pending_timeout_seconds", int, 600, "Fail a job whose pods stay unschedulable this long (0: no limit)."),
    Param(
        "storage_secret",
        str,
        "mlpipeline-minio-artifact",
        "Secret with the object store's accesskey/secretkey, given to every step and replica (optional).",
    ),
    Param("service_account", str, "", "Service account of the training pods; empty: the namespace's default."),
    Param("queue_name", str, "", "Kueue LocalQueue that admits the training job; empty: none."),
    Param("priority_class", str, "", "PriorityClass of the training pods; empty: none."),
    Param("node_selector", dict, {}, "Node labels the training pods must match."),
    Param("tolerations", list, [], "Kubernetes tolerations of the training pods."),
    Param("image_pull_secrets", list, [], "Secrets to pull the trainer image with."),
    Param("cpu", str, "", "CPU request and limit of each training replica; empty: none."),
    Param("memory", str, "", "Memory request and limit of each training replica; empty: none."),
    Param("gpus", int, 0, "GPUs of each training replica."),
)
# The launch inputs the PLATFORM parameters feed, under the same names.
_LAUNCH_PLATFORM_INPUTS = tuple(p.name for p in PLATFORM)
# KFP's MinIO secret keys, as the AWS variables storage reads.
_STORAGE_SECRET_ENV = {"accesskey": "AWS_ACCESS_KEY_ID", "secretkey": "AWS_SECRET_ACCESS_KEY"}

Launch = Callable[[SimpleNamespace, Any, Any, dict[str, Any]], dsl.PipelineTask]


def training_pipeline(
    *,
    name: str,
    module: str,
    description: str,
    summary: str,
    training: Sequence[Param],
    launch: Launch,
) -> Any:
    """The pipeline ``name`` (defined in ``module``): ``training`` are its training parameters (epochs...),
    ``launch(params, dataset, trainer_args, platform_inputs)`` creates its launch task."""
    params = [*DATA, *training, *QUALITY, *PLATFORM]
    signature = inspect.Signature(
        [
            inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default, annotation=p.type)
            for p in params
        ]
    )

    def body(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        p = SimpleNamespace(**bound.arguments)
        wire(p, launch)

    body.__signature__ = signature  # type: ignore[attr-defined]
    body.__name__ = body.__qualname__ = name.replace("-", "_")
    body.__module__ = module
    body.__doc__ = f"{summary}\n\nArgs:\n" + "\n".join(f"    {p.name}: {p.doc}" for p in params)
    return dsl.pipeline(name=name, description=description)(body)


def wire(p: SimpleNamespace, launch: Launch) -> None:
    """Data prep -> flags -> launch -> evaluation -> gate -> export, every step given the storage secret."""
    prep = prepare_dataset(source=p.source, seed=p.seed)
    # A source URI's content can change between runs of a schedule; a cached prep would hide that.
    prep.set_caching_options(False)
    flags = trainer_args(
        epochs=p.epochs,
        batch_size=p.batch_size,
        learning_rate=p.learning_rate,
        seed=p.seed,
        checkpoint_every_steps=getattr(p, "checkpoint_every_steps", 0),
    )
    platform = {name: getattr(p, name) for name in _LAUNCH_PLATFORM_INPUTS}
    train = launch(p, prep.outputs["dataset"], flags.output, platform)
    train.set_caching_options(False)  # a training job is never replayed from cache
    evaluation = evaluate_classifier(
        model=train.outputs["model"],
        dataset=prep.outputs["dataset"],
        min_accuracy=p.min_accuracy,
        baseline_model_uri=p.baseline_model_uri,
    )
    with dsl.If(evaluation.outputs["Output"] == True, name="accuracy-gate"):  # noqa: E712 (a KFP condition)
        export = export_model(model=train.outputs["model"], dataset=prep.outputs["dataset"])
        export.set_caching_options(False)  # the export reads artifacts that a re-run may have replaced
    for task in (prep, train, evaluation, export):
        kubernetes.use_secret_as_env(task, p.storage_secret, _STORAGE_SECRET_ENV, optional=True)
