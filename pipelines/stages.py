"""What the shipped training pipelines share: their parameters (the platform's from the pod settings' declarations)
and their wiring, prep -> trainer flags -> launch -> evaluation -> quality gate -> export. Parameters reach a step
only as its own inputs. The gate is a nested pipeline whose ``dsl.If`` tests its own input: KFP's local runner
resolves a condition on a task output only when it is named ``Output`` (kubeflow/pipelines@2.17.0:sdk/python/kfp/
local/orchestrator/enhanced_dag_orchestrator.py, _resolve_pipeline_channel); a step's placement resolves against its
own DAG's inputs (backend/src/v2/driver/container.go, dag.Execution.GetParameters), so the gate takes them too. Only
the launch gets the storage secret: KFP's driver refuses an empty secret name
(kubeflow/pipelines@2.5.0:backend/src/v2/driver/driver.go:1669-1690, resolveInputParameterStr).
"""

# No "from __future__ import annotations": KFP reads the nested pipeline's annotations as types.
import dataclasses
import inspect
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, get_origin, get_type_hints

from kfp import dsl, kubernetes

from kftrain.inputs import parameters
from kftrain.inputs.evaluate import EvaluateInputs
from kftrain.inputs.export import ExportInputs
from kftrain.inputs.prep import PrepareInputs
from kftrain.job.pod_settings import step_placements
from kftrain.launch.inputs import Input as Param
from kftrain.launch.inputs import pipeline_inputs
from kftrain_components.data.prepare_dataset.component import prepare_dataset
from kftrain_components.evaluation.evaluate_model.component import evaluate_model
from kftrain_components.export.export_model.component import export_model
from kftrain_components.images import PYTORCH_IMAGE, TENSORFLOW_IMAGE, use_step_pull_secrets
from kftrain_components.training.trainer_args.component import trainer_args


def step_params(table: type, *names: str, **defaults: Any) -> tuple[Param, ...]:
    """The inputs ``names`` of a step's input table (:mod:`kftrain.inputs`) as pipeline parameters under the
    same names and descriptions, with the step's defaults but for ``defaults``: one declaration of each."""
    hints, rows = get_type_hints(table), {row.name: row for row in parameters(table)}
    kinds = {n: get_origin(hints[n]) or hints[n] for n in names}  # list[str] is a list to KFP
    return tuple(Param(n, kinds[n], defaults.get(n, rows[n].default), rows[n].doc) for n in names)


DATA = (
    *step_params(PrepareInputs, "source"),
    Param("seed", int, 42, "Seed of the data split and of the model's initialization."),
)
# The trainers' flags (kftrain_components.training.trainer_args, finetune_args); each pipeline gives its defaults.
TRAINING = (
    Param("epochs", int, 20, "Passes over the training data (0: the program's default)."),
    Param(
        "global_batch_size",
        int,
        64,
        "Examples per optimizer step across all processes, kept when the job changes size (0: batch_size x processes).",
    ),
    Param(
        "batch_size",
        int,
        32,
        "Most examples a process computes at once (PyTorch accumulates gradients up to the global batch); "
        "without a global batch, each process's batch (0: the program's default).",
    ),
    Param(
        "learning_rate",
        float,
        0.1,
        "Learning rate of a step over the global batch, not scaled by the processes (0: the program's default).",
    ),
    Param("checkpoint_every_steps", int, 0, "Also checkpoint every this many steps (0: the program's default)."),
)


# The quality gate's and the registration's parameters: evaluate_model's and export_model's own inputs.
QUALITY = (
    *step_params(EvaluateInputs, "gate_metric", "gate_threshold", "baseline_model_uri", gate_metric="accuracy"),
    *step_params(ExportInputs, "register_model"),
)
# The launch inputs a platform engineer sets for a cluster, exposed as pipeline parameters under the same names,
# descriptions and defaults (the pod settings declare which: kftrain.job.pod_settings).
PLATFORM = tuple(pipeline_inputs())
# The pod settings every step's pod gets too, each by its kfp-kubernetes call, and the gate's inputs that carry them.
STEP_PLACEMENTS = step_placements()
# The images evaluation and export can run in: the framework images, each loading its framework's models.
MODEL_IMAGES = (PYTORCH_IMAGE, TENSORFLOW_IMAGE)

Launch = Callable[[SimpleNamespace, Any, Any, dict[str, Any]], dsl.PipelineTask]


