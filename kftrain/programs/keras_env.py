"""Imported first by the Keras programs (``tf_distributed``, ``horovod_tf``), for what it sets in the environment.

``TF_USE_LEGACY_KERAS=1`` must be set before TensorFlow is imported anywhere in the process: ``tf.keras`` is
then Keras 2 (``tf_keras``), whose ``fit`` works under MultiWorkerMirroredStrategy and whose optimizers and
callbacks Horovod 0.28.1 wraps. ``TF_CPP_MIN_LOG_LEVEL=2`` keeps TensorFlow's C++ INFO/WARNING lines out of the
logs. Either stays as the environment gives it when already set.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow is imported anywhere in this process
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
