"""Evaluation of a fine-tuned language model: loss, perplexity and task metrics before and after fine-tuning.

- :mod:`~kftrain.steps.evaluate_llm.report`: the Markdown and HTML reports (sample generations escaped);
- :mod:`~kftrain.steps.evaluate_llm.component`: the body of the ``evaluate_language_model`` component.

The metrics are :mod:`kftrain.llm.evaluate`'s, the gate :mod:`kftrain.steps.evaluate.gate`'s.
"""
