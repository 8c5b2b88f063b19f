"""The flags every trainer of this release takes, declared once as component inputs (:class:`TrainerFlags`), and
the factory that writes a flags component from them: ``trainer_args`` (those flags) and ``finetune_args`` (the
fine-tuning program's own inputs first). KFP embeds a component function's source text, signature included
(:mod:`kftrain_components.component_function`), so each function is written from the tables; the body calls
:func:`kftrain.programs.common.trainer_flags`. Module scope imports only kfp, the standard library and kftrain's
input tables.
"""

# ruff: noqa: RUF009 (each field's call returns a dataclasses.field, not a shared default)

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kftrain.inputs import Parameter, component_input, function_source, parameters
from kftrain_components.component_function import define
from kftrain_components.images import LAUNCH_IMAGE


@dataclass(frozen=True)
class TrainerFlags:
    """The inputs of :func:`kftrain.programs.common.trainer_flags` (``learning_rate``: its ``lr``), ``extra`` last."""

    epochs: int = component_input(0, "--epochs (0: the program's default).")
    global_batch_size: int = component_input(
        0,
        "--global-batch-size, examples per optimizer step across all processes, kept at every world size "
        "(0: --batch-size x the processes).",
    )
    batch_size: int = component_input(
        0, "--batch-size, the most examples a process computes at once (0: the program's default)."
    )
    learning_rate: float = component_input(0.0, "--lr (0: the program's default).")
    seed: int = component_input(-1, "--seed (-1: the program's default).")
    checkpoint_every_steps: int = component_input(0, "--checkpoint-every-steps (0: the program's default).")
    extra: list[str] = component_input([], "Further arguments, appended as they are.")


# trainer_flags' keyword where it is not the input's name (the pipelines' parameter is learning_rate).
KEYWORDS = {"learning_rate": "lr"}


def trainer_flags_call(extra: str = "extra") -> str:
    """The source of one call of ``trainer_flags`` with every input of :class:`TrainerFlags` by name, its ``extra``
    the expression ``extra``."""
    values = {p.name: p.name for p in parameters(TrainerFlags)} | {"extra": extra}
    return "trainer_flags(\n" + "".join(f"    {KEYWORDS.get(k, k)}={v},\n" for k, v in values.items()) + ")"


def flags_component(module: str, own: Sequence[Parameter], body: str) -> Any:
    """The component defined in ``module`` (``components/training/<name>/component.py``): named as its folder,
    described by the module's docstring, its inputs ``own`` then :class:`TrainerFlags`', its body ``body``, which
    returns the list of flags (the component's one output)."""
    name = module.rsplit(".", 2)[-2]
    summary, _, details = (sys.modules[module].__doc__ or name).partition("\n\n")
    source = function_source(name, summary.strip(), details, [*own, *parameters(TrainerFlags)], body)
    # The one output is the returned list, as KFP reads a function's return annotation.
    head, sep, rest = source.partition("\n):\n")
    assert sep, "function_source wrote no signature's end"
    return define(module, name, f"{head}\n) -> list:\n{rest}", base_image=LAUNCH_IMAGE, install_kfp_package=False)
