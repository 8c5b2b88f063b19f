"""Which model a folder holds: read from its ``model.json`` when there is one, else recognised from its files.

Any program's folder is accepted, marker or not (the launch step has seen the job finish). The format comes from the
content, never from the trainer: ``model.json``'s ``format`` (and ``file``), else a ``saved_model.pb``, a ``*.onnx``,
a ``*.keras``/``*.h5`` or a TorchScript archive (a zip with ``code/``). A ``torch.save`` pickle is refused, naming the
file and what to write instead. Standard library only (plus storage), read through
:class:`~kftrain.models.folder.ModelFolder`.
"""

from __future__ import annotations

import json
import posixpath
import zipfile
from dataclasses import dataclass

from kftrain import storage
from kftrain.errors import KftrainError
from kftrain.models.folder import ModelFolder
from kftrain.models.spec import (
    FORMATS,
    KERAS,
    KFTRAIN_MLP,
    METRICS_FILE,
    MODEL_INFO,
    ONNX,
    SAVEDMODEL,
    TORCHSCRIPT,
    ModelError,
    ModelSpec,
    spec_from_info,
)

CONTRACT = "see the model contract in kftrain/models/README.md"
TORCH_SUFFIXES = (".pt", ".pth", ".pts", ".ptc", ".torchscript", ".jit")
KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
# Files a model folder may hold beside the model, never mistaken for one.
SIDE_FILES = {MODEL_INFO, METRICS_FILE, storage.COMPLETE_MARKER}
# Serialisations evaluation and export cannot load, and what to write instead.
UNSUPPORTED = {
    (".pkl", ".pickle", ".joblib"): "a pickle needs the Python code that made it",
    (".safetensors", ".bin", ".ckpt"): "weights without the model's architecture",
}
TORCH_SAVE_ADVICE = (
    "a torch.save() pickle (a state dict or a whole module), not TorchScript: loading it needs your model's "
    "Python class, which evaluation and export do not have. Write TorchScript instead: "
    "torch.jit.save(torch.jit.script(model), 'model.pt') (or torch.jit.trace(model, example_batch)), or ONNX "
    "with torch.onnx.export; kftrain.models.save_model(model, uri, example_input=batch) does either"
)


@dataclass(frozen=True)
class Candidate:
    format: str
    path: str  # relative to the model folder ("" for the folder itself)


def describe_model(uri: str) -> ModelSpec:
    """The model in the folder at ``uri``; a :class:`ModelError` saying what is wrong and how to fix it."""
    folder = open_folder(uri)
    files = model_files(folder)
    info = read_model_info(folder) if MODEL_INFO in files else {}
    fmt = info.get("format") or legacy_format(info)
    if fmt:
        if fmt not in FORMATS:
            raise ModelError(f"{storage.join(uri, MODEL_INFO)}: format {fmt!r} is not one of {', '.join(FORMATS)}")
        path = info.get("file")
        if path is None:
            path = default_path(folder, fmt, files)
        else:
            confined = _confined(path, uri) if isinstance(path, str) else None
            if confined is None or not _present(confined, files):
                raise ModelError(
                    f"{storage.join(uri, MODEL_INFO)}: file {path!r} is not in the model folder "
                    f"(it holds {_listing(files)})"
                )
            path = confined
        if fmt == TORCHSCRIPT and path:
            _require_torchscript(folder, path)
        return spec_from_info(uri, fmt, path, info)
    found = candidates(folder, files)
    if len(found) > 1:
        listed = ", ".join(f"{c.path or '.'} ({c.format})" for c in found)
        raise ModelError(
            f"{uri}: more than one model ({listed}): say which in {MODEL_INFO} "
            f'({{"format": "{found[0].format}", "file": "{found[0].path}"}}); {CONTRACT}'
        )
    if not found:
        raise ModelError(f"{uri}: no model found among {_listing(files)}: {_unrecognised(uri, files)}; {CONTRACT}")
    return spec_from_info(uri, found[0].format, found[0].path, info)


def open_folder(uri: str) -> ModelFolder:
    """The model folder at ``uri``; an error when it is missing, or its marker cannot be read."""
    try:
        if not storage.exists(uri):
            raise ModelError(f"{uri}: no model there (the folder does not exist); {CONTRACT}")
        return ModelFolder(uri)
    except (NotADirectoryError, KftrainError) as exc:
        if isinstance(exc, ModelError):
            raise
        raise ModelError(f"{uri}: cannot read the model folder: {exc}") from None


def model_files(folder: ModelFolder) -> list[str]:
    """Relative paths (``/``-separated) of the files in the model folder; an error when it is empty."""
    uri = folder.uri
    try:
        files = folder.files()
    except (NotADirectoryError, KftrainError) as exc:
        raise ModelError(f"{uri}: cannot list the model folder: {exc}") from None
    if not files or files == [storage.COMPLETE_MARKER]:
        raise ModelError(f"{uri}: the model folder is empty; {CONTRACT}")
    return files


