"""Language-model fine-tuning: instruction data, the embedded tiny model and synthetic task, loading and writing
models (:mod:`.model_io`), the shared prompt format (:mod:`.prompts`). Needs the ``llm`` extra (Transformers, PEFT)
where a module loads a model; :mod:`.synthetic` needs nothing beyond kftrain."""
