"""The incremental state of a profile: reused by identity, exact because it is checked once per compile.

A `MemoScope` belongs to one owner (a profile, or a policy called on its own): each policy's previous
input and output, folds over message prefixes (token totals, validity, frontier tallies), per-step
results. That state is reused by object identity, which is cheap; the scope makes it exact by
checking once, at the start of every compile, that the messages it saw last time still hold the same
`parts` lists (of the same length), and that those no response had answered yet (the ones
pydantic-ai fills in) also kept their other fields. If anything changed it starts a new
*generation*, and state of an older generation is never used again. A scope keeps references to the
messages of the last `lineages` conversations it compiled (no copies) and is released with its owner.

While a profile compiles, its scope is *active* (a context variable, so concurrent tasks each see
their own); functions deep in the package (`normalize`, token counting) use the active scope's state
and, outside any compile, compute from scratch with object memos (`_memo`) only.
"""

from __future__ import annotations

import itertools
import operator
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar

from pydantic_ai.messages import ModelResponse

from ._memo import _COMPILE, _PARTS, _same, stamp
from ._prefix import PrefixMemo, begins_with, equal_prefix, equal_prefix_length

__all__ = (
    'TEXT_MEMO_CHARS',
    'Fold',
    'MemoScope',
    'TextMemo',
    'active_generation',
    'compiling',
    'owner_cache',
    'resumed_fold',
    'scope_cache',
    'scope_prefix_memo',
    'scope_text_memo',
    'suspended',
)

V = TypeVar('V')

TEXT_MEMO_CHARS: Final = 32 * 1024 * 1024
"""The most text a `TextMemo` keeps as keys (it starts over beyond that)."""


class TextMemo(Generic[V]):
    """Values by text, for one conversation's compiles: equal outputs (a file read twice) are scanned
    once. It lives in the compiling scope's state for that conversation and goes with it. Its keys are
    mostly the conversation's own strings; slices and serialisations are new ones, so the keys are
    bounded by `max_chars` characters."""

    def __init__(self, *, max_chars: int = TEXT_MEMO_CHARS) -> None:
        self.max_chars = max_chars
        self._items: dict[str, V] = {}
        self._chars = 0

    def get(self, text: str) -> V | None:
        return self._items.get(text)

    def put(self, text: str, value: V) -> V:
        if self._chars + len(text) > self.max_chars:
            self._items.clear()
            self._chars = 0
        self._items[text] = value
        self._chars += len(text)
        return value


_GENERATIONS: Final = itertools.count(1)


def _open_stamps(messages: Sequence[Any]) -> tuple[tuple[int, tuple[object, ...]], ...]:
    """(index, stamp) of the messages after the last response: those pydantic-ai may still fill in."""
    out: list[tuple[int, tuple[object, ...]]] = []
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], ModelResponse):
            break
        out.append((i, stamp(messages[i])))
    return tuple(out)


@dataclass(eq=False)
class _Snapshot:
    """Messages as a scope saw them: the objects, their parts lists, and the stamps of the open tail."""

    messages: tuple[Any, ...]
    parts: tuple[Any, ...] | None
    lengths: tuple[int, ...] | None
    open: tuple[tuple[int, tuple[object, ...]], ...]

    @classmethod
    def of(
        cls, messages: Sequence[Any], *, with_parts: bool, extending: _Snapshot | None = None
    ) -> _Snapshot:
        snapshot = tuple(messages)
        parts: tuple[Any, ...] | None = None
        lengths: tuple[int, ...] | None = None
        if with_parts:
            if extending is not None and extending.parts is not None and extending.lengths is not None:
                # The extended snapshot was just checked: only the new messages are read.
                new = tuple(map(_PARTS, snapshot[len(extending.messages) :]))
                parts = extending.parts + new
                lengths = extending.lengths + tuple(map(len, new))
            else:
                parts = tuple(map(_PARTS, snapshot))
                lengths = tuple(map(len, parts))
        return cls(snapshot, parts, lengths, _open_stamps(snapshot))

    def continued_by(self, messages: Sequence[Any]) -> bool:
        """`messages` begins with these very messages (identity)."""
        return bool(self.messages) and begins_with(messages, self.messages)

    def unchanged(self) -> bool:
        """Every message still holds the parts list it had, as long as it was (a list edited in place
        mostly changes length), and the open tail kept its parts and other fields too."""
        if self.parts is None or self.lengths is None:
            return False
        return (
            all(map(operator.is_, self.parts, map(_PARTS, self.messages)))
            and tuple(map(len, self.parts)) == self.lengths  # ints: equality is exact, and a pass in C
            and all(_same(fields, stamp(self.messages[i])) for i, fields in self.open)
        )


