"""Images of the components and trainers, resolved when a pipeline is compiled (see kftrain.images).

Launch steps and the trainers' flags run in the framework-free launch image, data prep in the data image,
and evaluation and export in the framework image of the model they handle: the PyTorch (CPU) image by
default; pipelines that train TensorFlow models run those two steps in the TensorFlow image. (The Horovod images
are the MPIJobs' replicas' only: the launch step picks one at run time, kftrain.launch.component.)
"""

from kftrain.images import CPU, DATA, LAUNCH, PYTORCH, TENSORFLOW, image

LAUNCH_IMAGE = image(LAUNCH)
DATA_IMAGE = image(DATA)
PYTORCH_IMAGE = image(PYTORCH, CPU)
TENSORFLOW_IMAGE = image(TENSORFLOW, CPU)
