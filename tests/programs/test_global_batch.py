"""The constant global batch: micro-batches and accumulation from the world size, and a sample order that does
not depend on it (kftrain.programs.global_batch), as the trainers and a user's own script use them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from kftrain.programs.common import trainer_flags, trainer_parser
from kftrain.programs.global_batch import (
    GlobalBatchError,
    GlobalOrder,
    SamplerPosition,
    check_world_sizes,
    plan_batch,
    world_sizes_of_elastic_job,
)


@pytest.mark.parametrize(
    ("world", "max_micro", "micro", "accumulation"),
    [(1, 8, 8, 6), (2, 8, 8, 3), (3, 8, 8, 2), (4, 8, 6, 2), (6, 8, 8, 1), (2, None, 24, 1), (3, 5, 4, 4)],
)
def test_plan_keeps_the_global_batch_and_bounds_the_micro_batch(world, max_micro, micro, accumulation):
    plan = plan_batch(48, world, max_micro)
    assert (plan.micro_batch, plan.accumulation) == (micro, accumulation)
    assert plan.micro_batch * plan.accumulation * world == 48
    assert plan.describe() == f"global batch 48 = {world} process(es) x {accumulation} micro-batch(es) of {micro}"


def test_a_global_batch_the_processes_cannot_share_is_refused_naming_the_flag():
    with pytest.raises(GlobalBatchError, match=r"--global-batch-size 48 cannot be split evenly among 5 processes"):
        plan_batch(48, 5)
    with pytest.raises(GlobalBatchError, match=r"among 5, 7 processes, world sizes this elastic job can take \(2 to 8"):
        check_world_sizes(48, range(2, 9))
    check_world_sizes(48, [2, 3, 4])


def test_elastic_world_sizes_come_from_the_operators_env():
    assert world_sizes_of_elastic_job({"PET_NNODES": "2:4", "PET_NPROC_PER_NODE": "1"}) == range(2, 5)
    assert list(world_sizes_of_elastic_job({"PET_NNODES": "1:3", "PET_NPROC_PER_NODE": "2"}) or []) == [2, 4, 6]
    assert world_sizes_of_elastic_job({"PET_NNODES": "3", "PET_NPROC_PER_NODE": "1"}) is None  # not elastic
    assert world_sizes_of_elastic_job({"PET_NNODES": "2:4", "PET_NPROC_PER_NODE": "auto"}) is None


def test_the_rows_of_a_step_do_not_depend_on_the_world_size():
    order = GlobalOrder(100, 12, seed=5)
    assert order.steps_per_epoch == 8
    for epoch in (0, 3):
        seen: list[int] = []
        for batch in range(order.steps_per_epoch):
            rows = order.global_rows(epoch, batch)
            for world in (1, 2, 3, 4, 6):
                plan = plan_batch(12, world, 2)
                parts = [order.micro_batches(epoch, batch, plan, rank) for rank in range(world)]
                assert np.array_equal(np.concatenate([m for p in parts for m in p]), rows)
            seen += rows.tolist()
        assert len(seen) == len(set(seen)) == 96  # no row twice in an epoch; the last 4 wait for another epoch
    assert not np.array_equal(order.permutation(0), order.permutation(1))
    assert np.array_equal(GlobalOrder(100, 12, seed=5).permutation(3), order.permutation(3))


def test_each_micro_batch_has_its_seed_whatever_the_world_size():
    """The dropout masks of a micro-batch come from its seed: the same rows, the same seed, at any world size."""
    order = GlobalOrder(100, 12, seed=5)
    every: dict[tuple[int, ...], int] = {}
    for world in (1, 2, 3, 6):
        plan = plan_batch(12, world, 2)
        for rank in range(world):
            rows = order.micro_batches(2, 4, plan, rank)
            seeds = order.micro_batch_seeds(2, 4, plan, rank)
            assert len(seeds) == len(rows) == plan.accumulation
            for micro, seed in zip(rows, seeds, strict=True):
                assert every.setdefault(tuple(micro.tolist()), seed) == seed, (world, rank)
    assert len(every) == 6 and len(set(every.values())) == 6  # six micro-batches of 2 rows, six seeds
    plan = plan_batch(12, 2, 2)
    assert order.micro_batch_seeds(2, 5, plan, 0) != order.micro_batch_seeds(2, 4, plan, 0)  # another step
    assert order.micro_batch_seeds(3, 4, plan, 0) != order.micro_batch_seeds(2, 4, plan, 0)  # another epoch
    assert GlobalOrder(100, 12, seed=6).micro_batch_seeds(2, 4, plan, 0) != order.micro_batch_seeds(2, 4, plan, 0)
    assert all(0 <= s < 2**32 for s in order.micro_batch_seeds(2, 4, plan, 1))  # torch.manual_seed takes it


def test_a_position_resumes_at_the_next_global_batch():
    order = GlobalOrder(100, 12, seed=5)
    assert order.normalize(SamplerPosition(2, 8)) == SamplerPosition(3, 0)
    assert order.normalize(SamplerPosition(2, 5)) == SamplerPosition(2, 5)
    assert SamplerPosition.from_dict(SamplerPosition(4, 7).to_dict()) == SamplerPosition(4, 7)
    with pytest.raises(GlobalBatchError, match="larger than the 100 training rows"):
        GlobalOrder(100, 128, seed=0)


def test_the_helper_imports_without_side_effects():
    """A user's own script imports it: no torch, no logging set up, nothing printed."""
    code = (
        "import logging, sys; import kftrain.programs.global_batch as g; "
        "assert 'torch' not in sys.modules, 'torch imported'; assert not logging.getLogger().handlers; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ok\n", "")


def test_the_flags_and_the_parser_agree_on_the_global_batch():
    flags = trainer_flags(epochs=3, global_batch_size=96.0, batch_size=16, lr=0.2)
    assert flags == ["--epochs", "3", "--global-batch-size", "96", "--batch-size", "16", "--lr", "0.2"]
    args = trainer_parser(None, epochs=1, lr=0.1).parse_args(["--dataset", "d", "--model-dir", "m", *flags])
    assert (args.global_batch_size, args.batch_size, args.lr) == (96, 16, 0.2)
    with pytest.raises(SystemExit):
        trainer_parser(None, epochs=1, lr=0.1).parse_args(["--dataset", "d", "--model-dir", "m", "--batch-size", "0"])
