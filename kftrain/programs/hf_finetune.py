"""Fine-tune a causal language model on an instruction dataset: Transformers with PEFT (LoRA) or full, over DDP.

The dataset is :mod:`kftrain.llm.instructions`' (``--dataset``); the base model a Hugging Face folder, ``s3://``
prefix or Trainer's ``/workspace/model`` (``--model-uri``; empty: the embedded tiny Llama, made at run time from the
training texts). It runs as :mod:`kftrain.programs.torch_ddp` does: alone, or as a PyTorchJob replica or a Trainer
``torch-distributed`` node from the operator's env (gloo on CPU). Every optimizer step trains on the same global
batch at any world size (micro-batches, gradients accumulated); the loss is the mean over its response tokens (the
prompt's are masked). Only rank 0 writes checkpoints (the trained weights, optimizer, sample position) and the model
(:func:`kftrain.llm.model_io.write_finetuned`, atomically); a restarted or resized job resumes from the newest
complete checkpoint. Every ``--log-every-steps`` a metric line: step, loss, tokens_per_s, learning_rate.

    python -m kftrain.programs.hf_finetune --dataset URI --model-dir URI [--model-uri URI] [--method lora|full]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from kftrain import metrics
from kftrain.llm import model_io, prompts, tiny
from kftrain.llm.batches import Encoded, token_loss_sum
from kftrain.llm.instructions import read_split
from kftrain.programs import checkpoint, faults, torch_common
from kftrain.programs.common import global_batch_size, run, torch_main, trainer_parser
from kftrain.programs.global_batch import GlobalOrder, SamplerPosition, check_world_sizes, world_sizes_of_elastic_job
from kftrain.programs.torch_ddp import DistContext, init_distributed

log = logging.getLogger("kftrain.trainer")

EMBEDDED = "embedded:tiny"  # kftrain-llm.json's base_model when the base was made at run time
_NOT_RECORDED = ("dataset", "model_dir", "checkpoint_dir", "hidden")  # recorded elsewhere, or not this program's


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = trainer_parser(__doc__, epochs=3, lr=2e-4, checkpoint_every_epochs=1)
    p.add_argument("--model-uri", default="", help="base model folder (path, s3:// prefix, /workspace/model); "
                   "empty: the embedded tiny Llama made from the training data")  # fmt: skip
    p.add_argument("--tiny-shape", type=_shape, default={}, help="the embedded model's LlamaConfig sizes over "
                   "kftrain.llm.tiny.DEFAULT_SHAPE, e.g. hidden_size=64,num_hidden_layers=2")  # fmt: skip
    p.add_argument("--method", choices=model_io.METHODS, default="lora", help="LoRA adapters, or every weight")
    p.add_argument("--max-length", type=int, default=256, help="tokens of prompt + response; longer ones are cut")
    p.add_argument("--warmup-steps", type=int, default=10, help="linear warmup, then linear decay to 0")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping (0: none)")
    p.add_argument("--lora-r", type=int, default=8)
    p.add_argument("--lora-alpha", type=int, default=16)
    p.add_argument("--lora-dropout", type=float, default=0.05)
    p.add_argument("--lora-target-modules", default="all-linear", help="comma-separated module names, or all-linear")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="weights while training")
    p.add_argument("--log-every-steps", type=int, default=10, help="a metric line every this many steps")
    p.add_argument("--eval-examples", type=int, default=200, help="test examples of the final eval_loss (0: none)")
    p.add_argument("--checkpoint-every-seconds", type=float, default=0.0)
    p.add_argument("--backend", default=None, choices=["gloo", "nccl"], help="default: nccl on GPU, else gloo")
    torch_common.add_torch_flags(p)
    args = p.parse_args(argv)
    for flag in ("max_length", "log_every_steps", "lora_r"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')}: must be >= 1, got {getattr(args, flag)}")
    return args


def _shape(text: str) -> dict[str, int]:
    shape: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        if key not in tiny.DEFAULT_SHAPE or not value.isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(
                f"{item!r}: give name=positive integer, names among {', '.join(tiny.DEFAULT_SHAPE)}"
            )
        shape[key] = int(value)
    return shape


class TrainableWeights(nn.Module):
    """The weights training changes (all of them, or LoRA's), as checkpoints save and restore them: a LoRA
    checkpoint holds the adapter, not the frozen base."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self._model = [model]  # in a list: not a submodule of this one

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return {n: p.detach() for n, p in self._model[0].named_parameters() if p.requires_grad}

    def load_state_dict(self, state: Any, strict: bool = True, assign: bool = False) -> Any:
        own = self.state_dict()
        if set(own) != set(state):
            differ = sorted(set(own) ^ set(state))[:3]
            raise checkpoint.CheckpointError(f"the checkpoint's weights are not this model's (e.g. {differ})")
        with torch.no_grad():
            for name, tensor in state.items():
                own[name].copy_(tensor)
        return None


def _agreed(ctx: DistContext, value: Any) -> Any:
    """Rank 0's ``value`` on every rank."""
    box = [value]
    if ctx.world_size > 1:
        dist.broadcast_object_list(box, src=0)
    return box[0]


def _learning_rate(args: argparse.Namespace, step: int, total: int) -> float:
    """The rate of optimizer step ``step`` (0-based): linear warmup, then linear decay to zero at ``total``."""
    warmup = min(args.warmup_steps, total // 2)
    if step < warmup:
        return float(args.lr * (step + 1) / warmup)
    return float(args.lr * max(0.0, (total - step) / max(1, total - warmup)))


def _base_model(args: argparse.Namespace, texts: list[str], tmp: Path) -> tuple[Any, Any, Path | None]:
    """(model, tokenizer, the local folder of an embedded base): loaded as any model folder is."""
    if args.model_uri:
        model, tokenizer = model_io.load_model(args.model_uri, args.dtype)
        return model, tokenizer, None
    folder = tiny.save_tiny(tmp / "base", texts, seed=args.seed, **args.tiny_shape)
    model, tokenizer = model_io.load_model(str(folder), args.dtype)
    return model, tokenizer, folder


def _adapt(args: argparse.Namespace, model: Any) -> Any:
    """``model`` with LoRA adapters (only they train), or as it is for a full fine-tune."""
    if args.method == "full":
        return model
    from peft import LoraConfig, get_peft_model

    targets = args.lora_target_modules.strip()
    config = LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()],
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def _eval_loss(model: nn.Module, data: Encoded, device: torch.device, batch: int = 16) -> float:
    """The mean loss over the response tokens of ``data`` (NaN when it is empty)."""
    if not len(data):
        return float("nan")
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(data), batch):
            rows = torch.arange(start, min(start + batch, len(data))).numpy()
            tensors = data.batch(rows, device)
            logits = model(input_ids=tensors["input_ids"], attention_mask=tensors["attention_mask"]).logits
            total += float(token_loss_sum(logits, tensors["labels"]))
            count += data.targets(rows)
    model.train()
    return total / max(count, 1)


