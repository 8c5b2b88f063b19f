"""This release's reference training programs, run inside the replicas, and what only they use.

Programs (run as ``python -m kftrain.programs.<name>``): ``torch_ddp``, ``horovod_torch``, ``tf_distributed``,
``horovod_tf``. They read only the operator's env and URIs. Shared by them: ``common`` (flags, logging,
summary line), ``torch_common`` (the PyTorch programs' data, checkpoints, accuracy), ``keras_env`` (the Keras
programs' environment, set before TensorFlow is imported), ``checkpoint`` (checkpoints by URI) and ``faults``
(fault injection for crash-resume tests).
"""
