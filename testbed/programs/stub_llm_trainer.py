"""A stand-in for the fine-tuning program (kftrain.programs.hf_finetune) in the pipeline tests that check wiring, not
training: it writes an untrained tiny Llama in the program's layout in a few seconds (most of it the imports), so
that the language model's evaluation and export still run on a real model folder.

The contract it keeps and the flags it takes are in the comment below the imports.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

# It keeps the program's contract (kftrain/programs/hf_finetune.py, _finish): it reads the instruction dataset at
# ``--dataset`` (or ``$KFTRAIN_DATASET_URI``), reports one metrics point, publishes one checkpoint under
# ``--checkpoint-dir`` (the launcher of KFP before 2.17 downloads it with the model: a sibling key), and rank 0 alone
# writes the model at ``--model-dir`` (or ``$KFTRAIN_MODEL_URI``) with kftrain.llm.model_io.write_finetuned: every
# weight (method "full"), the tokenizer, ``kftrain-llm.json``, and the base it started from in ``base/``, as the
# program does with the embedded model. The model is kftrain.llm.tiny's, made from the training texts but much
# smaller than the program's (SHAPE) and never trained: its answers are noise, which a gate at 0 still passes.
# The other ranks import nothing heavy and exit at once.
#
# Run by file path (``python testbed/programs/stub_llm_trainer.py``), like stub_trainer.py. It takes the program's
# flags it needs (``--dataset``, ``--model-dir``, ``--checkpoint-dir``, ``--epochs``: the epochs it reports) and
# ignores the others, so it runs with the arguments the pipeline gives the real one.

DATASET_ENV, MODEL_ENV, CHECKPOINT_ENV = "KFTRAIN_DATASET_URI", "KFTRAIN_MODEL_URI", "KFTRAIN_CHECKPOINT_URI"
SHAPE = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}


def write_checkpoint(root: str, epoch: int) -> None:
    """One checkpoint where the real program puts its own (``ckpt-<step>``, published with its marker)."""
    from kftrain import storage
    from kftrain.programs.checkpoint import checkpoint_uri

    with storage.ArtifactWriter(checkpoint_uri(root, epoch)) as writer:
        writer.write_json("state.json", {"epoch": epoch, "stub": True})


def write_model(dataset: str, model_dir: str, epochs: int) -> None:
    from kftrain import metrics
    from kftrain.llm import model_io, prompts, tiny
    from kftrain.llm.instructions import read_split

    texts = [prompts.render(e.prompt) + e.response for e in read_split(dataset, "train")]
    with tempfile.TemporaryDirectory(prefix="stub-llm-") as tmp:
        base = tiny.save_tiny(tmp + "/base", texts, **SHAPE)
        model, tokenizer = model_io.load_model(str(base))
        metrics.report_total(epoch=epochs)
        metrics.report(epoch=epochs, loss=0.0)
        info = {
            "base_model": "embedded:tiny",
            "method": "full",
            "dataset": dataset,
            "prompt_template": prompts.render("{prompt}"),
            "max_length": 256,
            "training": {"epochs": epochs, "stub": True},
            "metrics": {"loss": None, "eval_loss": None},  # nothing trained, nothing measured
        }
        model_io.write_finetuned(model_dir, model, tokenizer, info, base_folder=base)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=1, help="the epochs reported (one point, at the last)")
    parser.add_argument("--dataset", default=os.environ.get(DATASET_ENV, ""))
    parser.add_argument("--model-dir", default=os.environ.get(MODEL_ENV, ""))
    parser.add_argument("--checkpoint-dir", default=os.environ.get(CHECKPOINT_ENV, ""))
    args, _ignored = parser.parse_known_args(argv)
    # RANK: a PyTorchJob replica's (the operator's) or a torchrun process's; alone, the process is rank 0.
    if os.environ.get("RANK", "0") != "0":
        print("stub trainer: not the rank that writes the model", flush=True)
        return 0
    if not args.dataset or not args.model_dir:
        print(f"stub trainer: needs ${DATASET_ENV} and ${MODEL_ENV} (or --dataset, --model-dir)", file=sys.stderr)
        return 2
    if args.checkpoint_dir:
        write_checkpoint(args.checkpoint_dir, args.epochs)
    write_model(args.dataset, args.model_dir, args.epochs)
    print(f"stub trainer: wrote an untrained tiny llama model to {args.model_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
