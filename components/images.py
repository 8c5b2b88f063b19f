"""Images of the components and trainers, resolved when a pipeline is compiled (see kftrain.images).

Launch steps and the trainers' flags run in the framework-free launch image, data prep in the data image,
and evaluation and export in the framework image of the model they handle: the PyTorch (CPU) image by
default; pipelines that train TensorFlow models run those two steps in the TensorFlow image. (The Horovod images
are the MPI replicas' only: the default MPI program names one, in the catalog kftrain/job/kinds/programs.py.)
"""

import os
from typing import Any

from kftrain.images import CPU, DATA, LAUNCH, PYTORCH, TENSORFLOW, image

LAUNCH_IMAGE = image(LAUNCH)
DATA_IMAGE = image(DATA)
PYTORCH_IMAGE = image(PYTORCH, CPU)
TENSORFLOW_IMAGE = image(TENSORFLOW, CPU)
# The secrets every step pod pulls these images with: chosen when the images' registry is (at compile time,
# KFTRAIN_IMAGE_PULL_SECRETS, comma-separated), because KFP takes a pull secret's name only as one string
# parameter per secret and refuses an empty one, so a run-time list cannot reach the step pods.
STEP_IMAGE_PULL_SECRETS = tuple(
    name.strip() for name in os.environ.get("KFTRAIN_IMAGE_PULL_SECRETS", "").split(",") if name.strip()
)


def use_step_pull_secrets(task: Any) -> None:
    """Give a step's pod (a KFP ``PipelineTask`` of a container) :data:`STEP_IMAGE_PULL_SECRETS`, unless it names pull
    secrets of its own; every step of a shipped pipeline gets them so, and every step of a user's pipeline compiled by
    ``kftrain compile`` / ``submit`` / ``schedule``."""
    if not STEP_IMAGE_PULL_SECRETS or getattr(task, "container_spec", None) is None:
        return
    if (task.platform_config.get("kubernetes") or {}).get("imagePullSecret"):
        return
    from kfp import kubernetes

    kubernetes.set_image_pull_secrets(task, list(STEP_IMAGE_PULL_SECRETS))
