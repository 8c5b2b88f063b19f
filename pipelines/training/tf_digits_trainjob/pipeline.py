"""tf-digits on Kubeflow Trainer v2: the same data prep, Keras MultiWorkerMirrored trainer, evaluation and export, the
training run as a TrainJob on a plain runtime (no ML policy: Trainer has no TensorFlow plugin), every node a worker
whose TF_CONFIG the trainer builds from its completion index and KFTRAIN_NUM_NODES (kftrain.programs.tf_config)."""

import yaml

from kftrain_components.images import TENSORFLOW_IMAGE
from kftrain_components.training.trainjob_launch.component import trainjob_launch
from kftrain_pipelines.stages import Param, training_pipeline

RUNTIME = "tensorflow-plain"
# The plain TrainingRuntime the job runs on, applied with it: on a cluster the launch step creates it in the run's
# namespace when the namespace has none of that name (one it has must match). One job of nodes labelled as the
# trainer's, a container named node (what Trainer's runtime webhook requires), and an ML policy with no source.
RUNTIME_MANIFEST = yaml.safe_dump(
    {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": RUNTIME, "labels": {"trainer.kubeflow.org/framework": "tensorflow"}},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "python"}]}}},
                            },
                        }
                    ]
                }
            },
        },
    },
    sort_keys=False,
)

tf_digits_trainjob = training_pipeline(
    __name__,
    lambda p, dataset_uri, args, platform: trainjob_launch(
        dataset_uri=dataset_uri,
        runtime=RUNTIME,
        runtime_manifest=RUNTIME_MANIFEST,
        num_nodes=p.num_nodes,
        num_proc_per_node=0,
        args=args,
        **platform,
    ),
    Param("num_nodes", int, 2, "TrainJob nodes, each a MultiWorkerMirroredStrategy worker (node 0 writes the model)."),
    model_image=TENSORFLOW_IMAGE,
    epochs=8,
    learning_rate=0.003,
    checkpoint_every_steps=50,
)
