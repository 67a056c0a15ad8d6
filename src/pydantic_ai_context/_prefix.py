"""State computed for a list of messages, reused when a later list begins with the same messages.

Before each model request the log is the previous log plus a few messages, and most of the view
is the previous view plus those messages. Work that is a fold over the messages (token totals,
validity, tallies) can extend what it computed last time instead of starting over. Reuse is
decided by object identity within one generation of a `_scope.MemoScope`, which checks at the start
of every compile that no message was edited in place since; so the result is what a fresh
computation would give.
"""

from __future__ import annotations

import itertools
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


def first_difference(before: Sequence[object], after: Sequence[object]) -> int:
    """The index of the first message that is not the same object in both lists (the shorter
    length when one begins with the other)."""
    n = min(len(before), len(after))
    # One pass in C: the index of the first pair that is not the same object (zip stops at n).
    return next(itertools.compress(itertools.count(), map(operator.is_not, before, after)), n)


class PrefixMemo(Generic[S]):
    """Remembers the state of the last few lists seen, to extend the longest one a new list begins with.

    Entries belong to a generation (of the scope that owns the memo) and are used only within it.
    """

    def __init__(self, size: int = 4) -> None:
        self._size = size
        self._items: list[tuple[int, tuple[object, ...], S]] = []
        self._lock = threading.Lock()

    def longest_prefix(self, messages: Sequence[object], generation: int) -> tuple[int, S] | None:
        with self._lock:
            items = sorted(
                (item for item in self._items if item[0] == generation), key=lambda item: -len(item[1])
            )
        # Longest first: the first hit is the answer, so one full comparison usually decides.
        for _, prefix, state in items:
            if begins_with(messages, prefix):
                return len(prefix), state
        return None

    def put(self, messages: Sequence[object], state: S, generation: int) -> None:
        key = tuple(messages)
        with self._lock:
            self._items = [*self._items, (generation, key, state)][-self._size :]

    def forget(self, generation: int) -> None:
        """Drop the entries of `generation` (it will not be used again)."""
        with self._lock:
            self._items = [item for item in self._items if item[0] != generation]
