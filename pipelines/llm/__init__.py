"""Language-model pipelines."""