@dataclass(eq=False)
class _Lineage:
    """One conversation a scope compiles: its last log and view, and the generation their state belongs to."""

    generation: int
    log: _Snapshot
    view: _Snapshot | None = None
    destructive: bool = False
    """The log continued the previous *view* (pydantic-ai 1.x `history_processors`, `ProcessHistory`):
    views are then snapshotted with their parts lists too."""


class MemoScope:
    """The incremental state of one owner (a profile, or a policy called on its own); see the module docstring.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context._scope import MemoScope, active_generation, compiling

        scope = MemoScope()
        log = [ModelRequest(parts=[UserPromptPart('hi')]), ModelResponse(parts=[TextPart('hello')])]
        with compiling(scope, log):
            first = active_generation()
        log[0].parts = [UserPromptPart('[redacted]')]  # edited in place
        with compiling(scope, log):
            assert active_generation() != first  # older state is never used again
        assert active_generation() is None  # no compile runs here
        ```
    """

    def __init__(self, *, lineages: int = 4) -> None:
        if lineages < 1:
            raise ValueError(f'lineages must be >= 1, got {lineages}')
        self.lineages = lineages
        """Conversations whose state is kept at once (a profile shared by several of them)."""
        self._lineages: list[_Lineage] = []
        self._prefixes: dict[Hashable, PrefixMemo[Any]] = {}
        self._caches: dict[tuple[Hashable, int], dict[Any, Any]] = {}
        self._lock = threading.Lock()

    def begin(self, log: Sequence[Any]) -> int:
        """The generation of the conversation `log` continues, after checking nothing in it changed in place."""
        if not log:
            return next(_GENERATIONS)  # nothing to remember, and no conversation to displace
        with self._lock:
            for lineage in reversed(self._lineages):
                for snapshot, via_view in ((lineage.log, False), (lineage.view, True)):
                    if snapshot is None or not snapshot.continued_by(log):
                        continue
                    if via_view and not lineage.destructive:
                        lineage.destructive = True
                    elif snapshot.unchanged():
                        lineage.log = _Snapshot.of(log, with_parts=True, extending=snapshot)
                        self._touch(lineage)
                        return lineage.generation
                    return self._restart(lineage, log)
                if lineage.log.messages and log and lineage.log.messages[0] is log[0]:
                    # The same conversation, edited or cut short: its state is of no use now.
                    return self._restart(lineage, log)
            lineage = _Lineage(next(_GENERATIONS), _Snapshot.of(log, with_parts=True))
            self._lineages.append(lineage)
            while len(self._lineages) > self.lineages:
                self._drop_generation(self._lineages.pop(0).generation)
            return lineage.generation

    def seal(self, generation: int, view: Sequence[Any]) -> None:
        """Remember the view compiled for `generation`: pydantic-ai fills in its newest request before
        sending it, and 1.x makes the view the next log."""
        with self._lock:
            for lineage in self._lineages:
                if lineage.generation == generation:
                    previous = lineage.view
                    extending = (
                        previous
                        if lineage.destructive and previous is not None and previous.continued_by(view)
                        else None
                    )
                    lineage.view = _Snapshot.of(view, with_parts=lineage.destructive, extending=extending)
                    return

    def prefix_memo(self, name: Hashable, size: int = 16) -> PrefixMemo[Any]:
        """The prefix memo called `name` (created on first use)."""
        found = self._prefixes.get(name)
        if found is None:
            found = self._prefixes.setdefault(name, PrefixMemo(size=size))
        return found

    def cache(self, name: Hashable, generation: int) -> dict[Any, Any]:
        """The dict called `name` for `generation`: dropped with the generation."""
        key = (name, generation)
        found = self._caches.get(key)
        if found is None:
            found = self._caches.setdefault(key, {})
        return found

    def clear(self) -> None:
        """Forget every conversation and all state."""
        with self._lock:
            self._lineages.clear()
            self._prefixes.clear()
            self._caches.clear()

    def _restart(self, lineage: _Lineage, log: Sequence[Any]) -> int:
        self._drop_generation(lineage.generation)
        lineage.generation = next(_GENERATIONS)
        lineage.log = _Snapshot.of(log, with_parts=True)
        lineage.view = None
        self._touch(lineage)
        return lineage.generation

    def _touch(self, lineage: _Lineage) -> None:
        self._lineages.remove(lineage)
        self._lineages.append(lineage)

    def _drop_generation(self, generation: int) -> None:
        for key in [k for k in self._caches if k[1] == generation]:
            del self._caches[key]
        for memo in self._prefixes.values():
            memo.forget(generation)


