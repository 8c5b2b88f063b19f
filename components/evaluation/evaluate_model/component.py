"""Score `model` on `split` of `dataset`: classification (binary or multi-class) or regression, as the dataset says.

The model is any format of the model contract (TorchScript, ONNX, SavedModel, Keras, kftrain's MLP),
found from its files. The split is read in batches, so it may be larger than memory. `passed` says
whether `gate_metric` meets `gate_threshold` (and is not worse than the baseline model's): pipelines
gate the export on it.
"""

from kftrain.inputs.evaluate import OUTPUTS, EvaluateInputs
from kftrain_components.component_function import step_component
from kftrain_components.images import PYTORCH_IMAGE

evaluate_model = step_component(
    __name__,
    EvaluateInputs,
    "kftrain.steps.evaluate.component:evaluate_component",
    outputs=OUTPUTS,
    image=PYTORCH_IMAGE,
)
