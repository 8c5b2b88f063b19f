"""A Horovod TF2 Keras program as Horovod's own examples write one (``tensorflow2_keras_mnist.py``): ``tf.keras``
with ``horovod.tensorflow.keras``, nothing of kftrain. Synthetic data, a few steps, so it runs anywhere.

mpirun -n 2 python examples/mpi/hvd_tf2_keras.py

With TensorFlow >= 2.16, ``tf.keras`` is Keras 3 unless ``TF_USE_LEGACY_KERAS=1`` (and ``tf_keras`` installed);
Horovod 0.28.1's TF ops then fail with ``'Variable' object has no attribute 'ref'``. The environment kftrain
ships for Horovod (its image, and the venv ``make install`` builds) sets it.
"""

import sys

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

hvd.init()
rank, size = hvd.rank(), hvd.size()

rng = np.random.default_rng(rank)
x = rng.random((256, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype(np.int64)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(256, seed=rank).batch(32)

model = tf.keras.Sequential(
    [tf.keras.layers.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(2)]
)
# Horovod's recipe: scale the learning rate by the number of ranks, wrap the optimizer.
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * size))
model.compile(
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=opt,
    metrics=["accuracy"],
    experimental_run_tf_function=False,
)
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
history = model.fit(dataset, steps_per_epoch=8 // size, epochs=2, callbacks=callbacks, verbose=0)

# The ranks must hold the same weights after training (the broadcast and the averaged gradients).
first = model.get_weights()[0]
same = hvd.allreduce(tf.constant(first), op=hvd.Average, name="weights")
in_sync = bool(np.allclose(same.numpy(), first, atol=1e-6))
loss = history.history["loss"][-1]
keras = tf.keras.__name__
sys.stdout.write(f"hvd tf2 keras rank {rank} of {size}: keras {keras}, loss {loss:.4f}, in sync {in_sync}\n")
sys.stdout.flush()
sys.exit(0 if in_sync else 1)