def read_model_info(folder: ModelFolder) -> dict[str, object]:
    """The folder's ``model.json``; an error naming it when it is not a JSON object."""
    where = storage.join(folder.uri, MODEL_INFO)
    try:
        info = json.loads(folder.read_bytes(MODEL_INFO))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(info, dict):
        raise ModelError(f"{where}: expected a JSON object, got {type(info).__name__}")
    return info


def legacy_format(info: dict[str, object]) -> str:
    """The format of a ``model.json`` written before it named one (this release's own programs)."""
    if info.get("framework") == "pytorch" and info.get("architecture") == "mlp":
        return KFTRAIN_MLP
    if info.get("framework") == "tensorflow":
        return SAVEDMODEL
    return ""


def default_path(folder: ModelFolder, fmt: str, files: list[str]) -> str:
    """Where a format's model is when ``model.json`` names the format but not the file."""
    if fmt == KFTRAIN_MLP:
        return "model.pt"
    uri = folder.uri
    wanted = [c for c in candidates(folder, files, check_torch=False) if c.format == fmt]
    if len(wanted) != 1:
        what = "none" if not wanted else ", ".join(c.path or "." for c in wanted)
        raise ModelError(
            f"{storage.join(uri, MODEL_INFO)}: format {fmt!r} but {what} found among {_listing(files)}: "
            f'name the file ("file": "...")'
        )
    return wanted[0].path


def candidates(folder: ModelFolder, files: list[str], *, check_torch: bool = True) -> list[Candidate]:
    """Every model the files hold, by what they are; TorchScript archives told from ``torch.save`` pickles."""
    found: list[Candidate] = []
    savedmodels = sorted({posixpath.dirname(f) for f in files if posixpath.basename(f).startswith("saved_model.pb")})
    found += [Candidate(SAVEDMODEL, d) for d in savedmodels]
    inside_savedmodel = tuple(f"{d}/" if d else "" for d in savedmodels)
    for f in files:
        if f in SIDE_FILES or (savedmodels and any(f.startswith(p) for p in inside_savedmodel)):
            continue
        lower = f.lower()
        if lower.endswith(".onnx"):
            found.append(Candidate(ONNX, f))
        elif lower.endswith(KERAS_SUFFIXES):
            found.append(Candidate(KERAS, f))
        elif lower.endswith(TORCH_SUFFIXES):
            if check_torch:
                _require_torchscript(folder, f)
            found.append(Candidate(TORCHSCRIPT, f))
    return found


def is_torchscript(uri: str) -> bool:
    """Whether the file at ``uri`` is a TorchScript archive (a zip holding ``code/``), not a torch.save pickle."""
    with storage.open_uri(uri, "rb") as handle:
        if handle.read(4) != b"PK\x03\x04":
            return False  # the legacy (pre-1.6) torch.save format: a bare pickle
        handle.seek(0)
        try:
            names = zipfile.ZipFile(handle).namelist()
        except zipfile.BadZipFile:
            return False
    return any("/code/" in n or n.startswith("code/") for n in names) and any(
        n.endswith("constants.pkl") for n in names
    )


def _require_torchscript(folder: ModelFolder, rel: str) -> None:
    uri = folder.uri_of(rel)
    if not is_torchscript(uri):
        raise ModelError(f"{uri}: {TORCH_SAVE_ADVICE}; {CONTRACT}")


def _confined(path: str, uri: str) -> str:
    """``model.json``'s ``file``: a path inside the model folder ("" or "." for the folder itself)."""
    path = path.rstrip("/")  # a SavedModel folder may be named "saved/"; a leading "/" is refused below
    if path in ("", "."):
        return ""
    try:
        return storage.confine(path, f"{storage.join(uri, MODEL_INFO)} (file)")
    except KftrainError as exc:
        raise ModelError(str(exc)) from None


def _present(path: str, files: list[str]) -> bool:
    path = path.strip("/")
    return not path or path in files or any(f.startswith(path + "/") for f in files)


def _unrecognised(uri: str, files: list[str]) -> str:
    for suffixes, why in UNSUPPORTED.items():
        for f in files:
            if f.lower().endswith(suffixes):
                return f"{storage.join(uri, f)} is {why}; write TorchScript, ONNX, a SavedModel or a .keras file"
    return "write TorchScript (model.pt), ONNX (model.onnx), a SavedModel (saved_model.pb) or a .keras file"


def _listing(files: list[str], limit: int = 8) -> str:
    shown = ", ".join(files[:limit])
    return f"{shown}, ... ({len(files)} files)" if len(files) > limit else shown
