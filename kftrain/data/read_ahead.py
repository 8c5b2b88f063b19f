"""Reading the next item while the current one is used: a split's next batch is read, decompressed and checked on
a thread of its own while the model scores the current one (Parquet decoding, hashing and most inference runtimes
release the GIL, so the two overlap)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar, cast

T = TypeVar("T")
_END = object()


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_POLL_S = 0.1  # how often a reader blocked on a full queue checks whether the consumer has gone


def read_ahead(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """``items`` in order, up to ``depth`` of them produced ahead by a thread. An exception the producer raises is
    raised here, where the item would have come; closing this generator early stops the producer after the item
    it is making (nothing is left running)."""
    ready: queue.Queue[object] = queue.Queue(maxsize=depth)
    gone = threading.Event()

    def offer(item: object) -> bool:
        while not gone.is_set():
            try:
                ready.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
            offer(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            offer(_Failed(exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:  # a generator's own cleanup (its open files), on the thread that ran it
                close()

    producer = threading.Thread(target=produce, name="read-ahead", daemon=True)
    producer.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield cast(T, item)
    finally:
        gone.set()
        producer.join()
