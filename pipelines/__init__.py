"""Pipelines built from the components (importable as ``kftrain_pipelines``)."""
