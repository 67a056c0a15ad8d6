"""State computed for a list of messages, reused when a later list begins with the same messages.

Before each model request the log is the previous log plus a few messages, and most of the view
is the previous view plus those messages. Work that is a fold over the messages (token totals,
validity, tallies) can extend what it computed last time instead of starting over. Reuse is
decided by object identity, so it is exact: the result is what a fresh computation would give.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence
from typing import Generic, TypeVar

S = TypeVar('S')


def begins_with(messages: Sequence[object], prefix: Sequence[object]) -> bool:
    """`messages[:len(prefix)]` holds the very objects of `prefix`."""
    n = len(prefix)
    if n > len(messages):
        return False
    if n and (messages[0] is not prefix[0] or messages[n - 1] is not prefix[n - 1]):
        return False
    return all(map(operator.is_, prefix, messages))


class PrefixMemo(Generic[S]):
    """Remembers the state of the last few lists seen, to extend the longest one a new list begins with."""

    def __init__(self, size: int = 8) -> None:
        self._size = size
        self._items: list[tuple[tuple[object, ...], S]] = []
        self._lock = threading.Lock()

    def longest_prefix(self, messages: Sequence[object]) -> tuple[int, S] | None:
        with self._lock:
            items = list(self._items)
        best: tuple[int, S] | None = None
        for prefix, state in items:
            if (best is None or len(prefix) > best[0]) and begins_with(messages, prefix):
                best = (len(prefix), state)
        return best

    def put(self, messages: Sequence[object], state: S) -> None:
        key = tuple(messages)
        with self._lock:
            self._items = [*self._items[-(self._size - 1) :], (key, state)]
