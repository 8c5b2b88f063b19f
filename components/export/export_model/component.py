"""Export `model` (any format of the model contract) to a Triton model repository and/or TF Serving layout.

Every written model is reloaded with the runtime that serves it and must reproduce the model's outputs on
the dataset's test split before anything is published. With MLflow tracking (KFP 2.17's MLflow plugin, or
`kftrain run --mlflow`), the task's MLflow run is tagged with every layout's URI, and `register_model`
registers the export in MLflow's Model Registry.
"""

from kftrain.inputs.export import OUTPUTS, ExportInputs
from kftrain_components.component_function import step_component
from kftrain_components.images import PYTORCH_IMAGE

export_model = step_component(
    __name__, ExportInputs, "kftrain.steps.export.component:export_component", outputs=OUTPUTS, image=PYTORCH_IMAGE
)
