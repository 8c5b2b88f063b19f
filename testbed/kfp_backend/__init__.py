"""A KFP backend in the tests: a compiled ``pipeline.yaml`` run the way kubeflow/pipelines' driver and launcher
run it, for each supported backend release (:mod:`.versions`: 2.5 through 2.17).

:mod:`.driver` resolves each task's inputs and names its outputs (:mod:`.layout`); :mod:`.platform` applies each
executor's ``platforms.kubernetes`` config, parsed against the release's own kfp-kubernetes proto (:mod:`.protos`);
:mod:`.launcher` moves the artifacts (:mod:`.store`) and runs the command; :mod:`.runner` walks the DAGs on a
:class:`.runner.Cluster` (:mod:`.cluster` makes one per test). Every rule is cited where it is encoded.
"""
