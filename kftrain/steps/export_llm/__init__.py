"""Export of a fine-tuned language model: the body of the ``export_language_model`` component
(:mod:`~kftrain.steps.export_llm.component`); what it writes and checks is :mod:`kftrain.llm.export`'s."""