def launched_by(component: Any, *same_names: str, fixed: dict[str, Any] | None = None, **renamed: str) -> Launch:
    """The :data:`Launch` that calls the launch component ``component`` with the dataset's URI, the trainer args and the
    platform inputs, and the pipeline's own parameters: ``same_names`` under their own names, ``renamed`` as
    ``input=parameter``; ``fixed`` sets inputs to constants.
    """
    inputs = {**{name: name for name in same_names}, **renamed}

    def launch(p: SimpleNamespace, dataset_uri: Any, args: Any, platform: dict[str, Any]) -> dsl.PipelineTask:
        own = {key: getattr(p, name) for key, name in inputs.items()}
        return component(dataset_uri=dataset_uri, **(fixed or {}), **own, args=args, **platform)

    return launch


def values(p: SimpleNamespace, params: tuple[Param, ...] | list[Param]) -> dict[str, Any]:
    """The pipeline parameters ``params`` by name, for a step whose inputs carry the same names."""
    return {param.name: getattr(p, param.name) for param in params}


def pipeline_function(module: str, every: list[Param], wire: Callable[[SimpleNamespace], None]) -> Any:
    """The pipeline defined in ``module`` (``pipelines/<category>/<name>/pipeline.py``): parameters ``every``.

    Its name is its folder's (dashes for underscores), its description the module's docstring; ``wire`` is
    called with the parameters (as pipeline channels) to create the tasks.
    """
    name = module.rsplit(".", 2)[-2].replace("_", "-")
    description = " ".join((sys.modules[module].__doc__ or name).split())
    signature = inspect.Signature(
        [
            inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default, annotation=p.type)
            for p in every
        ]
    )

    def body(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        wire(SimpleNamespace(**bound.arguments))

    body.__signature__ = signature  # type: ignore[attr-defined]
    body.__name__ = body.__qualname__ = name.replace("-", "_")
    body.__module__ = module
    body.__doc__ = f"{description}\n\nArgs:\n" + "\n".join(f"    {p.name}: {p.doc}" for p in every)
    return dsl.pipeline(name=name, description=description)(body)


def with_defaults(params: tuple[Param, ...], defaults: dict[str, Any], where: str) -> list[Param]:
    """``params`` with some defaults replaced; a name that is not among them is an error."""
    unknown = set(defaults) - {p.name for p in params}
    if unknown:
        raise TypeError(f"{where}: no parameter named {', '.join(sorted(unknown))}")
    return [dataclasses.replace(p, default=defaults[p.name]) if p.name in defaults else p for p in params]


def training_pipeline(
    module: str, launch: Launch, *params: Param, model_image: str = PYTORCH_IMAGE, **defaults: Any
) -> Any:
    """A shipped digits pipeline: prep -> this release's trainer flags -> ``launch`` -> evaluation -> gate -> export.

    ``launch(params, dataset, trainer_args, platform_inputs)`` creates its launch task; ``params`` are its
    own parameters (replicas...), ``defaults`` its defaults for the TRAINING and QUALITY parameters.
    ``model_image`` is the image evaluation and export run in: one with the framework of the trained model.
    """
    training = with_defaults(
        TRAINING, {k: v for k, v in defaults.items() if k not in {q.name for q in QUALITY}}, module
    )
    quality = with_defaults(QUALITY, {k: v for k, v in defaults.items() if k in {q.name for q in QUALITY}}, module)
    return pipeline_function(
        module, [*DATA, *params, *training, *quality, *PLATFORM], lambda p: wire(p, launch, model_image)
    )


def wire(p: SimpleNamespace, launch: Launch, model_image: str) -> None:
    """Data prep -> flags -> launch -> evaluation -> gate -> export, every step placed by the platform settings;
    evaluation and export run in ``model_image``, which loads the trained model's framework."""
    prep = prepare_dataset(source=p.source, seed=p.seed)
    # A source URI's content can change between runs of a schedule; a cached prep would hide that.
    prep.set_caching_options(False)
    flags = trainer_args(seed=p.seed, **values(p, TRAINING))
    platform = values(p, PLATFORM)
    train = launch(p, prep.outputs["dataset_uri"], flags.output, platform)
    train.set_caching_options(False)  # a training job is never replayed from cache
    for task in (prep, flags, train):
        use_platform_settings(task, p)
    evaluate_and_export(
        p, train.outputs["model"], prep.outputs["dataset_uri"], model_name="digits", targets=[], model_image=model_image
    )


def evaluate_and_export(
    p: SimpleNamespace, model: Any, dataset_uri: Any, model_name: Any, targets: Any, model_image: str
) -> None:
    """Evaluation -> the quality gate -> export (to ``targets``; empty: every one) of the model a launch wrote,
    both in ``model_image`` (an image with the framework that loads the model). Both read the dataset by its URI
    (prep's ``dataset_uri``), not as an input artifact: KFP's launcher would copy the whole dataset into their
    pods first (kubeflow/pipelines@2.5.0:backend/src/v2/component/launcher_v2.go:619-665, downloadArtifacts)."""
    evaluation = evaluate_model(
        model=model,
        dataset_uri=dataset_uri,
        gate_metric=p.gate_metric,
        gate_threshold=p.gate_threshold,
        baseline_model_uri=p.baseline_model_uri,
        mlflow_tracking_uri=p.mlflow_tracking_uri,
    )
    # Not cached: KFP's cache key holds dataset_uri and baseline_model_uri as text and the model by its MLMD id
    # (kubeflow/pipelines@2.17.0:backend/src/v2/cacheutils/cache.go:173-229, GenerateCacheKey), never what is
    # stored there, so a rewritten dataset or baseline would replay an old verdict. Here the model is new in
    # every run (the launch is never cached), so a cache hit was never possible anyway.
    evaluation.set_caching_options(False)
    evaluation.set_container_image(model_image)
    use_platform_settings(evaluation, p)
    export_if_passed(model_image)(
        passed=evaluation.outputs["passed"],
        model=model,
        evaluation_metrics=evaluation.outputs["metrics"],
        dataset_uri=dataset_uri,
        model_name=model_name,
        targets=targets,
        register_model=p.register_model,
        mlflow_tracking_uri=p.mlflow_tracking_uri,
        **{name: getattr(p, name) for name in STEP_PLACEMENTS},
    )


def use_platform_settings(task: dsl.PipelineTask, p: Any) -> None:
    """The platform's placement on a step's pod: each of :data:`STEP_PLACEMENTS` (``p``'s parameter of its name) as
    KFP resolves it at run time, and the step images' pull secrets (compile-time names)."""
    for name, call in STEP_PLACEMENTS.items():
        getattr(kubernetes, call)(task, getattr(p, name))
    use_step_pull_secrets(task)


def export_if_passed(model_image: str) -> Any:
    """The quality gate whose export runs in ``model_image`` (one of :data:`MODEL_IMAGES`)."""
    if model_image not in _GATES:
        raise ValueError(f"model_image: {model_image!r} is not one of {', '.join(_GATES)}")
    return _GATES[model_image]


def _gate(model_image: str) -> Any:
    """One nested pipeline per image, so the image stays a compile-time constant (a pinned tag in the compiled
    file) rather than a runtime input of the gate; made at import (KFP refuses a pipeline defined in another)."""
    image_name = model_image.rsplit("/", 1)[-1].split(":", 1)[0].removeprefix("python-")
    return quality_gate(f"quality-gate-{image_name}", export_model, [("targets", list)], model_image)


# What every gate's export is given (beside its own inputs): the model, what tags it, where it is tracked.
EXPORT_INPUTS = [
    ("model", dsl.Input[dsl.Model]),
    ("evaluation_metrics", dsl.Input[dsl.Metrics]),
    ("dataset_uri", str),
    ("model_name", str),
    ("register_model", str),
    ("mlflow_tracking_uri", str),
]


def quality_gate(name: str, export: Any, own: list[tuple[str, Any]], image: str | None = None) -> Any:
    """The nested pipeline ``name``: the gate's ``dsl.If`` on its own input ``passed`` (see the module's docstring for
    why it is nested), in which ``export`` runs given ``gate_passed``, :data:`EXPORT_INPUTS` and its ``own`` inputs
    (name, annotation) under their names, placed by :data:`STEP_PLACEMENTS` (the gate's inputs too), in ``image``
    (None: the component's own). Make it at import: KFP refuses a pipeline defined in another."""
    inputs = [*EXPORT_INPUTS, *own]
    placements = [(i.name, i.type) for i in PLATFORM if i.name in STEP_PLACEMENTS]
    signature = inspect.Signature(
        [
            inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=a)
            for n, a in [("passed", bool), *inputs, *placements]
        ]
    )

    def gate(*args: Any, **kwargs: Any) -> None:
        """The gate: the export runs when the evaluation passed. It is registered in MLflow under ``register_model``
        (when set), with the evaluation's metrics and the verdict."""
        p = SimpleNamespace(**signature.bind(*args, **kwargs).arguments)
        with dsl.If(p.passed == True, name="passed"):  # noqa: E712 (a KFP condition)
            task = export(gate_passed=p.passed, **{n: getattr(p, n) for n, _ in inputs})
            task.set_caching_options(False)  # the export reads artifacts that a re-run may have replaced
            if image is not None:
                task.set_container_image(image)
            use_platform_settings(task, p)

    gate.__signature__ = signature  # type: ignore[attr-defined]
    description = "Export the model when its evaluation passed the quality gate."
    return dsl.pipeline(name=name, description=description)(gate)


_GATES = {image: _gate(image) for image in MODEL_IMAGES}
