"""The inputs every launch component shares, declared once, and the factory that makes each kind's component.

KFP reads a component's inputs, their types, defaults and descriptions from its Python function, and runs
that function's source in the step's container. The launch components (PyTorchJob, TFJob, MPIJob) share
most of their inputs, so instead of repeating them in every signature they are declared here, once, as
data: :func:`launch_component` writes out each kind's function (a signature with every input, a docstring
describing each, and a body that is one call into ``kftrain.launch.component``), and decorates it with
``dsl.component``. The written source is what KFP embeds in the committed ``component.yaml``, so reading
that file shows exactly what runs.

Module scope imports only kfp and the standard library.
"""

from __future__ import annotations

import dataclasses
import linecache
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kfp import dsl

from kftrain_components.images import LAUNCH_IMAGE


@dataclass(frozen=True)
class Input:
    """One input of a launch component: its name, Python type (str, int, bool, list, dict), default, description.

    A default of None makes the input required.
    """

    name: str
    type: type
    default: Any
    doc: str


# The artifacts every launch component reads and writes, first in every signature.
ARTIFACTS = (
    (
        "dataset",
        "dsl.Input[dsl.Dataset] = None",
        "Prepared dataset (optional); its URI reaches every replica as $KFTRAIN_DATASET_URI.",
    ),
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

# What to run: before the kind's replica inputs.
PROGRAM = (
    Input("image", str, "", "Image of every replica; empty: this release's trainer image for the kind."),
    Input(
        "command",
        list,
        [],
        "Program of every replica; empty: this release's trainer for the kind, given --dataset, --model-dir and "
        "--checkpoint-dir.",
    ),
    Input("args", list, [], "Arguments of the program; $(VAR) references are expanded."),
)

# The run policy: after the kind's replica inputs.
RUN_POLICY = (
    Input("restart_policy", str, "OnFailure", "Never, OnFailure, Always or ExitCode."),
    Input("backoff_limit", int, 3, "Restarts allowed across the job before it fails."),
    Input("active_deadline_seconds", int, 0, "Fail the job after this many seconds (0: no limit)."),
    Input("clean_pod_policy", str, "Running", "All, Running or None: which pods to delete when the job ends."),
    Input("ttl_seconds_after_finished", int, -1, "Delete the finished job after this long (-1: never)."),
)

# What a platform sets on every replica: after the kind's own options.
PLATFORM = (
    Input("env", dict, {}, "Extra environment variables of every replica (literal values)."),
    Input("secret_env", dict, {}, 'Variables read from secrets: {"ENV_NAME": "secret-name/key"}, never literal.'),
    Input(
        "storage_secret",
        str,
        "",
        "Secret with the object store's accesskey/secretkey (KFP's mlpipeline-minio-artifact layout); empty: none.",
    ),
    Input("cpu", str, "", 'CPU request and limit of each replica (e.g. "2"); empty: none.'),
    Input("memory", str, "", 'Memory request and limit of each replica (e.g. "4Gi"); empty: none.'),
    Input("gpus", int, 0, "nvidia.com/gpu limit of each training replica (never the MPI launcher's)."),
    Input("shm_size", str, "", "Size of a memory-backed /dev/shm on each training replica; empty: none."),
    Input("node_selector", dict, {}, "Node labels every replica's pod must match."),
    Input("tolerations", list, [], "Kubernetes tolerations of every replica's pod."),
    Input("service_account", str, "", "Service account of every replica's pod; empty: the namespace's default."),
    Input("image_pull_secrets", list, [], "Names of the secrets to pull the images with."),
    Input("pvc_mounts", dict, {}, 'PersistentVolumeClaims to mount: {"/mount/path": "claim-name"}.'),
    Input("priority_class", str, "", "PriorityClass of every replica's pod; empty: none."),
    Input("queue_name", str, "", "Kueue LocalQueue to admit the job through (kueue.x-k8s.io/queue-name)."),
    Input("scheduling", dict, {}, "The operator's schedulingPolicy (Volcano: queue, minAvailable, priorityClass...)."),
)

# The step's own inputs: last in every signature.
STEP = (
    Input(
        "manifest", str, "", "A full job YAML of this kind; it replaces the typed inputs above (its own settings win)."
    ),
    Input("checkpoint_uri", str, "", "Checkpoint root ($KFTRAIN_CHECKPOINT_URI); empty: next to the model."),
    Input(
        "backend", str, "auto", "auto (kubernetes when run as a KFP task in a pod, else local), local or kubernetes."
    ),
    Input("timeout_seconds", int, 0, "Fail and delete the job after this many seconds (0: no limit)."),
    Input(
        "pending_timeout_seconds",
        int,
        600,
        "Fail a job whose pods stay unschedulable this long (queued and scaling-up jobs wait; 0: no limit).",
    ),
    Input("run_id", str, "", "The KFP run id; empty: read from the step's output URI."),
    Input("task_id", str, "", "The KFP task id; empty: read from the step's output URI."),
)


# The job kind each launch component runs, by the name of its folder (``<kind>_launch``).
KINDS = {"pytorchjob": "PyTorchJob", "tfjob": "TFJob", "mpijob": "MPIJob", "trainjob": "TrainJob"}


def launch_component(module: str, *kind_inputs: Input, omit: Sequence[str] = (), **defaults: Any) -> Any:
    """The launch component defined in ``module`` (``components/training/<kind>_launch/component.py``).

    Its name is its folder's; the kind is the folder's prefix; its description is the module's docstring.
    ``kind_inputs`` are the kind's own inputs (placed after the program); ``omit`` names shared inputs the kind
    has no field for (a TrainJob's restart policy is its runtime's); ``defaults`` give shared inputs another
    default for this kind (``shm_size="2Gi"``).
    """
    name = module.rsplit(".", 2)[-2]
    kind = KINDS[name.removesuffix("_launch")]
    unknown = (set(defaults) | set(omit)) - {i.name for i in (*PROGRAM, *RUN_POLICY, *PLATFORM, *STEP)}
    if unknown:
        raise TypeError(f"{name}: no shared input named {', '.join(sorted(unknown))}")

    def with_default(shared: Input) -> Input:
        return dataclasses.replace(shared, default=defaults[shared.name]) if shared.name in defaults else shared

    shared_after = [i for i in (*RUN_POLICY, *PLATFORM, *STEP) if i.name not in omit]
    inputs = [*map(with_default, PROGRAM), *kind_inputs, *map(with_default, shared_after)]
    summary, _, details = (sys.modules[module].__doc__ or name).partition("\n\n")
    source = _function_source(kind, name, summary.strip(), details, inputs)
    filename = f"<kftrain launch component {module}.{name}>"
    # inspect.getsource (which KFP uses to embed the function) reads generated code through linecache.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, Any] = {"dsl": dsl, "__name__": module}
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # no "annotations" future: KFP reads types
    func = namespace[name]
    return dsl.component(base_image=LAUNCH_IMAGE, install_kfp_package=False)(func)


def _function_source(kind: str, name: str, summary: str, details: str, inputs: Sequence[Input]) -> str:
    params = [f"    {n}: {annotation}," for n, annotation, _ in ARTIFACTS if "=" not in annotation]
    params += [f"    {i.name}: {i.type.__name__}{'' if i.default is None else f' = {i.default!r}'}," for i in inputs]
    # Inputs with a default come after those without: the optional dataset goes last.
    params += [f"    {n}: {annotation}," for n, annotation, _ in ARTIFACTS if "=" in annotation]
    docs = [(n, doc) for n, _, doc in ARTIFACTS] + [(i.name, i.doc) for i in inputs]
    args_doc = "\n".join(f"        {n}: {doc}" for n, doc in docs)
    body_details = f"\n\n{textwrap.indent(details.strip(), '    ')}" if details.strip() else ""
    call_inputs = "\n".join(f"            {i.name!r}: {i.name}," for i in inputs)
    return (
        f"def {name}(\n"
        + "\n".join(params)
        + "\n):\n"
        + f'    """{summary}{body_details}\n\n    Args:\n{args_doc}\n    """\n'
        + "    from kftrain.launch.component import launch_component\n\n"
        + "    launch_component(\n"
        + f"        {kind!r},\n"
        + "".join(f"        {n}={n},\n" for n, _, _ in ARTIFACTS)
        + "        inputs={\n"
        + call_inputs
        + "\n        },\n"
        + "    )\n"
    )
