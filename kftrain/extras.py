"""Which extra of the ``kftrain`` distribution brings which packages, and the error when one is missing.

``pip install kftrain`` is what authoring, compiling, submitting and launching need; data prep, evaluation,
export and the programs need extras (``kftrain[data]``, ``[samples]``, ``[torch]``, ``[tf]``, ``[onnx]``, ``[s3]``,
``[gcs]``, ``[horovod]``, ``[llm]``), and so does logging to MLflow (``[mlflow]``). A module that needs one imports
those packages under :func:`requires`, so a step run without its extra fails with one line naming the extra to
install, not a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kftrain.errors import KftrainError

# The top-level modules each extra provides (import names, not distribution names).
EXTRA_MODULES: dict[str, frozenset[str]] = {
    "data": frozenset({"numpy", "pyarrow"}),
    "samples": frozenset({"sklearn", "scipy"}),
    "torch": frozenset({"torch", "numpy"}),
    "tf": frozenset({"tensorflow", "tf_keras", "keras", "numpy"}),
    "onnx": frozenset({"onnx", "onnxruntime", "numpy"}),
    "s3": frozenset({"s3fs", "aiobotocore", "botocore", "boto3"}),
    "gcs": frozenset({"gcsfs"}),
    "horovod": frozenset({"horovod"}),
    "crd": frozenset({"celpy", "lark", "pendulum", "re2"}),
    "mlflow": frozenset({"mlflow"}),
    "llm": frozenset({"transformers", "peft", "accelerate", "safetensors", "tokenizers", "torch"}),
}


class MissingExtraError(KftrainError, ModuleNotFoundError):
    """A package of an extra is not installed; the message names the extra. Still a ``ModuleNotFoundError``,
    so code that probes for an optional package keeps working."""

    def __init__(self, extra: str, module: str, needed_by: str) -> None:
        self.extra = extra
        super().__init__(
            f"{needed_by} needs the {module!r} package, which kftrain's [{extra}] extra installs: "
            f"pip install 'kftrain[{extra}]'",
            name=module,
        )


def missing_extra(extra: str, exc: ModuleNotFoundError, needed_by: str) -> MissingExtraError | None:
    """The error to raise for ``exc`` when the missing module is one of ``extra``'s, else None (another cause)."""
    top = (exc.name or "").split(".")[0]
    if top not in EXTRA_MODULES[extra]:
        return None
    return MissingExtraError(extra, top, needed_by)


@contextmanager
def requires(extra: str, needed_by: str) -> Iterator[None]:
    """Imports in this block come from ``extra``; a missing one raises :class:`MissingExtraError` naming it.

    ``needed_by`` says what needs them (``"data prep"``, ``"the PyTorch model loader"``).
    """
    if extra not in EXTRA_MODULES:
        raise ValueError(f"no extra named {extra!r}; known: {', '.join(EXTRA_MODULES)}")
    try:
        yield
    except ModuleNotFoundError as exc:
        error = missing_extra(extra, exc, needed_by)
        if error is None:
            raise
        raise error from None
