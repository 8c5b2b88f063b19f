"""Fine-tuning a language model on Trainer's runtimes, as a real kube-apiserver with Trainer v2.3.0's CRDs admits it
(testbed/controlplane, no operator running): the torchtune runtimes kftrain knows by name, a TrainJob on one with
the `tune run` overrides built from typed inputs, and the llm-finetune pipeline's TrainJob on torch-distributed, each
admitted as it is (not refused, no warning, nothing pruned)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kftrain.job.kinds.trainjob import torchtune
from kftrain.job.kinds.trainjob.builtin import builtin_manifest
from kftrain_components.training.trainjob_launch.component import trainjob_launch
from testbed.controlplane import suite
from testbed.controlplane.admission import create, not_kept
from testbed.controlplane.cluster import ControlPlane, for_tests
from testbed.launch_harness import render_launch

pytestmark = suite.MARKS

NAMESPACE = "kftrain-admission-llm"
TORCHTUNE_RUNTIMES = ("torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b")


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    yield from for_tests()


@pytest.fixture(scope="module")
def custom(cluster: ControlPlane) -> Iterator[Any]:
    for api_client in suite.admin_with_namespace(cluster, NAMESPACE):
        yield client.CustomObjectsApi(api_client)


def admitted(cluster: ControlPlane, custom: Any, manifest: dict[str, Any]) -> None:
    answer = create(cluster, custom, manifest, NAMESPACE)
    assert not answer.refused, answer.body.get("message")
    assert answer.warnings == []
    assert not_kept(manifest, answer.body) == []


@pytest.mark.parametrize("name", TORCHTUNE_RUNTIMES)
def test_a_torchtune_runtime_kftrain_knows_by_name_is_admitted(name: str, cluster: ControlPlane, custom: Any) -> None:
    admitted(cluster, custom, builtin_manifest(name))


def test_a_trainjob_on_a_torchtune_runtime_from_typed_inputs_is_admitted(
    cluster: ControlPlane, custom: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    typed = {"epochs": 1, "batch_size": 2, "lora_rank": 8, "lora_attn_modules": ["q_proj", "v_proj"],
             "dataset": "torchtune.datasets.instruct_dataset", "dataset_source": "json"}  # fmt: skip
    args = torchtune.overrides(typed)
    rendered = render_launch(
        trainjob_launch, monkeypatch, tmp_path, runtime="torchtune-llama3.2-1b", num_nodes=1, num_proc_per_node=1,
        command=list(torchtune.ENTRYPOINT), args=args, shm_size="",
    )  # fmt: skip
    trainer = rendered.manifest["spec"]["trainer"]
    assert trainer["command"] == ["tune", "run"] and trainer["args"] == args  # the plugin completes it there
    admitted(cluster, custom, rendered.manifest)


def test_the_llm_finetune_pipelines_trainjob_is_admitted(
    cluster: ControlPlane, custom: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What the pipeline's launch step creates on torch-distributed (pipelines/llm/llm_finetune): the fine-tuning
    program under torchrun on two nodes."""
    from kftrain_pipelines.llm.llm_finetune.pipeline import FINETUNE_COMMAND

    rendered = render_launch(
        trainjob_launch, monkeypatch, tmp_path, runtime="torch-distributed", num_nodes=2,
        command=list(FINETUNE_COMMAND), args=["--epochs", "1"], task_id="task-2",  # a job name of its own
    )  # fmt: skip
    admitted(cluster, custom, rendered.manifest)
