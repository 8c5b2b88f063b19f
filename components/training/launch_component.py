"""The factory that makes each kind's launch component from the one table of launch inputs.

KFP embeds a component function's source text and runs it in the step's container, mapping the step's inputs onto
the parameters that text defines (kubeflow/pipelines@2.17.0:sdk/python/kfp/dsl/executor.py, Executor.execute), so
:func:`launch_component` writes each kind's function as text from :func:`kftrain.launch.inputs.launch_inputs`: every
input in its signature and docstring, a body that is one call into ``kftrain.launch.component``. The committed
``component.yaml`` shows exactly what runs. Module scope imports only kfp, the standard library and kftrain's tables.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from kfp import dsl

from kftrain.inputs import REQUIRED, Parameter, function_source
from kftrain.job.kinds import KINDS
from kftrain.job.pod_settings import TASK_CONFIG as TASK_CONFIG_INPUT
from kftrain.job.pod_settings import task_config_passthroughs
from kftrain.launch.inputs import Input, launch_inputs
from kftrain_components.component_function import define
from kftrain_components.images import LAUNCH_IMAGE

# The artifacts every launch component reads and writes, first in every signature.
ARTIFACTS = (
    ("model", "dsl.Output[dsl.Model]", "Where the program writes the model: $KFTRAIN_MODEL_URI in every replica."),
    ("job", "dsl.OutputPath(str)", "Identity of the created job (JSON), written before waiting."),
    (
        "metrics",
        "dsl.Output[dsl.Metrics]",
        "Final values of the metrics the replicas reported (KFTRAIN_METRICS lines; see kftrain.metrics).",
    ),
    (
        "curves",
        "dsl.Output[dsl.HTML]",
        "The reported metrics as curves per epoch/step, per replica where they differ (self-contained SVG).",
    ),
)


# The launch task's own settings KFP passes through to the job (backend >= 2.15), as the pod settings declare them
# (kftrain.job.pod_settings): each TaskConfig field, and whether KFP applies it to the launch pod as well.
TASK_CONFIG = (
    TASK_CONFIG_INPUT,
    "dsl.TaskConfig",
    "The launch task's own settings, passed to every replica below the explicit inputs (KFP backend >= 2.15).",
)
TASK_CONFIG_PASSTHROUGHS = [
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField[name], apply_to_task=to_launch_pod)
    for name, to_launch_pod in task_config_passthroughs().items()
]


def launch_component(module: str, kind: str, *, task_config: bool = False) -> Any:
    """The launch component of ``kind`` defined in ``module`` (``components/training/<kind>_launch/component.py``).

    Its name is its folder's; its description is the module's docstring; its inputs are the kind's
    (:func:`kftrain.launch.inputs.launch_inputs`). With ``task_config`` it is the variant for KFP backends 2.15 and
    later, named ``<folder>_task_config``: it also takes the task's own settings as a ``dsl.TaskConfig`` (KFP
    2.5-2.14 refuse a pipeline spec that has one: their pipeline_spec.proto lacks TaskConfig, parsed strictly).
    """
    folder = module.rsplit(".", 2)[-2]
    name = f"{folder}_task_config" if task_config else folder
    inputs = launch_inputs(KINDS.get(kind))
    summary, _, details = (sys.modules[module].__doc__ or name).partition("\n\n")
    source = _function_source(kind, name, summary.strip(), details, inputs, task_config=task_config)
    passthroughs = TASK_CONFIG_PASSTHROUGHS if task_config else None
    return define(
        module, name, source, base_image=LAUNCH_IMAGE, install_kfp_package=False, task_config_passthroughs=passthroughs
    )


def _function_source(
    kind: str, name: str, summary: str, details: str, inputs: Sequence[Input], *, task_config: bool
) -> str:
    artifacts = [*ARTIFACTS, TASK_CONFIG] if task_config else list(ARTIFACTS)
    params = [Parameter(n, annotation, doc) for n, annotation, doc in artifacts]
    params += [Parameter(i.name, i.type.__name__, i.doc, REQUIRED if i.default is None else i.default) for i in inputs]
    call_inputs = "".join(f"        {i.name!r}: {i.name},\n" for i in inputs)
    body = (
        "from kftrain.launch.component import launch_component\n\n"
        + f"launch_component(\n    {kind!r},\n"
        + "".join(f"    {n}={n},\n" for n, _, _ in artifacts)
        + f"    inputs={{\n{call_inputs}    }},\n)\n"
    )
    return function_source(name, summary, details, params, body)
