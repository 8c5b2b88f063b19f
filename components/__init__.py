"""Reusable KFP components (importable as ``kftrain_components``)."""
