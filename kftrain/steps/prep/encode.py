"""Data prep's second pass on one batch: the plan applied: missing values dropped or filled, features as
float32 (numbers cast, booleans 0/1, categories as their vocabulary id), the label as a class id (int64) or a
regression target (float32).

Every value the batch holds was seen by the first pass, so every encoded value is a finite number: one that is
not (a category or a class the vocabulary lacks, a missing value where the policy kept none, an infinity) was
not there when the first pass read the source, and is an error, never a null or NaN in the published data."""

from __future__ import annotations

from typing import Any

from kftrain.extras import requires

with requires("data", "data prep"):
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

from kftrain.data.dataset import CLASSIFICATION, LABEL
from kftrain.steps.prep.profile import BOOLEAN, CATEGORICAL, DROP, NUMERIC, Plan
from kftrain.steps.prep.sources import changed


def _missing(array: pa.Array) -> pa.Array:
    missing = array.is_null()
    if pa.types.is_floating(array.type):
        missing = pc.or_kleene(missing, pc.is_nan(array)).fill_null(True)
    return missing


def _filled(array: pa.Array, value: Any) -> pa.Array:
    if pa.types.is_floating(array.type):
        array = pc.if_else(pc.is_nan(array), pa.scalar(None, array.type), array)
    return array.fill_null(pa.scalar(value).cast(array.type) if not isinstance(value, float) else value)


def _check_finite(array: pa.Array, column: str, where: str) -> None:
    """An encoded column holds only finite numbers (see the module's docstring)."""
    if array.null_count or not pc.all(pc.is_finite(array)).as_py():
        raise changed(
            where,
            f"column {column!r} holds a value the first pass did not see (a new category, a missing "
            "or an infinite value)",
        )


def encode(batch: pa.RecordBatch, plan: Plan, where: str = "") -> tuple[pa.Table, np.ndarray | None]:
    """The batch's kept rows as the prepared table, and their class ids (None for regression); ``where`` names the
    batch (file and rows) in an error."""
    columns = {name: batch.column(batch.schema.get_field_index(name)) for name in [*plan.features, plan.label]}
    columns = {n: (a.dictionary_decode() if pa.types.is_dictionary(a.type) else a) for n, a in columns.items()}
    kept = pc.invert(_missing(columns[plan.label]))
    if plan.policy == DROP:
        for name in plan.features:
            kept = pc.and_(kept, pc.invert(_missing(columns[name])))
    out: dict[str, pa.Array] = {}
    for name in plan.features:
        array = columns[name].filter(kept)
        kind = plan.kinds[name]
        if kind == NUMERIC:
            array = pc.cast(array, pa.float64())  # an integer column filled with its mean takes a fraction
        if name in plan.fill:
            array = _filled(array, plan.fill[name])
        if kind == CATEGORICAL:
            vocabulary = pa.array([str(v) for v in plan.vocabularies[name]])
            array = pc.index_in(pc.cast(array, pa.string()), value_set=vocabulary)
        elif kind == BOOLEAN:
            array = pc.cast(array, pa.int8())
        out[name] = pc.cast(array, pa.float32())
        _check_finite(out[name], name, where)
    label = columns[plan.label].filter(kept)
    ids = None
    if plan.task == CLASSIFICATION:
        values = pa.array(plan.classes)
        label = pc.index_in(pc.cast(label, values.type), value_set=values)
        if label.null_count:
            raise changed(where, f"label column {plan.label!r} holds a class the first pass did not see")
        ids = np.asarray(label.to_numpy(zero_copy_only=False), dtype=np.int64)
        out[LABEL] = pa.array(ids, type=pa.int64())
    else:
        out[LABEL] = pc.cast(label, pa.float32())
        _check_finite(out[LABEL], plan.label, where)
    return pa.table(out), ids