@dataclass(frozen=True, slots=True)
class _Active:
    scope: weakref.ref[MemoScope]
    """Weakly: a task started during a compile copies the context, and may outlive the scope's owner."""
    generation: int
    compile: int
    """A number no other compile has."""


_COMPILES: Final = itertools.count(1)


_ACTIVE: ContextVar[_Active | None] = ContextVar('pydantic_ai_context_memo_scope', default=None)


@contextmanager
def compiling(scope: MemoScope, log: Sequence[Any]) -> Iterator[int]:
    """Make `scope` active for a compile of `log` (in this task); yields the generation."""
    generation = scope.begin(log)
    active = _Active(weakref.ref(scope), generation, next(_COMPILES))
    token = _ACTIVE.set(active)
    compile_token = _COMPILE.set(active.compile)
    try:
        yield generation
    finally:
        _COMPILE.reset(compile_token)
        _ACTIVE.reset(token)


@contextmanager
def suspended() -> Iterator[None]:
    """No scope active inside (for user code called during a compile, e.g. event handlers)."""
    token = _ACTIVE.set(None)
    compile_token = _COMPILE.set(0)
    try:
        yield
    finally:
        _COMPILE.reset(compile_token)
        _ACTIVE.reset(token)


def active_generation() -> int | None:
    """The generation of the compile running in this task, or None outside a compile."""
    active = _ACTIVE.get()
    return active.generation if active is not None else None


def scope_prefix_memo(name: Hashable) -> tuple[PrefixMemo[Any], int] | None:
    """The active scope's prefix memo `name` and the current generation, or None outside a compile."""
    active = _ACTIVE.get()
    scope = active.scope() if active is not None else None
    if active is None or scope is None:
        return None
    return scope.prefix_memo(name), active.generation


def scope_text_memo(name: Hashable) -> TextMemo[Any] | None:
    """The active scope's text memo `name` for the current conversation, or None outside a compile."""
    cache = scope_cache(('text', name))
    if cache is None:
        return None
    found: TextMemo[Any] | None = cache.get(None)
    if found is None:
        found = cache.setdefault(None, TextMemo())
    return found


class Fold(Protocol):
    """A fold over a list of messages that can be cut back to a prefix and extended again.

    Its state must be a function of the messages' values (counts, indices, ids, flags): a fold is
    resumed for a list that begins with messages *equal* to those it read, not only the same
    objects, and it never hands out the message objects it keeps.
    """

    messages: list[Any]

    def truncate(self, n: int) -> None:
        """Undo everything read from `messages[n:]` (and drop those messages)."""

    def extend(self, messages: Sequence[Any]) -> None:
        """Read `messages[len(self.messages):]` (`messages` begins with `self.messages`)."""


F = TypeVar('F', bound=Fold)
R = TypeVar('R')

_FOLDS_PER_NAME: Final = 8
_FOLD_MIN_MESSAGES: Final = 4


def resumed_fold(name: Hashable, messages: Sequence[Any], new: Callable[[], F], read: Callable[[F], R]) -> R:
    """The fold `name` over `messages`, resumed from the first message that differs from (is not
    equal to) those one of the active scope's last folds of that name read (a fresh one outside a
    compile).

    The scope checks once per compile that no message changed in place, and its caches belong to one
    generation, so a fold resumed this way equals a fresh one. Each call's work is the messages after
    the first difference (and what the fold undoes of the old suffix), not the whole list.
    Returns `read(fold)`, taken under the lock that guards the scope's folds (threads compiling
    with one profile share them).
    """
    folds = scope_cache(('fold', name))
    if folds is None:
        fold = new()
        fold.extend(messages)
        return read(fold)
    orders = scope_cache(('fold.order', name))
    order = orders.get(None) if orders is not None else None
    if order is None and orders is not None:
        order = orders.setdefault(None, _CallOrder())
    with _FOLDS_LOCK:
        return read(_resume(folds, messages, new, order))


