"""Loading and writing language models: one path for a real model and the embedded tiny one alike.

:func:`load_model` reads a Hugging Face model folder (``config.json``, safetensors, tokenizer files) at a local path,
a ``file://`` URI, an object-store prefix (``s3://``, ``minio://``, through :class:`kftrain.models.folder.ModelFolder`,
checked against its completion marker when it has one), or Trainer's model-initializer folder ``/workspace/model``
(``$KFTRAIN_WORKSPACE/model`` where a local run cannot mount ``/workspace``). The fine-tuning program's output is
self-describing: ``kftrain-llm.json`` (:data:`INFO_FILE`: ``base_model``, ``method``...), the tokenizer, and either
the full weights or ``adapter/`` (PEFT), and ``base/`` when the base was made at run time. :func:`write_finetuned`
publishes that folder atomically; :func:`load_finetuned` reads it back, :func:`load_base` the base it started from.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kftrain import storage
from kftrain.contract import WORKSPACE_ENV
from kftrain.errors import KftrainError
from kftrain.models.folder import ModelFolder

INFO_FILE = "kftrain-llm.json"
FORMAT = "kftrain-llm/v1"
ADAPTER_DIR = "adapter"
BASE_DIR = "base"
METHODS = ("lora", "full")
WORKSPACE = "/workspace"  # kubeflow/trainer@v2.3.0 pkg/initializers/utils/utils.py:27 WORKSPACE_PATH


class ModelLoadError(KftrainError):
    """A model folder that cannot be loaded, named with the reason."""


def resolve(uri: str) -> str:
    """``uri`` with Trainer's ``/workspace`` replaced by ``$KFTRAIN_WORKSPACE`` where a local run set it."""
    given = os.environ.get(WORKSPACE_ENV)
    if given and (uri == WORKSPACE or uri.startswith(WORKSPACE + "/")):
        return given + uri[len(WORKSPACE) :]
    return uri


@contextmanager
def local_folder(uri: str) -> Iterator[Path]:
    """A local path of the model folder at ``uri`` (in place, or a checked download removed afterwards)."""
    if not uri:
        raise ModelLoadError("model URI: empty; give a Hugging Face model folder (a path or an s3:// prefix)")
    if uri.startswith("hf://"):
        raise ModelLoadError(
            f"{uri}: models are not downloaded here; let Trainer's model initializer fetch it and give /workspace/model"
        )
    resolved = resolve(uri)
    if not storage.exists(resolved):
        raise ModelLoadError(f"{uri}: no model folder there")
    with ModelFolder(resolved).local_copy() as path:
        yield path


def _load_tokenizer(path: Path, uri: str) -> Any:
    from transformers import AutoTokenizer

    if not (path / "tokenizer_config.json").is_file():
        raise ModelLoadError(f"{uri}: no tokenizer files (tokenizer_config.json)")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:  # Llama's and others' have none: pad with EOS (masked out of the loss anyway)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_pretrained(path: Path, uri: str, dtype: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{uri}: not a Hugging Face model folder (no config.json)")
    tokenizer = _load_tokenizer(path, uri)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    return model, tokenizer


