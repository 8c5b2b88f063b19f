"""A component's Python function called as KFP calls it, for the tests beside each component: the export
components' outputs under one folder, and the check that a bad input ends the step before it writes anything."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kfp import dsl


def export(component: Any, folder: Path, model_uri: str, dataset_uri: str, **inputs: Any) -> tuple[Any, Any]:
    """An export component (``export_model``, ``export_language_model``) on the model at ``model_uri``; its outputs
    ``exported`` and ``inference_service`` under ``folder`` (``exported``, ``isvc``), returned."""
    exported = dsl.Model(name="exported", uri=str(folder / "exported"), metadata={})
    service = dsl.Artifact(name="inference_service", uri=str(folder / "isvc"), metadata={})
    model = dsl.Model(name="model", uri=model_uri, metadata={})
    component.python_func(model=model, dataset_uri=dataset_uri, exported=exported, inference_service=service, **inputs)
    return exported, service


def refused_before_writing(
    call: Callable[[], object], folder: Path, capsys: pytest.CaptureFixture[str], named: str
) -> None:
    """``call`` ends the step with exit code 2, its error naming ``named``, and ``folder`` still empty."""
    with pytest.raises(SystemExit) as ended:
        call()
    assert ended.value.code == 2
    assert named in capsys.readouterr().err
    assert list(folder.iterdir()) == []
