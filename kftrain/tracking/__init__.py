"""Experiment tracking with MLflow, laid out as KFP 2.17's MLflow integration lays it out, and best-effort as KFP's
own calls are: a tracking failure is a warning, never a step's end.

- :mod:`.env`: the variables a step gets, the bounded HTTP retries, what the training replicas are given;
- :mod:`.calls`: every request under a whole-call deadline, a failure one line;
- :mod:`.client`: the task's run; :mod:`.training`: the launch step's curves;
- :mod:`.evaluation`, :mod:`.export`: what evaluation and export log, and the Model Registry hand-off;
- :mod:`.local`: ``kftrain run --mlflow URI``, the same runs for KFP's local runner.
"""
