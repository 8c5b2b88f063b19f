"""llm-finetune: its wiring as compiled (every step of each job kind's branch, the program and its flags, the gate on
the evaluation's verdict), and end to end through KFP's local runner on the embedded default, as `make run
PIPELINE=llm-finetune` runs it (slow)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from testbed import REPO_ROOT
from testbed.needs import require
from testbed.pipeline_harness import executor_output, run_pipeline, step

COMPILED = REPO_ROOT / "pipelines" / "llm" / "llm_finetune" / "pipeline.yaml"


def spec() -> dict[str, Any]:
    return next(yaml.safe_load_all(COMPILED.read_text()))


def dag_tasks(component: dict[str, Any]) -> dict[str, Any]:
    return component["dag"]["tasks"]


def test_each_job_kind_branch_launches_the_finetuning_program_then_evaluates_and_gates():
    compiled = spec()
    components = compiled["components"]
    root = dag_tasks(compiled["root"])
    assert {"prepare-instructions", "finetune-args", "condition-branches-1"} <= set(root)
    flags = root["finetune-args"]["inputs"]["parameters"]
    assert "extra" not in flags  # the URIs' flags are finetune_args' own (components/training/finetune_args)
    assert flags["model_uri"]["componentInputParameter"] == "model_uri"
    executors = compiled["deploymentSpec"]["executors"]
    branches = (("condition-2", "pytorchjob-launch", ""), ("condition-3", "trainjob-launch", "-2"))
    for branch, launch, n in branches:  # KFP numbers the second branch's tasks
        tasks = dag_tasks(components[f"comp-{branch}"])
        assert set(tasks) == {launch, f"evaluate-language-model{n}", f"quality-gate-llm{n}"}, (branch, sorted(tasks))
        given = tasks[launch]["inputs"]["parameters"]
        assert given["args"] == {"componentInputParameter": "pipelinechannel--finetune-args-Output"}
        assert given["dataset_uri"] == {"componentInputParameter": "pipelinechannel--prepare-instructions-dataset_uri"}
        command = given["command"]["runtimeValue"]["constant"]
        assert command[-2:] == ["-m", "kftrain.programs.hf_finetune"], command
        gate = tasks[f"quality-gate-llm{n}"]["inputs"]["parameters"]["passed"]["taskOutputParameter"]
        assert gate == {"outputParameterKey": "passed", "producerTask": f"evaluate-language-model{n}"}
    for gate in ("comp-quality-gate-llm", "comp-quality-gate-llm-2"):
        (condition,) = dag_tasks(components[gate]).values()
        (export,) = dag_tasks(components[condition["componentRef"]["name"]]).values()
        assert export["componentRef"]["name"].startswith("comp-export-language-model"), gate
    assert any("kftrain.steps.export_llm" in json.dumps(e) for e in executors.values())


def test_an_unknown_job_kind_fails_the_run_naming_the_kinds():
    compiled = spec()
    tasks = [t for c in compiled["components"].values() if "dag" in c for t in dag_tasks(c).values()]
    (failed,) = [t for t in tasks if t["taskInfo"]["name"] == "fail"]
    assert "PyTorchJob, TrainJob" in failed["inputs"]["parameters"]["message"]["runtimeValue"]["constant"]


def test_make_run_installs_the_llm_extra_for_this_pipeline():
    makefile = (REPO_ROOT / "Makefile").read_text()
    line = next(x for x in makefile.splitlines() if x.startswith("RUN_EXTRAS_llm-finetune"))
    assert "llm" in line.split(":=")[1].split(",")


@pytest.mark.slow
def test_the_embedded_default_learns_and_is_exported(tmp_path):
    """`make run PIPELINE=llm-finetune`'s run: the tiny model fine-tuned on the synthetic task by a PyTorchJob of
    two processes, the gate passing on what it learned (exact match of the fine-tuned model over the threshold, the
    base model's far under), the export reloaded and answering."""
    require("transformers", "peft", "torch")
    run = run_pipeline("llm-finetune", tmp_path, timeout=1200)
    for name in ("prepare-instructions", "finetune-args", "pytorchjob-launch", "evaluate-language-model"):
        assert (step(run.run_dir, name) / "executor_output.json").exists(), name
    assert "[master-0]" in run.log and "[worker-0]" in run.log
    metrics = executor_output(step(run.run_dir, "evaluate-language-model"))
    assert metrics["parameterValues"]["passed"] is True, metrics
    assert metrics["parameterValues"]["score"] >= 0.8, metrics
    exported = step(run.run_dir, "export-language-model")
    assert (exported / "executor_output.json").exists()
