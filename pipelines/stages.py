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

import dataclasses
import inspect
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from kfp import dsl, kubernetes

from kftrain_components.data.prepare_dataset.component import prepare_dataset
from kftrain_components.evaluation.evaluate_classifier.component import evaluate_classifier
from kftrain_components.export.export_model.component import export_model
from kftrain_components.training import launch_inputs
from kftrain_components.training.launch_inputs import Input as Param
from kftrain_components.training.trainer_args.component import trainer_args

DATA = (
    Param("source", str, "builtin:digits", "Dataset: builtin:digits or a Parquet/CSV URI with a label column."),
    Param("seed", int, 42, "Seed of the data split and of the model's initialization."),
)
# The trainers' flags (kftrain_components.training.trainer_args); each pipeline gives its own defaults.
TRAINING = (
    Param("epochs", int, 20, "Passes over the training data."),
    Param(
        "global_batch_size",
        int,
        64,
        "Rows per optimizer step across all processes, kept when the job changes size (0: batch_size x processes).",
    ),
    Param(
        "batch_size",
        int,
        32,
        "Most rows a process computes at once (PyTorch accumulates gradients up to the global batch); "
        "without a global batch, each process's batch.",
    ),
    Param("learning_rate", float, 0.1, "Learning rate of a step over the global batch (not scaled by the processes)."),
    Param("checkpoint_every_steps", int, 0, "Also checkpoint every this many steps (0: the trainer's default)."),
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
# The launch inputs a platform engineer sets for a cluster, exposed as pipeline parameters under the same
# names and descriptions (taken from the launch components' own table), with the pipelines' defaults.
_PLATFORM_DEFAULTS = {"timeout_seconds": 3600, "storage_secret": "mlpipeline-minio-artifact"}
PLATFORM = tuple(
    dataclasses.replace(i, default=_PLATFORM_DEFAULTS.get(i.name, i.default))
    for i in (*launch_inputs.PLATFORM, *launch_inputs.STEP)
    if i.name
    in {
        "backend",
        "timeout_seconds",
        "pending_timeout_seconds",
        "storage_secret",
        "service_account",
        "queue_name",
        "priority_class",
        "node_selector",
        "tolerations",
        "image_pull_secrets",
        "cpu",
        "memory",
        "gpus",
    }
)
# KFP's MinIO secret keys, as the AWS variables storage reads.
_STORAGE_SECRET_ENV = {"accesskey": "AWS_ACCESS_KEY_ID", "secretkey": "AWS_SECRET_ACCESS_KEY"}

Launch = Callable[[SimpleNamespace, Any, Any, dict[str, Any]], dsl.PipelineTask]


def training_pipeline(module: str, launch: Launch, *params: Param, **training_defaults: Any) -> Any:
    """The pipeline defined in ``module`` (``pipelines/<category>/<name>/pipeline.py``).

    Its name is its folder's (dashes for underscores), its description the module's docstring.
    ``launch(params, dataset, trainer_args, platform_inputs)`` creates its launch task; ``params`` are its
    own parameters (replicas...), ``training_defaults`` its defaults for the TRAINING parameters.
    """
    name = module.rsplit(".", 2)[-2].replace("_", "-")
    description = " ".join((sys.modules[module].__doc__ or name).split())
    training = [
        dataclasses.replace(p, default=training_defaults.pop(p.name)) if p.name in training_defaults else p
        for p in TRAINING
    ]
    if training_defaults:
        raise TypeError(f"{name}: no training parameter named {', '.join(sorted(training_defaults))}")
    every = [*DATA, *params, *training, *QUALITY, *PLATFORM]
    signature = inspect.Signature(
        [
            inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default, annotation=p.type)
            for p in every
        ]
    )

    def body(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        wire(SimpleNamespace(**bound.arguments), launch)

    body.__signature__ = signature  # type: ignore[attr-defined]
    body.__name__ = body.__qualname__ = name.replace("-", "_")
    body.__module__ = module
    body.__doc__ = f"{description}\n\nArgs:\n" + "\n".join(f"    {p.name}: {p.doc}" for p in every)
    return dsl.pipeline(name=name, description=description)(body)


def wire(p: SimpleNamespace, launch: Launch) -> None:
    """Data prep -> flags -> launch -> evaluation -> gate -> export, every step given the storage secret."""
    prep = prepare_dataset(source=p.source, seed=p.seed)
    # A source URI's content can change between runs of a schedule; a cached prep would hide that.
    prep.set_caching_options(False)
    flags = trainer_args(
        epochs=p.epochs,
        global_batch_size=p.global_batch_size,
        batch_size=p.batch_size,
        learning_rate=p.learning_rate,
        seed=p.seed,
        checkpoint_every_steps=p.checkpoint_every_steps,
    )
    platform = {param.name: getattr(p, param.name) for param in PLATFORM}
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
