"""Language-model export: what KServe's Hugging Face runtime serves, checked by reloading it before it is published.

A LoRA model's adapter is merged into the weights (``merge_adapters``), or kept: then ``model/`` is the base and
``adapter/`` the PEFT adapter. Weights are safetensors, beside the tokenizer and ``generation_config.json`` (the
stated generation config, :mod:`kftrain.llm.generate`). The written model is reloaded through the same loader a
real model uses and must answer the check prompts as the fine-tuned model does, with next-token logits within
:data:`TOLERANCE`, before anything is published (one :class:`~kftrain.storage.ArtifactWriter`). The export also
holds ``export.json`` and the KServe ``InferenceService`` (``modelFormat: huggingface``) serving it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kftrain import storage
from kftrain.errors import ExportError
from kftrain.llm.generate import GenerationSettings, generate
from kftrain.llm.model_io import load_finetuned, load_model
from kftrain.llm.prompts import encode_prompt
from kftrain.models import kserve
from kftrain.models.kserve import check_model_name
from kftrain.storage.uri import split_uri

MODEL_DIR, ADAPTER_DIR = "model", "adapter"
MANIFEST = "kserve/inferenceservice.yaml"
TOLERANCE = 1e-3  # next-token logits, reloaded against the fine-tuned model (merging reorders float sums)
# Where KServe's storage initializer puts storageUri's files, and the Hugging Face server's default --model_dir
# (kserve/kserve@v0.20.0:pkg/constants/constants.go:508; python/huggingfaceserver/huggingfaceserver/__main__.py:80-85).
MOUNT = "/mnt/models"


@dataclass
class LanguageExport:
    """What was exported, how it was checked, and the InferenceService serving it."""

    model_name: str
    method: str  # the fine-tuning's: lora or full
    merged: bool
    files: list[str] = field(default_factory=list)
    checks: list[dict[str, str]] = field(default_factory=list)  # prompt, answer (the reloaded model's)
    max_logit_diff: float = 0.0
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    inference_service: dict[str, Any] = field(default_factory=dict)
    service_account: dict[str, Any] = field(default_factory=dict)

    def manifest(self) -> str:
        """The InferenceService, then the ServiceAccount it names if any: what ``kubectl apply`` takes."""
        return kserve.manifest_yaml(self.inference_service, *([self.service_account] if self.service_account else []))

    def served_uri(self) -> str:
        return str(self.inference_service["spec"]["predictor"]["model"]["storageUri"])

    def to_metadata(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "format": "huggingface",
            "method": self.method,
            "adapters": "merged" if self.merged or self.method == "full" else "kept",
            "model": MODEL_DIR,
            **({"adapter": ADAPTER_DIR} if self.method == "lora" and not self.merged else {}),
            "generation_config": self.settings.as_dict(),
            "checked_prompts": len(self.checks),
            "max_logit_diff": self.max_logit_diff,
            "inference_service": MANIFEST,
        }


def export_language_model(
    model_uri: str,
    output_uri: str,
    prompts: list[str],
    *,
    model_name: str = "model",
    merge_adapters: bool = True,
    settings: GenerationSettings | None = None,
) -> LanguageExport:
    """Write the fine-tuned model at ``model_uri`` to ``output_uri``, checked on ``prompts`` by reloading it."""
    check_model_name(model_name)
    if not prompts:
        raise ExportError("no prompt to check the export with: the split has no examples")
    settings = settings or GenerationSettings()
    model, tokenizer, info = load_finetuned(model_uri)
    lora = info["method"] == "lora"
    keep = lora and not merge_adapters
    expected = generate(model, tokenizer, prompts, settings)
    expected_logits = _next_logits(model, tokenizer, prompts)
    report = LanguageExport(model_name, info["method"], lora and merge_adapters, settings=settings)
    with tempfile.TemporaryDirectory(prefix="kftrain-llm-export-") as tmp:
        folder = Path(tmp)
        if keep:
            model.save_pretrained(folder / ADAPTER_DIR)
            model = model.unload()  # the base's own layers back, the adapter left out
        elif lora:
            model = model.merge_and_unload()
        model.generation_config = settings.config(tokenizer)
        model.save_pretrained(folder / MODEL_DIR)
        tokenizer.save_pretrained(folder / MODEL_DIR)
        reloaded, reloaded_tokenizer = _reload(folder, keep)
        answers = generate(reloaded, reloaded_tokenizer, prompts, settings)
        report.max_logit_diff = float(
            (_next_logits(reloaded, reloaded_tokenizer, prompts) - expected_logits).abs().max()
        )
        _check(folder, prompts, expected, answers, report.max_logit_diff)
        report.checks = [{"prompt": p, "answer": a} for p, a in zip(prompts, answers, strict=True)]
        report.files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        with storage.ArtifactWriter(output_uri) as writer:
            writer.add(folder)
            report.inference_service, report.service_account = inference_service(model_name, output_uri, keep)
            writer.write_bytes(MANIFEST, report.manifest().encode())
            writer.write_json("export.json", {**report.to_metadata(), "checks": report.checks})
            writer.metadata = report.to_metadata()
    return report


def _reload(folder: Path, keep: bool) -> tuple[Any, Any]:
    """The written model, loaded as a server loads it: the folder (and the adapter on it)."""
    model, tokenizer = load_model(str(folder / MODEL_DIR))
    if keep:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(folder / ADAPTER_DIR))
    return model, tokenizer


def _next_logits(model: Any, tokenizer: Any, prompts: list[str]) -> Any:
    """The logits of the first answer token of each prompt (one prompt at a time: no padding involved)."""
    import torch

    with torch.no_grad():
        rows = [model(input_ids=torch.tensor([encode_prompt(tokenizer, p)])).logits[0, -1].float() for p in prompts]
    return torch.stack(rows)


def _check(folder: Path, prompts: list[str], expected: list[str], answers: list[str], diff: float) -> None:
    """Refuse an export that is not safetensors, or that does not answer as the fine-tuned model does."""
    pickled = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.bin"))
    if pickled or not list(folder.rglob("*.safetensors")):
        raise ExportError(f"the export's weights are not all safetensors ({', '.join(pickled) or 'none written'})")
    if diff > TOLERANCE:
        raise ExportError(
            f"the reloaded export's logits differ from the fine-tuned model's by {diff:.2e} > {TOLERANCE}"
        )
    for prompt, want, got in zip(prompts, expected, answers, strict=True):
        if want != got:
            raise ExportError(
                f"the reloaded export answers {prompt[:80]!r} with {got[:80]!r}, the fine-tuned model {want[:80]!r}"
            )


def inference_service(name: str, output_uri: str, keep_adapter: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The InferenceService serving the export with KServe's Hugging Face runtime (``modelFormat: huggingface``,
    kserve/kserve@v0.20.0:config/runtimes/kserve-huggingfaceserver.yaml:11-14, which sets ``--model_name``
    itself), and the ServiceAccount naming a store's endpoint ({} when none is needed). A merged model is served
    from ``model/`` mounted at :data:`MOUNT`; a kept adapter needs vLLM's LoRA serving: the whole export is mounted,
    ``--model_dir`` the base, ``--enable-lora --lora-modules <name>=<adapter>``
    (python/huggingfaceserver/huggingfaceserver/__main__.py:64-67, the vLLM backend; 333-336, each LoRA module
    served under its name; tests/test_vllm_lora.py:41-47, the flags)."""
    account: dict[str, Any] = {}
    if split_uri(output_uri)[0] == "s3":
        endpoint = storage.s3_endpoint(output_uri)
        if endpoint:
            account = kserve.service_account(f"{name}-storage", endpoint)
    if keep_adapter:
        args = [
            "--backend=vllm",
            f"--model_dir={MOUNT}/{MODEL_DIR}",
            "--enable-lora",
            f"--lora-modules={name}-adapter={MOUNT}/{ADAPTER_DIR}",
        ]
        model = {"modelFormat": {"name": "huggingface"}, "args": args, "storageUri": kserve.storage_uri(output_uri)}
    else:
        served = kserve.storage_uri(storage.join(output_uri, MODEL_DIR))
        model = {"modelFormat": {"name": "huggingface"}, "storageUri": served}
    service = kserve.predictor_service(name, model, account.get("metadata", {}).get("name", ""))
    return service, account
