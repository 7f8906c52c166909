"""Run a producer a few items ahead of its consumer, in a background thread.

Used by the data store to assemble the next batch (numpy gathers, HDF5 reads, pinning)
while the current one trains: numpy and h5py release the GIL for their heavy parts, so the
two overlap. The queue is bounded, so at most ``ahead`` finished items wait (plus the one
being built), which bounds the extra host memory.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def prefetched(make: Callable[[T], R], items: Iterable[T], ahead: int = 2) -> Iterator[R]:
    """``(make(x) for x in items)``, computed up to ``ahead`` items in advance.

    Results come in the order of ``items`` and are the same objects ``make`` returned, so
    prefetching never changes content. An exception in ``make`` is re-raised in the
    consumer. Closing the generator early (``break``) stops the thread.
    ``ahead <= 0`` means no thread at all.
    """
    if ahead <= 0:
        yield from map(make, items)
        return
    results: queue.Queue = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                results.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for x in items:
                if stop.is_set() or not put(make(x)):
                    return
            put(_DONE)
        except BaseException as error:  # handed to the consumer, re-raised there
            put(_Failure(error))

    thread = threading.Thread(target=work, name="nepcore-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = results.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()
