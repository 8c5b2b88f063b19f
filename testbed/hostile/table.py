"""Every case, from the area modules, in the issue's order; each found by its id (``area/name``)."""

from __future__ import annotations

import functools
import importlib

from testbed.hostile.case import Case

# The areas, each a module of testbed.hostile.areas holding its CASES.
AREAS = (
    "status_server",
    "local_jobs",
    "evaluation",
    "runtimes",
    "cel",
    "task_config",
    "kfp_store",
    "initializer",
    "dataset_uri",
    "run_module",
    "prep",
    "state_dir",
    "compile_module",
    "values",
    "secrets",
    "tracking",
    "data_models",
    "answers",
)


@functools.cache
def cases() -> tuple[Case, ...]:
    found: list[Case] = []
    for area in AREAS:
        found += importlib.import_module(f"testbed.hostile.areas.{area}").CASES
    ids = [case.id for case in found]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"case ids given twice: {', '.join(twice)}")
    return tuple(found)


def select(areas: list[str] | None = None, names: list[str] | None = None) -> list[Case]:
    """The cases of ``areas`` (all when none) whose id holds one of ``names`` (all when none)."""
    return [
        case
        for case in cases()
        if (not areas or case.area in areas) and (not names or any(name in case.id for name in names))
    ]