def _resume(
    folds: dict[Any, Any], messages: Sequence[Any], new: Callable[[], F], order: _CallOrder | None = None
) -> F:
    if len(messages) < _FOLD_MIN_MESSAGES:
        # Cheap to read whole, and kept out of the folds: resuming a short list from a long fold
        # would cut that fold back to nothing for the next long list (a count of a one-message
        # list wiped the fold of the 5,000-message input, re-read every compile).
        fold = new()
        fold.extend(messages)
        return fold
    best: F | None = None
    best_key: int | None = None
    best_same = -1
    # A fold is a function of the messages' values, so equal messages continue it as well as the
    # same ones; comparing lists is a pass in C that stops at the first message that differs.
    # A compile calls a fold on the lists of its chain in the same order each time: the fold the
    # n-th call of the previous compile used is tried first, and taken if it is of use; else the
    # others, most recently used first.
    call = order.next_call() if order is not None else -1
    hint = order.used.get(call) if order is not None else None
    if hint in folds and folds[hint].messages:
        best_same = _shared(folds[hint].messages, messages)
        best, best_key = folds[hint], hint
        if best_same < len(messages) // 2:
            # Of no use here (the n-th call of the previous compile read another list: a compile
            # after a first read in pieces numbers its calls from the first piece's): look further.
            best, best_key, best_same = None, None, -1
    if best_same < 0:
        keys = [key for key in reversed(folds) if key != hint and folds[key].messages]
        for key in keys:
            read = folds[key].messages
            # (A fold of less than half the list is not extended: see below.)
            if len(read) >= len(messages) // 2 and equal_prefix(messages, read):
                best, best_key, best_same = folds[key], key, len(read)
                break
        else:
            for key in keys:
                same = _shared(folds[key].messages, messages, whole=False)
                if same > best_same:
                    best, best_key, best_same = folds[key], key, same
    if (
        best is None
        or best_key is None
        or best_same < len(messages) // 2
        or best_same < len(best.messages) // 2
    ):
        # A list unlike the others (another step of the chain), or one that would undo most of
        # the best fold: a fold of its own, in place of the one used least recently.
        if len(folds) >= _FOLDS_PER_NAME:
            del folds[next(iter(folds))]
        best = new()
        best_key = next(_FOLD_KEYS)
    else:
        del folds[best_key]
        if best_same < len(best.messages):
            best.truncate(best_same)
    folds[best_key] = best  # most recently used last
    if order is not None:
        order.used[call] = best_key
    best.extend(messages)
    return best


def _shared(read: list[Any], messages: Sequence[Any], *, whole: bool = True) -> int:
    """How many first messages of `messages` equal those of `read`, if that is at least half of
    each (what `_resume` takes); else -1, without looking for where they differ. `whole=False`:
    `messages` is known not to begin with all of `read`."""
    if whole and equal_prefix(messages, read):
        return len(read)
    half = max(len(messages), len(read)) // 2
    if half > min(len(messages), len(read)) or not equal_prefix(messages, read[:half]):
        return -1
    return half + equal_prefix_length(read[half:], messages[half:])


@dataclass(eq=False)
class _CallOrder:
    """The calls of one fold name in a compile, numbered, and the fold each number used last."""

    compile_id: int = 0
    calls: int = 0
    used: dict[int, int] = field(default_factory=dict)
    """The fold key the n-th call of the latest compile used."""

    def next_call(self) -> int:
        """The number of this call in the running compile (0 for the first)."""
        compile_id = _COMPILE.get()
        self.calls = self.calls + 1 if compile_id == self.compile_id else 0
        self.compile_id = compile_id
        return self.calls


_FOLD_KEYS: Final = itertools.count()
_FOLDS_LOCK: Final = threading.RLock()


def scope_cache(name: Hashable) -> dict[Any, Any] | None:
    """The active scope's dict `name` for the current generation, or None outside a compile."""
    active = _ACTIVE.get()
    scope = active.scope() if active is not None else None
    if active is None or scope is None:
        return None
    return scope.cache(name, active.generation)


def owner_cache(owner: object, name: str) -> dict[Any, Any] | None:
    """The active scope's dict `name` of `owner` (a policy) for the current generation: what an
    owner keeps between compiles of one conversation, dropped with the generation. None outside a
    compile."""
    # Keyed by a token the owner holds, not by its id (a freed owner's id is reused), and not in a
    # dataclass field (a copy, `dataclasses.replace`, starts with state of its own).
    token = owner.__dict__.get('_scope_token')
    if token is None:
        token = owner.__dict__.setdefault('_scope_token', object())
    return scope_cache((name, token))
