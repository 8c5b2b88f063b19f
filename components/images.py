"""Images of the components and trainers, resolved when a pipeline is compiled (see kftrain.images)."""

from kftrain.images import HOROVOD, PYTORCH, RUNTIME, TENSORFLOW, image

RUNTIME_IMAGE = image(RUNTIME)
PYTORCH_IMAGE = image(PYTORCH)
TENSORFLOW_IMAGE = image(TENSORFLOW)
HOROVOD_IMAGE = image(HOROVOD)
