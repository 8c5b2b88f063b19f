"""Environment variables set for a block and restored after it: the one way kftrain changes its own environment."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """These variables set for the block; each restored (or unset, where it was not set) afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, was in saved.items():
            if was is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = was
