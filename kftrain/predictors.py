"""Former home of :mod:`kftrain.models`' framework dispatch, kept as an alias for callers not yet moved.

The MPIJob launch component (``components/training/mpijob_launch``) still imports ``model_info`` from
here; import from :mod:`kftrain.models` instead. Remove this module once nothing imports it.
"""

from kftrain.models import MODEL_INFO, Predictor, load_predictor, model_info

__all__ = ["MODEL_INFO", "Predictor", "load_predictor", "model_info"]
