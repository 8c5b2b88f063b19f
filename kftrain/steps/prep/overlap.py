"""Rows of the validation and test splits that are also training rows (the same features and label).

Each written row is hashed (64 bits over its encoded values); identical rows hash alike, so they are kept or
left out together when the hashes kept are a bottom-k sample: while the distinct hashes stay under ``CAP`` per
split the count is exact, past it the smallest hashes are kept and the count is scaled up (an estimate). Memory
is at most ``CAP`` hashes per split whatever the row count.
"""

from __future__ import annotations

from dataclasses import dataclass

from kftrain.extras import requires

with requires("data", "data prep"):
    import numpy as np
    import pyarrow as pa

from kftrain.data.dataset import SPLITS

MASK = np.uint64(2**64 - 1)
_MUL = np.uint64(0x9E3779B97F4A7C15)


def row_hashes(table: pa.Table) -> np.ndarray:
    """A 64-bit hash of every row's values (bit patterns, column by column, then mixed)."""
    h = np.full(table.num_rows, 0xCBF29CE484222325, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in table.columns:
            values = np.asarray(column.to_numpy(zero_copy_only=False))
            words = values.view(np.uint32 if values.itemsize == 4 else np.uint64).astype(np.uint64)
            h = (h ^ words) * _MUL
            h ^= h >> np.uint64(29)
        # splitmix64's finaliser: the hashes spread evenly, which the bottom-k sample needs.
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return h


@dataclass
class Overlap:
    """Of a split's rows, how many are also training rows; ``exact`` False when counted on a sample."""

    split: str
    rows: int
    in_train: int
    exact: bool

    def line(self) -> str:
        about = "" if self.exact else "about "
        return f"{about}{self.in_train} of {self.rows} {self.split} rows are also training rows"


class OverlapCounter:
    """Collects each split's row hashes (:meth:`add`), then counts the overlaps (:meth:`overlaps`)."""

    CAP = 1 << 16  # distinct hashes kept per split (with their counts: 1 MiB); 0.2 s a million rows, hashing 0.1

    def __init__(self) -> None:
        empty = np.zeros(0, dtype=np.uint64)
        self.kept = {split: (empty, np.zeros(0, dtype=np.int64)) for split in SPLITS}  # distinct hashes, counts
        self.pending: dict[str, list[np.ndarray]] = {split: [] for split in SPLITS}  # hashes not merged yet
        self.rows = dict.fromkeys(SPLITS, 0)
        self.bound = MASK  # hashes above it are left out (all kept while it is the largest)

    def add(self, split: str, table: pa.Table) -> None:
        self.rows[split] += table.num_rows
        hashes = row_hashes(table)
        self.pending[split].append(hashes[hashes <= self.bound])
        if sum(map(len, self.pending[split])) > self.CAP:  # merged a CAP at a time: one sort per CAP rows
            self._merge(split)

    def _merge(self, split: str) -> None:
        old, counts = self.kept[split]
        new = np.concatenate(self.pending[split]) if self.pending[split] else old[:0]
        self.pending[split] = []
        new = new[new <= self.bound]
        merged, inverse = np.unique(np.concatenate([old, new]), return_inverse=True)
        weights = np.concatenate([counts, np.ones(len(new), dtype=np.int64)])
        self.kept[split] = (merged, np.bincount(inverse, weights=weights, minlength=len(merged)).astype(np.int64))
        if len(merged) > self.CAP:  # keep the smallest half, and the same bound for every split
            self.bound = merged[self.CAP // 2 - 1]
            self.kept = {s: (h[h <= self.bound], c[h <= self.bound]) for s, (h, c) in self.kept.items()}

    def overlaps(self) -> list[Overlap]:
        """For validation and test: how many of their rows are also training rows."""
        for split in SPLITS:
            self._merge(split)
        train = self.kept["train"][0]
        out = []
        for split in SPLITS:
            if split == "train" or not self.rows[split]:
                continue
            hashes, counts = self.kept[split]
            sampled, shared = int(counts.sum()), int(counts[np.isin(hashes, train)].sum())
            exact = bool(self.bound == MASK)
            in_train = shared if exact or not sampled else round(shared * self.rows[split] / sampled)
            out.append(Overlap(split, self.rows[split], in_train, exact))
        return out
