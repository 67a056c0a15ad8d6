"""Per-object memos that stay right when a message is edited in place, and never keep it alive.

pydantic-ai edits the newest request of a run in place (`request.parts = [*request.parts, delta]`,
`request.instructions = ...`, run ids, metadata), pydantic-ai 1.x re-renders the dynamic system
prompts of old requests the same way, and an application may redact a message by reassigning its
parts. So no memo here trusts an object's identity alone: `ObjectMemo` remembers values computed
from one message or part, holds the object weakly (the entry goes when the object is freed), and
keeps a *stamp* of what can be reassigned on it: a message's parts list (and how many parts it
holds), instructions, metadata, run id, conversation id and timestamp; a part's content, arguments,
metadata, tool name and outcome. An object whose stamp changed misses. Each memo is bounded by
bytes (`DEFAULT_MEMO_BYTES` unless given).

The incremental state of a profile (what is reused by identity across compiles) lives in
`_scope.MemoScope`; while a compile runs, object memos compare each stamp once.
"""

from __future__ import annotations

import collections
import itertools
import operator
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from contextvars import ContextVar
from typing import Any, Final, Generic, TypeVar

__all__ = (
    'DEFAULT_MEMO_BYTES',
    'MESSAGE_FIELDS',
    'PARTS_FIELDS',
    'PART_FIELDS',
    'PINNED_FIELDS',
    'ObjectMemo',
    'remembered_copy',
    'stamp',
)

V = TypeVar('V')

DEFAULT_MEMO_BYTES: Final = 64 * 1024 * 1024
"""The most an `ObjectMemo` holds, in bytes of what it computed plus a fixed cost per entry."""

ENTRY_BYTES: Final = 320
"""What one remembered object costs a memo besides its values: its entry and a share of the object's
row (the weak reference and stamps every memo of the object shares)."""

VALUE_BYTES: Final = 96
"""What one remembered value costs besides the `size` its caller states (e.g. a string's length)."""

_PARTS: Final = operator.attrgetter('parts')
_MISSING: Final = object()


MESSAGE_FIELDS: Final = ('parts', 'instructions', 'metadata', 'run_id', 'conversation_id', 'timestamp')
"""What of a message pydantic-ai (or an application) can reassign in place: its parts list,
instructions, metadata, run id, conversation id and timestamp."""

PARTS_FIELDS: Final = ('parts',)
"""For what is computed from a message's parts alone."""

PINNED_FIELDS: Final = ('parts', 'metadata')
"""For what reads a message's parts, pins and markers."""

PART_FIELDS: Final = ('content', 'args', 'metadata', 'tool_name', 'outcome')
"""What of a part a memo reads: content, arguments, metadata, tool name and outcome."""

_GETTERS: dict[tuple[type, tuple[str, ...]], Callable[[Any], Any]] = {}


def _getter(cls: type, fields: tuple[str, ...]) -> Callable[[Any], Any]:
    """One C-level call reading those of `fields` that instances of `cls` have (a tuple of two or more)."""
    found = _GETTERS.get((cls, fields))
    if found is None:
        declared = getattr(cls, '__dataclass_fields__', None) or {}
        present = [n for n in fields if n in declared]
        # One name gives the value itself, not a tuple of it: a stamp is only compared with stamps
        # the same getter made.
        found = operator.attrgetter(*present) if present else _nothing_stamp
        _GETTERS[(cls, fields)] = found
    return found


def _nothing_stamp(obj: Any) -> tuple[Any, ...]:
    return ()


def _length(obj: Any) -> int:
    """How many parts a message holds (a list edited in place changes length), or -1 for a part."""
    parts = getattr(obj, 'parts', None)
    return len(parts) if isinstance(parts, list | tuple) else -1


def stamp(obj: Any, fields: tuple[str, ...] = MESSAGE_FIELDS) -> tuple[Any, ...]:
    """The values of `fields` an object has, and the number of its parts: compared with `==`, which
    is identity for the same objects (an equal replacement is as good)."""
    return (_getter(type(obj), fields)(obj), _length(obj))


def _same(a: Any, b: Any) -> bool:
    # Identity of each field first (the common case, in C); an equal replacement is as good.
    try:
        return a is b or bool(a == b)
    except RecursionError:  # equal-but-not-identical values nested too deep to compare: a miss
        return False


