"""State computed for a list of messages, reused when a later list begins with the same messages.

Before each model request the log is the previous log plus a few messages, and most of the view
is the previous view plus those messages. Work that is a fold over the messages (token totals,
validity, tallies) can extend what it computed last time instead of starting over. Reuse is
decided within one generation of a `_scope.MemoScope`, which checks at the start of every compile
that no message was edited in place since; so the result is what a fresh computation would give.

Two kinds of prefix: *the same objects* (`begins_with`, `first_difference`), for state that holds
or hands out the messages themselves (a policy's previous output), and *equal messages*
(`equal_prefix`, `equal_prefix_length`), for folds whose state is computed from the messages'
values alone (counts, indices, ids). The second is list equality, which compares pointers in C and
calls `__eq__` only on a pair that is not the same object: about 25 times faster on a
5,000-message list than a pass of `operator.is_`, and a proof once per fold per compile.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections.abc import Sequence
from typing import Final, Generic, TypeVar

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


def equal_prefix(messages: Sequence[object], prefix: Sequence[object]) -> bool:
    """`messages[:len(prefix)]` equals `prefix`, message by message (the same objects, or equal ones).

    For state that is a function of the messages' values. An `__eq__` that raises (a tool result
    holding an array, a structure nested too deep) falls back to identity, which implies equality.
    """
    n = len(prefix)
    if n > len(messages):
        return False
    if not n:
        return True
    try:
        return _as_list(messages[:n]) == _as_list(prefix)
    except Exception:
        return begins_with(messages, prefix)


def equal_prefix_length(before: Sequence[object], after: Sequence[object]) -> int:
    """The length of the longest prefix in which `before` and `after` are equal message by
    message (the shorter length when one list begins with equals of the other). Where an `__eq__`
    raises, where the same objects end."""
    n = min(len(before), len(after))
    try:
        # Chunks compared as lists (in C); in the first unequal one, halves of it.
        for start in range(0, n, _CHUNK):
            end = min(start + _CHUNK, n)
            if _as_list(before[start:end]) == _as_list(after[start:end]):
                continue
            lo, hi = start, end  # before[start:lo] equals after[start:lo]; [start:hi] does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _as_list(before[start:mid]) == _as_list(after[start:mid]):
                    lo = mid
                else:
                    hi = mid
            return lo
    except Exception:
        return first_difference(before, after)
    return n


_CHUNK: Final = 512


def _as_list(items: Sequence[object]) -> list[object]:
    # A list and a tuple never compare equal: compare lists.
    return items if type(items) is list else list(items)


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