def _global_sum(ctx: DistContext, value: float) -> float:
    if ctx.world_size == 1:
        return value
    box = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(box)
    return float(box.item())


def train(args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(args.threads)
    if args.global_batch_size and (sizes := world_sizes_of_elastic_job(dict(os.environ))) is not None:
        check_world_sizes(args.global_batch_size, sizes)  # before any step, not at the first resize
    train_rows, test_rows = read_split(args.dataset, "train"), read_split(args.dataset, "test")
    with tempfile.TemporaryDirectory(prefix="kftrain-llm-base-") as tmp:
        texts = [prompts.render(e.prompt) + e.response for e in train_rows]
        # Before the process group: once it exists, save_pretrained writes on rank 0 only
        # (huggingface/transformers@v5.25.0:src/transformers/distributed/mixin.py:345-350), and each replica makes
        # the embedded base in a folder of its own.
        base, tokenizer, base_folder = _base_model(args, texts, Path(tmp))
        ctx = init_distributed(args.backend)
        plan = torch_common.batch_plan(args, ctx.world_size)
        order = GlobalOrder(len(train_rows), global_batch_size(args, ctx.world_size), args.seed)
        torch.manual_seed(args.seed)  # the same LoRA initialization on every rank
        model = _adapt(args, base).to(ctx.device)
        model.train()
        data = Encoded.of(tokenizer, [(e.prompt, e.response) for e in train_rows], args.max_length)
        if data.truncated:
            log.warning("%d of %d training examples are longer than --max-length %d: cut", data.truncated,
                        len(data), args.max_length)  # fmt: skip
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
        weights = TrainableWeights(model)
        # Every rank resumes from the checkpoint rank 0 chose (a newer one may appear while they look).
        step, position = torch_common.restore(_agreed(ctx, torch_common.latest_uri(args.checkpoint_dir)), weights, opt)
        ddp = DistributedDataParallel(model) if ctx.world_size > 1 else None
        forward: nn.Module = ddp or model
        total_steps = order.steps_per_epoch * args.epochs
        trainable, everything = sum(p.numel() for p in params), tiny.parameter_count(model)
        log.info("rank %d/%d: %s, %d of %d parameters trained, %d examples, %d steps of %d global batches/epoch",
                 ctx.rank, ctx.world_size, args.method, trainable, everything, len(data), total_steps,
                 order.steps_per_epoch)  # fmt: skip
        if ctx.is_chief:
            metrics.report_total(step=total_steps)
        policy = checkpoint.CheckpointPolicy(
            args.checkpoint_every_steps, args.checkpoint_every_seconds, keep=args.keep_checkpoints
        )
        saver = checkpoint.Checkpointer(
            args.checkpoint_dir, keep=args.keep_checkpoints, max_in_flight=args.checkpoints_in_flight
        )
        started = window_start = time.monotonic()
        window_loss, window_targets, window_tokens, trained_tokens = 0.0, 0, 0, 0
        loss = float("nan")
        saved_step = step
        with saver:
            for epoch in range(position.epoch, args.epochs):
                for b in torch_common.epoch_batches(order, position, epoch):
                    faults.hold(step, ctx.rank)
                    lr = _learning_rate(args, step, total_steps)
                    torch_common.set_lr(opt, lr)
                    global_rows = order.global_rows(epoch, b)
                    targets = data.targets(global_rows)
                    micro = order.micro_batches(epoch, b, plan, ctx.rank)
                    seeds = order.micro_batch_seeds(epoch, b, plan, ctx.rank)
                    for i, rows in enumerate(micro):
                        torch.manual_seed(seeds[i])  # dropout masks independent of the world size and a resume
                        last = i == len(micro) - 1
                        with nullcontext() if last or ddp is None else ddp.no_sync():
                            tensors = data.batch(rows, ctx.device)
                            logits = forward(input_ids=tensors["input_ids"],
                                             attention_mask=tensors["attention_mask"]).logits  # fmt: skip
                            summed = token_loss_sum(logits, tensors["labels"])
                            # DDP averages over the processes: scaled so the sum is the global batch's token mean.
                            (summed * ctx.world_size / max(targets, 1)).backward()
                        window_loss += float(summed.detach())
                    if args.max_grad_norm:
                        torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    step += 1
                    window_targets += targets
                    window_tokens += data.tokens(global_rows)
                    position = order.normalize(SamplerPosition(epoch, b + 1))
                    if args.log_samples:
                        torch_common.log_samples(step, SamplerPosition(epoch, b), b, ctx.rank, ctx.world_size,
                                                 order.process_rows(epoch, b, ctx.rank, ctx.world_size))  # fmt: skip
                    if step % args.log_every_steps == 0 or step == total_steps:
                        loss = _global_sum(ctx, window_loss) / max(window_targets, 1)
                        now = time.monotonic()
                        if ctx.is_chief:
                            rate = window_tokens / max(now - window_start, 1e-9)
                            log.info("step %d/%d loss %.4f tokens/s %.0f lr %.3g", step, total_steps, loss, rate, lr)
                            metrics.report(step=step, loss=loss, tokens_per_s=rate, learning_rate=lr)
                        trained_tokens += window_tokens
                        window_loss, window_targets, window_tokens, window_start = 0.0, 0, 0, now
                    faults.maybe_inject_fault(step, ctx.rank)
                    if args.checkpoint_dir and ctx.is_chief and policy.due(step):
                        torch_common.save_checkpoint(saver, step, position, weights, opt)
                        policy.saved()
                        saved_step = step
                every = args.checkpoint_every_epochs
                if args.checkpoint_dir and ctx.is_chief and every and (epoch + 1) % every == 0 and saved_step != step:
                    torch_common.save_checkpoint(saver, step, SamplerPosition(epoch + 1, 0), weights, opt)
                    saved_step = step
        elapsed = time.monotonic() - started
        result = {"loss": loss, "steps": float(step), "train_seconds": elapsed,
                  "tokens_per_s": (trained_tokens + window_tokens) / max(elapsed, 1e-9),
                  "trainable_parameters": float(trainable), "parameters": float(everything)}  # fmt: skip
        if ctx.is_chief:
            _finish(args, model, tokenizer, base_folder, test_rows, result, ctx)
    if ctx.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()
    return result


def _finish(
    args: argparse.Namespace,
    model: Any,
    tokenizer: Any,
    base_folder: Path | None,
    test_rows: list[Any],
    result: dict[str, float],
    ctx: DistContext,
) -> None:
    """Rank 0: the final eval loss over held-out examples, then the model published (nothing half-written)."""
    held_out = [(e.prompt, e.response) for e in test_rows[: args.eval_examples]]
    result["eval_loss"] = _eval_loss(model, Encoded.of(tokenizer, held_out, args.max_length), ctx.device)
    if result["eval_loss"] == result["eval_loss"]:
        metrics.report(step=int(result["steps"]), eval_loss=result["eval_loss"])
    info = {
        "base_model": args.model_uri or EMBEDDED,
        "method": args.method,
        "dataset": args.dataset,
        "prompt_template": prompts.render("{prompt}"),
        "max_length": args.max_length,
        "training": {
            k: v for k, v in vars(args).items() if k not in ("dataset", "model_dir", "checkpoint_dir", "hidden")
        },
        "metrics": {k: (None if v != v else v) for k, v in result.items()},
    }
    model_io.write_finetuned(args.model_dir, model, tokenizer, info, base_folder=base_folder)
    log.info("model written to %s", args.model_dir)


def main(argv: list[str] | None = None) -> int:
    return torch_main(lambda: train(parse_args(argv)))


if __name__ == "__main__":
    run(main)
