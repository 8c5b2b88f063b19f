"""Prep's split codes: exact stratified counts, an order that depends only on the seed and the rows' order (not on
how they are batched), uniform, and memory of a block per class whatever the row count."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from kftrain.data.dataset import DataValidationError
from kftrain.steps.prep.split import TEST, TRAIN, VALIDATION, SplitCodes


def take_all(codes: SplitCodes, groups: np.ndarray, batch: int) -> np.ndarray:
    return np.concatenate(
        [codes.take(groups[i : i + batch], len(groups[i : i + batch])) for i in range(0, len(groups), batch)]
    )


@pytest.fixture
def groups() -> np.ndarray:
    """30,000 rows of three classes (5,000 / 10,000 / 15,000), interleaved at random."""
    return np.random.default_rng(1).permutation(np.repeat([0, 1, 2], [5_000, 10_000, 15_000]))


def test_every_class_gets_its_exact_share_of_each_split(groups: np.ndarray) -> None:
    codes = take_all(SplitCodes([5_000, 10_000, 15_000], 7, 0.1, 0.2), groups, 4_096)
    for group, n in enumerate([5_000, 10_000, 15_000]):
        mine = codes[groups == group]
        assert [int((mine == c).sum()) for c in (TRAIN, VALIDATION, TEST)] == [n - round(n * 0.3), n // 10, n // 5]


@pytest.mark.parametrize("batch", [1, 999, 65_536])
def test_the_codes_depend_on_the_seed_not_on_the_batches(groups: np.ndarray, batch: int) -> None:
    reference = take_all(SplitCodes([5_000, 10_000, 15_000], 7, 0.1, 0.2), groups, 30_000)
    assert np.array_equal(take_all(SplitCodes([5_000, 10_000, 15_000], 7, 0.1, 0.2), groups, batch), reference)
    other_seed = take_all(SplitCodes([5_000, 10_000, 15_000], 8, 0.1, 0.2), groups, batch)
    assert not np.array_equal(other_seed, reference)


def test_the_order_is_uniform_over_the_rows() -> None:
    codes = SplitCodes([200_000], 3, 0.1, 0.2).take(None, 200_000)
    # Each tenth of the rows holds its share of test codes (a block-wise draw that favoured early or late rows
    # would not).
    shares = [float((part == TEST).mean()) for part in np.array_split(codes, 10)]
    assert max(abs(s - 0.2) for s in shares) < 0.01, shares


def test_memory_is_a_block_per_class_whatever_the_row_count() -> None:
    tracemalloc.start()
    try:
        codes = SplitCodes([40_000_000, 25_000_000], 0, 0.1, 0.2)
        assert codes.sizes() == {"train": 45_500_000, "validation": 6_500_000, "test": 13_000_000}
        codes.take(np.zeros(65_536, dtype=np.int64), 65_536)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"{peak / 2**20:.0f} MiB for 65 M rows"  # a permutation held whole: 65 MiB


def test_a_class_of_a_billion_rows_is_split_too() -> None:
    codes = SplitCodes([3_000_000_000], 0, 0.1, 0.2)
    drawn = codes.take(None, 100_000)
    assert codes.sizes()["test"] == 600_000_000
    assert abs(float((drawn == TEST).mean()) - 0.2) < 0.01 and abs(float((drawn == VALIDATION).mean()) - 0.1) < 0.01


def test_more_rows_than_the_first_pass_counted_are_refused() -> None:
    codes = SplitCodes([100, 50], 0, 0.1, 0.2)
    codes.take(np.zeros(100, dtype=np.int64), 100)
    with pytest.raises(DataValidationError, match=r"more rows than the first pass counted \(100 in class id 0\)"):
        codes.take(np.zeros(1, dtype=np.int64), 1)


def test_fewer_rows_than_the_first_pass_counted_are_refused() -> None:
    codes = SplitCodes([100, 50], 0, 0.1, 0.2)
    codes.take(np.zeros(100, dtype=np.int64), 100)
    codes.take(np.ones(49, dtype=np.int64), 49)
    with pytest.raises(DataValidationError, match=r"s\.csv: 149 rows where the first pass counted 150"):
        codes.check_all_taken("s.csv")
