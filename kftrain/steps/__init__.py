"""The pipeline steps other than the launch: data prep, evaluation, export, and where a step puts its outputs."""
