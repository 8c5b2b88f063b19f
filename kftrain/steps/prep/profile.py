"""Data prep's first pass: what every column holds, and the plan the second pass follows.

:class:`Profile` sees every batch once and keeps, per column, bounded state: counts of missing and infinite
values (and where the first one is), running statistics of numbers, and value counts while a column has at
most ``max_categories`` distinct values. It also counts, per class, the rows the missing-value policy keeps,
which the stratified split needs before the second pass. :meth:`Profile.plan` turns that into a :class:`Plan`:
each feature's encoding (number, boolean, or vocabulary id), fill values, the classes and their ids. Every
problem is a :class:`DataValidationError` naming the column (and the file and row where there is one).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kftrain.extras import requires

with requires("data", "data prep"):
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

from kftrain.data.dataset import CLASSIFICATION, LABEL, REGRESSION, DataValidationError

NUMERIC, BOOLEAN, CATEGORICAL = "numeric", "boolean", "categorical"
REFUSE, DROP, FILL = "refuse", "drop", "fill"
POLICIES = (REFUSE, DROP, FILL)
TOP_VALUES = 5
# The columns a prepared dataset may hold (features and the label). Profiling and encoding cost about a
# millisecond and 30 KB of memory per column (10,000 columns: 11 s, 400 MB; 100,000 ran for minutes at 3.8 GB).
MAX_COLUMNS = 10_000
FLOAT32_MAX = float(np.finfo(np.float32).max)
# CSV text inferred as the narrowest of these that parses every value seen.
TEXT_KINDS = ("int", "float", "bool", "string")
TEXT_TYPES = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "string": pa.string()}


def kind_of_type(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return NUMERIC
    if pa.types.is_boolean(t):
        return BOOLEAN
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return CATEGORICAL
    if pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
        return CATEGORICAL
    if pa.types.is_null(t):
        return ""
    raise ValueError(str(t))


@dataclass
class ColumnProfile:
    name: str
    source_type: str
    base_kind: str = ""  # the kind its type says; "" for an all-null column
    text: bool = False  # a CSV column read as text: its kind is inferred from the values
    text_kind: str = "int"
    count: int = 0  # values present (not null, not NaN)
    missing: int = 0  # null or NaN
    first_missing: str = ""
    mean: float = 0.0
    m2: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    counts: dict[Any, int] | None = field(default_factory=dict)  # None once there are too many values

    @property
    def kind(self) -> str:
        if not self.text:
            return self.base_kind
        if not self.count:
            return ""
        return {"int": NUMERIC, "float": NUMERIC, "bool": BOOLEAN, "string": CATEGORICAL}[self.text_kind]

    @property
    def type_name(self) -> str:
        return f"{self.text_kind} (inferred from text)" if self.text else self.source_type

    def statistics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type_name, "count": self.count, "missing": self.missing}
        if self.kind == NUMERIC and self.count:
            std = math.sqrt(self.m2 / self.count)
            out.update(min=self.low, max=self.high, mean=self.mean, std=std)
        elif self.counts is not None:
            top = sorted(self.counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[:TOP_VALUES]
            out.update(distinct=len(self.counts), top=[[_json(k), v] for k, v in top])
        else:
            out["distinct"] = "many"
        return out


def _json(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


@dataclass
class Plan:
    """What the second pass does to every batch."""

    features: list[str]
    kinds: dict[str, str]
    vocabularies: dict[str, list[Any]]
    fill: dict[str, Any]
    label: str
    task: str
    classes: list[Any]
    class_counts: list[int]
    rows: int  # rows kept
    dropped: int
    policy: str
    text_types: dict[str, pa.DataType] | None  # CSV: the types the second pass reads with
    statistics: dict[str, dict[str, Any]]


class Profile:
    """The first pass over a source's batches; :meth:`plan` at the end."""

    def __init__(
        self,
        schema: pa.Schema,
        *,
        label: str,
        features: list[str],
        task: str,
        policy: str,
        max_categories: int,
        text: bool,
    ) -> None:
        self.label, self.task, self.policy, self.max_categories = label, task, policy, max_categories
        self.features = features
        self.columns: dict[str, ColumnProfile] = {}
        for name in [*features, label]:
            t = schema.field(name).type
            if text and pa.types.is_string(t):
                self.columns[name] = ColumnProfile(name, str(t), text=True)
                continue
            try:
                kind = kind_of_type(t)
            except ValueError:
                raise DataValidationError(
                    f"column {name!r} is {t}: not a number, boolean or string (leave it out of features)"
                ) from None
            self.columns[name] = ColumnProfile(name, str(t), base_kind=kind)
            if kind == NUMERIC:
                self.columns[name].counts = None  # numbers need no vocabulary (class labels are counted apart)
        self.label_counts: dict[Any, int] = {}
        self.rows = 0
        self.dropped = 0

    def observe(self, where: str, offset: int, batch: pa.RecordBatch) -> None:
        """Account for one batch of the file ``where`` whose first row is row ``offset`` of that file."""
        kept = np.ones(batch.num_rows, dtype=bool)
        for name, column in self.columns.items():
            array = batch.column(batch.schema.get_field_index(name))
            valid = self._observe_column(column, array, where, offset)
            if name == self.label or self.policy == DROP:
                kept &= valid
            elif self.policy == REFUSE and not valid.all():
                self._refuse(column, where, offset, valid)
        if not kept.all() and self.policy == REFUSE:
            self._refuse(self.columns[self.label], where, offset, kept)
        self.rows += int(kept.sum())
        self.dropped += int((~kept).sum())
        if self.task == CLASSIFICATION:
            labels = batch.column(batch.schema.get_field_index(self.label)).filter(pa.array(kept))
            self._count(self.label_counts, labels)

    def _refuse(self, column: ColumnProfile, where: str, offset: int, valid: np.ndarray) -> None:
        row = offset + int(np.flatnonzero(~valid)[0])
        what = "the label" if column.name == self.label else "feature"
        raise DataValidationError(
            f"{where}: {what} column {column.name!r} has a missing value (null or NaN) at row {row}; set "
            "missing=drop to drop such rows or missing=fill to fill features (mean, or most frequent value)"
        )

    def _observe_column(self, column: ColumnProfile, array: pa.Array, where: str, offset: int) -> np.ndarray:
        """Update the column's state with ``array``; return which rows have a value."""
        if column.text:
            array = self._infer_text(column, array)
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        missing = array.is_null()
        if pa.types.is_floating(array.type):
            missing = pc.or_kleene(missing, pc.is_nan(array)).fill_null(True)
            # The prepared dataset holds float32: an infinity, or a number it cannot hold, is refused here.
            huge = pc.greater(pc.abs(array), FLOAT32_MAX).fill_null(False)
            if pc.any(huge).as_py():
                index = pc.index(huge, True).as_py()
                what = "an infinite value" if math.isinf(array[index].as_py()) else "a value beyond float32's range"
                raise DataValidationError(f"{where}: column {column.name!r} has {what} at row {offset + index}")
        valid = ~np.asarray(missing.to_numpy(zero_copy_only=False), dtype=bool)
        n_missing = int((~valid).sum())
        if n_missing and not column.first_missing:
            column.first_missing = f"{where}, row {offset + int(np.flatnonzero(~valid)[0])}"
        column.missing += n_missing
        present = array.filter(pa.array(valid))
        column.count += len(present)
        numeric = column.text_kind in ("int", "float") if column.text else column.kind == NUMERIC
        if numeric and len(present):
            self._moments(column, present)
        if column.counts is not None and (column.name != self.label or self.task == REGRESSION):
            self._count(column.counts, present)
            if len(column.counts) > self.max_categories:
                column.counts = None
        return valid

    def _infer_text(self, column: ColumnProfile, array: pa.Array) -> pa.Array:
        """A CSV text column as the narrowest type that parses every value seen so far."""
        present = array.drop_null()
        for kind in TEXT_KINDS[TEXT_KINDS.index(column.text_kind) :]:
            if kind == "string":
                column.text_kind = kind
                return array
            try:
                pc.cast(present, TEXT_TYPES[kind])
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
            column.text_kind = kind
            return pc.cast(array, TEXT_TYPES[kind])
        return array

    def _moments(self, column: ColumnProfile, present: pa.Array) -> None:
        values = np.asarray(pc.cast(present, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
        if not len(values):
            return
        n, mean = len(values), float(values.mean())
        total = column.count if column.count else n  # column.count already includes this batch
        before = total - n
        delta = mean - column.mean
        column.m2 += float(((values - mean) ** 2).sum()) + delta**2 * before * n / total
        column.mean += delta * n / total
        column.low, column.high = min(column.low, float(values.min())), max(column.high, float(values.max()))

    def _count(self, counts: dict[Any, int], values: pa.Array) -> None:
        if not len(values):
            return
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        for item in pc.value_counts(values).to_pylist():
            if item["values"] is not None:
                counts[item["values"]] = counts.get(item["values"], 0) + int(item["counts"])
                if len(counts) > self.max_categories + 1 and counts is self.label_counts:
                    raise DataValidationError(
                        f"label column {self.label!r} has more than {self.max_categories} distinct values: for a "
                        "numeric target set task=regression (or raise max_categories)"
                    )

    # ---------------------------------------------------------------------------------------------

    def plan(self) -> Plan:
        kinds: dict[str, str] = {}
        vocabularies: dict[str, list[Any]] = {}
        fill: dict[str, Any] = {}
        for name in self.features:
            column = self.columns[name]
            kind = column.kind
            if not kind or not column.count:
                raise DataValidationError(f"column {name!r} has no values (every row is missing)")
            kinds[name] = kind
            if kind in (CATEGORICAL, BOOLEAN):
                if column.counts is None:
                    raise DataValidationError(
                        f"column {name!r} has more than {self.max_categories} distinct values: an identifier or free "
                        "text? leave it out of features (or raise max_categories)"
                    )
                seen = column.counts
                if kind == CATEGORICAL:
                    vocabularies[name] = [self._typed(column, v) for v in sorted(seen, key=str)]
                if self.policy == FILL and column.missing:
                    fill[name] = self._typed(column, max(seen, key=lambda v: (seen[v], str(v))))
            elif self.policy == FILL and column.missing:
                fill[name] = column.mean
        classes, counts = self._classes()
        if self.rows < 10:
            dropped = f" ({self.dropped} dropped for missing values)" if self.dropped else ""
            raise DataValidationError(f"only {self.rows} usable rows{dropped}; need at least 10 to split")
        text_types = None
        if any(c.text for c in self.columns.values()):
            text_types = {n: TEXT_TYPES[c.text_kind] for n, c in self.columns.items() if c.text}
        return Plan(
            features=self.features,
            kinds=kinds,
            vocabularies=vocabularies,
            fill=fill,
            label=self.label,
            task=self.task,
            classes=classes,
            class_counts=counts,
            rows=self.rows,
            dropped=self.dropped,
            policy=self.policy,
            text_types=text_types,
            statistics={n: c.statistics() for n, c in self.columns.items()},
        )

    def _typed(self, column: ColumnProfile, value: Any) -> Any:
        """A value counted as CSV text, as the column's inferred type."""
        if not column.text or not isinstance(value, str):
            return _json(value)
        if column.text_kind == "int":
            return int(value)
        if column.text_kind == "float":
            return float(value)
        if column.text_kind == "bool":
            return value.strip().lower() in ("true", "1")
        return value

    def _classes(self) -> tuple[list[Any], list[int]]:
        column = self.columns[self.label]
        if self.task == REGRESSION:
            if column.kind != NUMERIC:
                raise DataValidationError(
                    f"label column {self.label!r} holds {column.type_name}: regression needs numbers "
                    "(set task=classification for categories)"
                )
            return [], []
        merged: dict[Any, int] = {}
        for value, n in self.label_counts.items():
            typed = self._typed(column, value)
            if isinstance(typed, float):
                if not typed.is_integer():
                    raise DataValidationError(
                        f"label column {self.label!r} holds fractional numbers ({typed}): set task=regression, or "
                        "give class labels"
                    )
                typed = int(typed)
            merged[typed] = merged.get(typed, 0) + n
        if len(merged) > self.max_categories:
            raise DataValidationError(
                f"label column {self.label!r} has {len(merged)} distinct values (more than {self.max_categories}): "
                "for a numeric target set task=regression"
            )
        if len(merged) < 2:
            only = ", ".join(map(repr, merged)) or "none"
            raise DataValidationError(
                f"label column {self.label!r} has a single class ({only}): a classifier needs at least two"
            )
        classes = sorted(merged, key=lambda v: (isinstance(v, str), v))
        return classes, [merged[c] for c in classes]


def check_columns(schema: pa.Schema, label: str, features: list[str], source: str) -> list[str]:
    """The feature columns (every column but the label when ``features`` is empty); errors name the column.

    Every column the prepared dataset holds must be one distinct column of the source: a name given twice, a
    feature that is the label, or a name the source has twice would publish one column's values under another
    name (the label's values as a feature, and a model that scores 1.0 on them). Linear in the columns."""
    names = schema.names
    counts = Counter(names)
    if label not in counts:
        raise DataValidationError(f"{source}: no label column {label!r} (columns: {_listing(names)})")
    unknown = [f for f in features if f not in counts]
    if unknown:
        raise DataValidationError(f"{source}: no column {unknown[0]!r} for features (columns: {_listing(names)})")
    given = Counter(features)
    twice = [f for f in features if given[f] > 1]
    if twice:
        raise DataValidationError(f"features: {twice[0]!r} is given {given[twice[0]]} times; name each column once")
    chosen = list(features) or [n for n in names if n != label]
    if label in given:
        raise DataValidationError(f"features: {label!r} is the label column; it cannot also be a feature")
    ambiguous = [n for n in (*chosen, label) if counts[n] > 1]
    if ambiguous:
        raise DataValidationError(
            f"{source}: {counts[ambiguous[0]]} columns are named {ambiguous[0]!r}; give each column its own name"
        )
    if LABEL in chosen and label != LABEL:
        raise DataValidationError(
            f"column {LABEL!r} is a feature, but the prepared dataset names its label column {LABEL!r}: rename it "
            "or leave it out of features"
        )
    if not chosen:
        raise DataValidationError(f"{source}: no feature columns besides {label!r}")
    if len(chosen) + 1 > MAX_COLUMNS:
        raise DataValidationError(
            f"{source}: {len(chosen)} feature columns, more than data prep takes ({MAX_COLUMNS - 1}); choose the "
            "columns to use with features"
        )
    return chosen


def _listing(names: list[str], shown: int = 20) -> str:
    """The first ``shown`` column names (a wide source's whole header would flood the message)."""
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