def load_model(uri: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) of the Hugging Face causal LM folder at ``uri``."""
    with local_folder(uri) as path:
        return _load_pretrained(path, uri, dtype)


def read_info(uri: str) -> dict[str, Any]:
    """The ``kftrain-llm.json`` of the fine-tuned model at ``uri``, checked."""
    folder = ModelFolder(resolve(uri))
    if INFO_FILE not in folder.files():
        raise ModelLoadError(f"{uri}: no {INFO_FILE}; not a model written by kftrain.programs.hf_finetune")
    info = json.loads(folder.read_bytes(INFO_FILE))
    if not isinstance(info, dict):
        raise ModelLoadError(f"{uri}/{INFO_FILE}: not a JSON object")
    if info.get("method") not in METHODS:
        raise ModelLoadError(f"{uri}/{INFO_FILE}: method {info.get('method')!r} is not one of {', '.join(METHODS)}")
    return info


def describe(uri: str) -> dict[str, Any] | None:
    """What the launch step records of a language model's folder at ``uri``: the fine-tuning program's
    (``kftrain-llm.json``, checked) or a Hugging Face one (``config.json`` beside safetensors weights, as
    ``save_pretrained`` writes it); None when the folder holds neither."""
    files = ModelFolder(resolve(uri)).files()
    if INFO_FILE in files:
        info = read_info(uri)
        return {"framework": "transformers", "format": FORMAT, "file": ".", "method": info["method"]}
    if "config.json" in files and any(name.endswith(".safetensors") and "/" not in name for name in files):
        return {"framework": "transformers", "format": "huggingface", "file": "."}
    return None


def load_finetuned(uri: str, *, merge: bool = False, dtype: str = "float32") -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, info) of what the fine-tuning program wrote at ``uri``; a LoRA model is a PEFT model on
    its base (the folder's ``base/``, else ``info["base_model"]``), merged into plain weights with ``merge``."""
    info = read_info(uri)
    with local_folder(uri) as path:
        if info["method"] == "full":
            model, tokenizer = _load_pretrained(path, uri, dtype)
            return model, tokenizer, info
        from peft import PeftModel

        model, _ = _base(path, uri, info, dtype)
        tokenizer = _load_tokenizer(path, uri)
        adapter = path / ADAPTER_DIR
        # Without its files PEFT would take the path for a Hub repository id (and fail with a traceback).
        if not (adapter / "adapter_config.json").is_file() or not list(adapter.glob("adapter_model.*")):
            raise ModelLoadError(f"{uri}: no LoRA adapter in {ADAPTER_DIR}/ (adapter_config.json, adapter_model.*)")
        peft_model = PeftModel.from_pretrained(model, str(adapter))
        return (peft_model.merge_and_unload() if merge else peft_model), tokenizer, info


def load_base(uri: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) of the base the fine-tuned model at ``uri`` started from: its ``base/`` (a base made at
    run time travels with it), else the model ``kftrain-llm.json``'s ``base_model`` names."""
    info = read_info(uri)
    with local_folder(uri) as path:
        return _base(path, uri, info, dtype)


def _base(path: Path, uri: str, info: dict[str, Any], dtype: str) -> tuple[Any, Any]:
    if (path / BASE_DIR / "config.json").is_file():
        return _load_pretrained(path / BASE_DIR, f"{uri}/{BASE_DIR}", dtype)
    return load_model(str(info.get("base_model") or ""), dtype)


def write_finetuned(
    uri: str, model: Any, tokenizer: Any, info: dict[str, Any], *, base_folder: str | Path | None = None
) -> dict[str, Any]:
    """Publish the fine-tuned ``model`` at ``uri`` atomically (nothing half-written): full weights, or with
    ``info["method"] == "lora"`` the PEFT adapter in ``adapter/``; ``base_folder`` (a local model folder: the base
    made at run time) as ``base/``; the tokenizer and ``kftrain-llm.json`` beside. The completion manifest."""
    if info.get("method") not in METHODS:
        raise ModelLoadError(f"method {info.get('method')!r} is not one of {', '.join(METHODS)}")
    staging = Path(tempfile.mkdtemp(prefix="kftrain-llm-"))
    try:
        model.save_pretrained(staging / ADAPTER_DIR if info["method"] == "lora" else staging)
        if base_folder is not None:
            shutil.copytree(base_folder, staging / BASE_DIR)
        tokenizer.save_pretrained(staging)
        with storage.ArtifactWriter(uri, metadata={"format": FORMAT, "method": info["method"]}) as writer:
            writer.add(staging)
            writer.write_json(INFO_FILE, {"format": FORMAT, **info})
        return storage.require_complete(uri)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
