"""read_ahead: a split's next batch read on a thread while the current one is scored; order, errors and an early
stop as a plain loop would have them."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kftrain.data.read_ahead import read_ahead


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name == "read-ahead"}


@pytest.mark.parametrize("depth", [1, 3])
def test_every_item_comes_in_order(depth):
    assert list(read_ahead(iter(range(50)), depth=depth)) == list(range(50))
    assert not _threads()


def test_the_producers_error_is_raised_where_its_item_would_have_come():
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("shard 3 is corrupt")

    seen = []
    with pytest.raises(ValueError, match="shard 3 is corrupt"):
        for item in read_ahead(items()):
            seen.append(item)
    assert seen == [1, 2] and not _threads()


def test_stopping_early_stops_the_producer_and_closes_its_source():
    made, closed = [], threading.Event()

    def items() -> Iterator[int]:
        try:
            for i in range(1000):
                made.append(i)
                yield i
        finally:
            closed.set()

    reader = read_ahead(items(), depth=2)
    assert [next(reader), next(reader)] == [0, 1]
    reader.close()
    assert closed.is_set() and not _threads()
    assert len(made) <= 5  # two taken, at most two queued and one in the making: nothing read beyond