_SERIALS: Final = itertools.count(1)
"""Numbers of rows and memos: an entry names its row by number (an int the collector never walks)."""

_FIELDS: list[str] = []
"""Every field some memo reads (a row stamps them all, so every memo of an object shares one stamp)."""
_FIELDS_SEEN: list[tuple[str, ...]] = [()]
"""`_FIELDS` as a tuple, the newest last: a row made before a field was added is stamped again."""

_ROWS: dict[int, _Row] = {}
"""Every remembered object's row, by the object's id (while it lives)."""

_MEMOS: dict[int, weakref.ref[ObjectMemo[Any]]] = {}
"""Every memo, by number: a row names the memos that hold an entry for its object."""

_ROWS_LOCK: Final = threading.Lock()
"""Taken to create a row, to add a field, and to change which memos a row names; never by a weakref
callback (it may run inside a put that holds it), and always after a memo's own lock."""


def _read_fields(fields: tuple[str, ...]) -> tuple[str, ...]:
    """Add `fields` to those every row stamps; returns them all."""
    with _ROWS_LOCK:
        missing = [name for name in fields if name not in _FIELDS]
        if missing:
            _FIELDS.extend(missing)
            _FIELDS_SEEN.append(tuple(_FIELDS))
        return _FIELDS_SEEN[-1]


class _Row(weakref.ref[Any]):
    """One remembered object, shared by every memo that remembers it: a weak reference to it, one
    stamp of every field a memo reads, and the numbers of the memos that hold an entry for it.

    One row per object, not per object and memo: a message is remembered by a dozen memos, and each
    object allocated here is one more for the garbage collector to walk (a full collection walks
    them all, holding the GIL) and a few hundred bytes. A memo's entry is a tuple naming the row by
    number and version, which the collector stops walking once its value is a plain one (a count,
    a string).

    `stamp` and `length` are the fields' values and the number of parts when last compared,
    `version` goes up when they change (an entry stored under an older version misses: an edit of
    any field a memo reads misses every memo of the object, which costs one message's values), and
    `checked` is the compile (`_COMPILE`) during which they were last compared. An update writes
    the version first and `checked` last: a reader in another thread that sees part of it compares
    again, and at worst misses.
    """

    __slots__ = ('checked', 'fields', 'id', 'length', 'memos', 'serial', 'stamp', 'version')

    def __new__(cls, obj: Any, callback: Callable[[_Row], None]) -> _Row:
        return super().__new__(cls, obj, callback)

    def __init__(self, obj: Any, callback: Callable[[_Row], None]) -> None:
        self.id = id(obj)
        self.serial = next(_SERIALS)
        self.memos: tuple[int, ...] = ()
        self.fields: tuple[str, ...] = _FIELDS_SEEN[-1]
        self.stamp: Any = _getter(type(obj), self.fields)(obj)
        self.length = _length(obj)
        self.version = 0
        self.checked = _COMPILE.get()

    def current(self, obj: Any, compile_id: int) -> int:
        """The version of `obj`'s fields, compared with the stamp once per compile."""
        if compile_id and self.checked == compile_id:
            return self.version
        fields = _FIELDS_SEEN[-1]
        stamp = _getter(type(obj), fields)(obj)
        length = _length(obj)
        if fields is not self.fields or length != self.length or not _same(self.stamp, stamp):
            self.version += 1
            self.fields = fields
        # Unchanged, or an equal replacement (as good): the newest values are kept, so the next
        # comparison is by identity.
        self.stamp = stamp
        self.length = length
        self.checked = compile_id
        return self.version


def _row_freed(row: _Row) -> None:
    """Called while a remembered object is freed: its entries go from every memo that holds one.
    Takes no lock (it may run inside a put); a dict operation is atomic under the GIL."""
    if _ROWS.get(row.id) is row:
        _ROWS.pop(row.id, None)
    for serial in row.memos:
        ref = _MEMOS.get(serial)
        memo = ref() if ref is not None else None
        if memo is not None:
            memo._forget(row.id)


