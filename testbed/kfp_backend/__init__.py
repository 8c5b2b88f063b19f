"""A KFP backend in the tests: a compiled ``pipeline.yaml`` run the way kubeflow/pipelines' driver and launcher
run it, for each supported backend release (:mod:`.versions`: 2.5 through 2.17).

- :mod:`.driver` resolves each task's inputs from its parent DAG, evaluates its trigger condition and names its
  outputs (:mod:`.layout`: ``<root>/<pipeline>/<run uuid>/<task>/<salt uuid>/<output>``);
- :mod:`.platform` parses each executor's ``platforms.kubernetes`` config against the release's own
  kfp-kubernetes proto (:mod:`.protos`, taken from the released package) and applies it to the task pod;
- :mod:`.launcher` downloads the inputs, runs the container's command in a process with the pod's environment,
  reads the executor output and uploads the outputs (:mod:`.store`: the run's bucket);
- :mod:`.runner` walks the DAGs on a :class:`.runner.Cluster`: the fake Kubernetes API with the namespace's
  ``kfp-launcher`` ConfigMap and store secret, and an operator that runs each created job with kftrain's local
  backend (:mod:`.cluster` makes one per test).

Every rule is cited where it is encoded (repository, tag, file and lines).
"""
