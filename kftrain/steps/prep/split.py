"""Which split each row goes to: stratified by class for classification, uniform for regression and file lists.

The split is decided before the rows are read a second time, from the row count of each class: every class gets
a shuffled list of split codes (``round(n * test_fraction)`` test, ``round(n * validation_fraction)``
validation, the rest train), and the second pass hands each row the next code of its class. So every split
keeps the class proportions, the result depends only on the seed, and memory is one byte per row.
"""

from __future__ import annotations

from kftrain.extras import requires

with requires("data", "data prep"):
    import numpy as np

from kftrain.data.dataset import SPLITS, DataValidationError
from kftrain.steps.prep.sources import changed

TRAIN, VALIDATION, TEST = (SPLITS.index(s) for s in ("train", "validation", "test"))


def check_fractions(validation_fraction: float, test_fraction: float) -> None:
    if not 0 < test_fraction < 1 or not 0 <= validation_fraction < 1 or test_fraction + validation_fraction >= 1:
        raise DataValidationError(
            f"fractions: test ({test_fraction}) and validation ({validation_fraction}) must be in (0, 1) "
            "and sum to less than 1"
        )


class SplitCodes:
    """The split code (an index into ``SPLITS``) of every row, handed out class by class in reading order."""

    def __init__(self, group_sizes: list[int], seed: int, validation_fraction: float, test_fraction: float) -> None:
        check_fractions(validation_fraction, test_fraction)
        rng = np.random.default_rng(seed)
        self.codes: list[np.ndarray] = []
        for n in group_sizes:
            n_test, n_val = round(n * test_fraction), round(n * validation_fraction)
            codes = np.full(n, TRAIN, dtype=np.int8)
            codes[:n_test] = TEST
            codes[n_test : n_test + n_val] = VALIDATION
            self.codes.append(rng.permutation(codes))
        self.taken = [0] * len(group_sizes)
        sizes = self.sizes()
        if not sizes["train"] or not sizes["test"]:
            raise DataValidationError(
                f"the fractions leave an empty split (train {sizes['train']}, test {sizes['test']})"
            )

    def sizes(self) -> dict[str, int]:
        every = np.concatenate(self.codes) if self.codes else np.zeros(0, np.int8)
        return {split: int((every == i).sum()) for i, split in enumerate(SPLITS)}

    def take(self, groups: np.ndarray | None, rows: int, where: str = "") -> np.ndarray:
        """The codes of the next ``rows`` rows; ``groups`` is each row's class id (None: one group).

        More rows of a group than were counted means the data changed since they were counted: an error."""
        if groups is None:
            groups = np.zeros(rows, dtype=np.int64)
        out = np.empty(rows, dtype=np.int8)
        for group in np.unique(groups):
            rows_of = np.flatnonzero(groups == group)
            start = self.taken[group]
            if start + len(rows_of) > len(self.codes[group]):
                raise changed(where, f"more rows than the first pass counted ({len(self.codes[group])} in that group)")
            out[rows_of] = self.codes[group][start : start + len(rows_of)]
            self.taken[group] = start + len(rows_of)
        return out

    def check_all_taken(self, where: str) -> None:
        """Every counted row was read again (fewer rows means the data changed since they were counted)."""
        read, counted = sum(self.taken), sum(len(c) for c in self.codes)
        if read != counted:
            raise changed(where, f"{read} rows where the first pass counted {counted}")