def _row_for(obj: Any, memo: int) -> _Row | None:
    """`obj`'s row, made if it has none, naming memo number `memo`; None for an object that cannot
    be referenced weakly. Call under the memo's lock."""
    k = id(obj)
    row = _ROWS.get(k)
    if row is not None and row() is obj and memo in row.memos:
        return row
    with _ROWS_LOCK:
        row = _ROWS.get(k)
        if row is None or row() is not obj:
            try:
                row = _Row(obj, _row_freed)
            except TypeError:  # an object that cannot be referenced weakly is not remembered
                return None
            _ROWS[k] = row
        if memo not in row.memos:
            # Numbers of memos freed since are dropped here: a long-lived message outlives many.
            row.memos = (*(m for m in row.memos if m in _MEMOS), memo)
    return row


def _release(memo: int, ids: Sequence[int]) -> None:
    """Memo number `memo` holds no entry for these objects any more: rows no memo names go."""
    with _ROWS_LOCK:
        for k in ids:
            row = _ROWS.get(k)
            if row is None or memo not in row.memos:
                continue
            row.memos = tuple(m for m in row.memos if m != memo)
            if not row.memos:
                del _ROWS[k]


def _memo_freed(serial: int) -> Callable[[Any], None]:
    def forget(_: Any) -> None:
        _MEMOS.pop(serial, None)

    return forget


# An entry: (row number, version, key, value, value size, further values by key or None, total bytes).
_Entry = tuple[int, int, Hashable, Any, int, 'dict[Hashable, tuple[Any, int]] | None', int]


class ObjectMemo(Generic[V]):
    """Values computed from an object (a message or a part), for as long as the object lives unchanged.

    The object is held weakly: its entry is dropped when it is freed, so a memo never keeps a
    conversation in memory. A value is returned only while the object's `fields` (`MESSAGE_FIELDS` by
    default, `PART_FIELDS` for parts) are what they were when the value was stored (the same objects,
    or equal ones), and a message holds as many parts; within one compile this is compared once.
    The memo holds at most `max_bytes`
    (`ENTRY_BYTES` per object, plus `VALUE_BYTES` and the stated `size` per value) and, if given,
    `max_entries` objects; the oldest entries go first. Every memo shares one row per object (its
    weak reference and stamps): a memo's own entry is a tuple.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart

        from pydantic_ai_context._memo import ObjectMemo

        memo: ObjectMemo[int] = ObjectMemo()
        message = ModelRequest(parts=[UserPromptPart('hi')])
        memo.put(message, 1)
        assert memo.get(message) == 1
        message.parts = [*message.parts, ToolReturnPart('ls', 'x', tool_call_id='c1')]
        assert memo.get(message) is None  # edited in place: a miss
        del message
        assert len(memo) == 0  # freed: forgotten
        ```
    """

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MEMO_BYTES,
        max_entries: int | None = None,
        fields: tuple[str, ...] = MESSAGE_FIELDS,
    ) -> None:
        if max_bytes < 0 or (max_entries is not None and max_entries < 0):
            raise ValueError('max_bytes and max_entries must be >= 0')
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        _read_fields(fields)  # every row stamps them, with every other memo's
        self._items: collections.OrderedDict[int, _Entry] = collections.OrderedDict()
        self._bytes = 0
        # Sizes of entries dropped by a weakref callback, subtracted under the lock at the next put:
        # a callback may run in the middle of a put (when freeing an object frees another), so it
        # must neither take the lock nor update the total itself.
        self._freed: list[int] = []
        self._lock = threading.Lock()
        self._serial = next(_SERIALS)
        _MEMOS[self._serial] = weakref.ref(self, _memo_freed(self._serial))

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        """What the memo holds now, in the units of `max_bytes`."""
        return self._bytes - sum(self._freed)

    def get(self, obj: Any, key: Hashable = None, default: Any = None) -> V | Any:
        """The value stored for `obj` under `key`, or `default` if `obj` changed since, or has none."""
        # Asked of every message of a view, often many times in one compile: within a compile the
        # stamp is compared once (nothing edits a message while it compiles).
        k = id(obj)
        entry = self._items.get(k)
        if entry is None:
            return default
        row = _ROWS.get(k)
        if row is None or row.serial != entry[0] or row() is not obj:
            return default
        try:
            version = row.current(obj, _COMPILE.get())
        except RecursionError:  # equal-but-not-identical values nested too deep to compare
            return default
        if version != entry[1]:
            return default
        if key == entry[2]:
            return entry[3]
        more = entry[5]
        if more is not None:
            found = more.get(key)
            if found is not None:
                return found[0]
        return default

    def put(self, obj: Any, value: V, key: Hashable = None, *, size: int = 0) -> V:
        """Remember `value` for `obj` (as it is now) under `key`; `size` is what the value holds, in bytes."""
        if self.max_bytes == 0 or self.max_entries == 0:
            return value
        k = id(obj)
        size = max(size, 0)
        compile_id = _COMPILE.get()
        stale: list[Any] = []
        with self._lock:
            if self._freed:
                self._drain()
            row = _row_for(obj, self._serial)
            if row is None:
                return value
            try:
                version = row.current(obj, compile_id)
            except RecursionError:
                return value
            entry = self._items.pop(k, None)
            if entry is not None:
                # Dropped entries are freed after the lock: freeing a value may free an object
                # another memo (or this one) remembers, whose callback then runs.
                stale.append(entry)
                self._bytes -= entry[6]
                if entry[0] != row.serial or entry[1] != version:
                    entry = None
            new = _stored(entry, row.serial, version, key, value, size)
            self._items[k] = new
            self._bytes += new[6]
            if self._bytes > self.max_bytes or (
                self.max_entries is not None and len(self._items) > self.max_entries
            ):
                self._evict(stale)
        del stale
        return value

    def _evict(self, stale: list[Any]) -> None:
        gone: list[int] = []
        while len(self._items) > 1 and (
            self._bytes > self.max_bytes
            or (self.max_entries is not None and len(self._items) > self.max_entries)
        ):
            k, oldest = self._items.popitem(last=False)
            self._bytes -= oldest[6]
            stale.append(oldest)
            gone.append(k)
        _release(self._serial, gone)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            items, self._items = self._items, collections.OrderedDict()
            self._bytes = 0
            self._freed.clear()
            _release(self._serial, list(items))
        del items

    def _forget(self, k: int) -> None:
        # The object at id `k` is being freed: any entry at `k` is its own or an older object's.
        entry = self._items.pop(k, None)
        if entry is not None:
            self._freed.append(entry[6])

    def _drain(self) -> None:
        while self._freed:
            self._bytes -= self._freed.pop()


