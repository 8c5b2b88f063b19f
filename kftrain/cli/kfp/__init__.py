"""``kftrain submit`` and ``kftrain schedule``: pipelines on a Kubeflow Pipelines API server."""
