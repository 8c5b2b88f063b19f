"""Experiment tracking with MLflow, laid out as KFP 2.17's MLflow integration lays it out.

With its MLflow plugin enabled, KFP 2.17's API server opens one MLflow run per pipeline run, its driver one nested
run per task (tag ``mlflow.parentRunId``), and every step container gets ``MLFLOW_TRACKING_URI``,
``MLFLOW_RUN_ID`` (the task's nested run), ``MLFLOW_EXPERIMENT_ID`` and the rest (:mod:`.env`). A step that finds
them logs what it knows into the task's run; a step without them imports nothing of MLflow and logs nothing.

- :mod:`.env`: the variables, the bounded HTTP retries, what the training replicas are given;
- :mod:`.client`: the task's run, opened and checked in bounded time, every failure one line;
- :mod:`.training`: the launch step's points, logged while the job runs;
- :mod:`.evaluation`, :mod:`.export`: what evaluation and export log, and the Model Registry hand-off;
- :mod:`.local`: ``kftrain run --mlflow URI``, the same runs for KFP's local runner.
"""