def _stored(entry: _Entry | None, serial: int, version: int, key: Hashable, value: Any, size: int) -> _Entry:
    """`entry` (of the same object and version, or None) with `value` stored under `key`."""
    if entry is None:
        return (serial, version, key, value, size, None, ENTRY_BYTES + VALUE_BYTES + size)
    _, _, first, first_value, first_size, more, total = entry
    if key == first:
        return (serial, version, key, value, size, more, total - first_size + size)
    more = dict(more) if more is not None else {}
    previous = more.get(key)
    total += (-(VALUE_BYTES + previous[1]) if previous is not None else 0) + VALUE_BYTES + size
    more[key] = (value, size)
    return (serial, version, first, first_value, first_size, more, total)


def _nothing() -> None:
    return None


def remembered_copy(
    memo: ObjectMemo[Any],
    message: Any,
    key: Hashable,
    build: Callable[..., Any],
    *args: Any,
    depends_on: Any = None,
    size: Callable[[Any], int] | None = None,
) -> Any:
    """What `build(*args)` makes of `message` (itself, or a changed copy), remembered in `memo` under `key`.

    The memo holds neither `message` nor `depends_on` (another message the result was built from,
    checked by identity) strongly. A remembered copy is returned only while its own stamp is the
    one it was built with: a copy can be the request pydantic-ai fills in before sending it.
    `size` tells the memo what a new copy holds, in bytes.
    """
    found = memo.get(message, key)
    if found is not None and found[0]() is depends_on:
        held = found[1]
        if held is None:
            return message
        copy, copy_stamp = held
        if _same(stamp(copy), copy_stamp):
            return copy
    result = build(*args)
    dependency = weakref.ref(depends_on) if depends_on is not None else _nothing
    if result is message:
        memo.put(message, (dependency, None), key)
    else:
        held = (result, stamp(result))
        memo.put(message, (dependency, held), key, size=size(result) if size is not None else 0)
    return result


_COMPILE: ContextVar[int] = ContextVar('pydantic_ai_context_compile', default=0)
"""The compile running in this task (a number no other compile has; 0 outside any compile): within
one compile nothing edits a message, so an object memo compares a stamp once per compile. Set by
`_scope.compiling`."""
