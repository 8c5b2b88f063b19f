"""Which split each row goes to: stratified by class for classification, uniform for regression and file lists.

Before the second read, from each class's row count: every class gets ``round(n * test_fraction)`` test,
``round(n * validation_fraction)`` validation and the rest train codes in a random order, and each row takes its
class's next code; so proportions are exact and the result depends only on the seed and the read order. The order
is drawn a block at a time (a multivariate hypergeometric draw of the codes left, then shuffled): uniformly random,
in memory of a block per class whatever the row count.
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

    BLOCK = 4096  # codes drawn at a time for a class

    def __init__(self, group_sizes: list[int], seed: int, validation_fraction: float, test_fraction: float) -> None:
        check_fractions(validation_fraction, test_fraction)
        self.remaining: list[np.ndarray] = []  # per class: codes not yet drawn, by code (TRAIN, VALIDATION, TEST)
        for n in group_sizes:
            n_test, n_val = round(n * test_fraction), round(n * validation_fraction)
            counts = np.zeros(len(SPLITS), dtype=np.int64)
            counts[[TRAIN, VALIDATION, TEST]] = n - n_test - n_val, n_val, n_test
            self.remaining.append(counts)
        # One random stream per class, so a class's order does not depend on how its rows mix with others'.
        self.rngs = [np.random.default_rng([seed, group]) for group in range(len(group_sizes))]
        self.blocks = [np.zeros(0, dtype=np.int8) for _ in group_sizes]  # drawn, not yet handed out
        self.counted = list(group_sizes)  # rows of each class the first pass counted
        self.taken = [0] * len(group_sizes)  # of which handed a code so far
        self.totals = np.sum(self.remaining, axis=0) if self.remaining else np.zeros(len(SPLITS), dtype=np.int64)
        sizes = self.sizes()
        if not sizes["train"] or not sizes["test"]:
            raise DataValidationError(
                f"the fractions leave an empty split (train {sizes['train']}, test {sizes['test']})"
            )

    def sizes(self) -> dict[str, int]:
        return {split: int(self.totals[i]) for i, split in enumerate(SPLITS)}

    def _draw(self, group: int, wanted: int, where: str) -> np.ndarray:
        """The next ``wanted`` codes of ``group`` (``where``: the data read, for the error)."""
        out = [self.blocks[group][:wanted]]
        self.blocks[group] = self.blocks[group][wanted:]
        missing = wanted - len(out[0])
        while missing > 0:
            remaining = self.remaining[group]
            size = int(min(self.BLOCK, remaining.sum()))
            if size == 0:
                raise changed(
                    where, f"more rows than the first pass counted ({self.counted[group]} in class id {group})"
                )
            rng = self.rngs[group]
            counts = _draw_counts(rng, remaining, size)
            remaining -= counts
            block = np.repeat(np.arange(len(SPLITS), dtype=np.int8), counts)
            rng.shuffle(block)
            out.append(block[:missing])
            self.blocks[group] = block[missing:]
            missing -= len(out[-1])
        return np.concatenate(out) if len(out) > 1 else out[0]

    def take(self, groups: np.ndarray | None, rows: int, where: str = "") -> np.ndarray:
        """The codes of the next ``rows`` rows; ``groups`` is each row's class id (None: one group).

        More rows of a group than were counted means the data changed since they were counted: an error."""
        if groups is None:
            groups = np.zeros(rows, dtype=np.int64)
        out = np.empty(rows, dtype=np.int8)
        for group in np.unique(groups):
            rows_of = np.flatnonzero(groups == group)
            out[rows_of] = self._draw(int(group), len(rows_of), where)
            self.taken[group] += len(rows_of)
        return out

    def check_all_taken(self, where: str) -> None:
        """Every counted row was read again (fewer rows means the data changed since they were counted)."""
        read, counted = sum(self.taken), sum(self.counted)
        if read != counted:
            raise changed(where, f"{read} rows where the first pass counted {counted}")


EXACT_LIMIT = 10**9  # numpy's multivariate hypergeometric draw takes fewer codes than this in all


def _draw_counts(rng: np.random.Generator, remaining: np.ndarray, size: int) -> np.ndarray:
    """How many of each code the next ``size`` codes hold, drawn without replacement from ``remaining``."""
    total = int(remaining.sum())
    if total < EXACT_LIMIT:
        return rng.multivariate_hypergeometric(remaining, size)
    # A class of a billion rows or more: draws of a few thousand from it are, to any measurable degree, draws with
    # replacement; what one code cannot give goes to the code with the most left.
    counts = np.minimum(rng.multinomial(size, remaining / total), remaining)
    counts[int(np.argmax(remaining - counts))] += size - int(counts.sum())
    return counts
