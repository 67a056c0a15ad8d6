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
import functools
import operator
import threading
import weakref
from collections.abc import Callable, Hashable
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
"""What one remembered object costs a memo besides its values: the slot (a weak reference) and the stamp."""

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
    """One C-level call reading, as a tuple, those of `fields` that instances of `cls` have."""
    found = _GETTERS.get((cls, fields))
    if found is None:
        declared = getattr(cls, '__dataclass_fields__', None) or {}
        present = [n for n in fields if n in declared]
        if not present:
            found = _nothing_stamp
        elif len(present) == 1:
            # The value itself, not a tuple of it: a stamp is only compared with stamps the same
            # getter made, and a tuple holding a list is one more object a full collection walks.
            found = operator.attrgetter(present[0])
        else:
            found = operator.attrgetter(*present)
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


def _forget(memo_ref: weakref.ref[ObjectMemo[Any]], slot: _Slot) -> None:
    """Called when a remembered object is freed: drop its entry (if the memo itself still exists)."""
    memo = memo_ref()
    if memo is not None:
        memo._forget(slot)


class _Slot(weakref.ref[Any]):
    """One remembered object: a weak reference to it that also holds its stamp and its values by key.

    One object per entry: a memo holds one slot per message of every conversation in memory, and
    each object allocated here is one more for the garbage collector to walk (a full collection
    walks them all, holding the GIL). The first value lives in the slot itself and only further
    keys get a dict.
    """

    __slots__ = ('checked', 'getter', 'id', 'key', 'length', 'more', 'size', 'stamp', 'value', 'value_size')

    def __new__(cls, obj: Any, callback: Callable[[_Slot], None], *args: Any) -> _Slot:
        return super().__new__(cls, obj, callback)

    def __init__(
        self,
        obj: Any,
        callback: Callable[[_Slot], None],
        getter: Callable[[Any], Any],
        stamp: Any,
        length: int,
        checked: int,
        key: Hashable,
        value: Any,
        value_size: int,
    ) -> None:
        # `weakref.ref.__init__` only checks the arguments `__new__` took.
        self.id = id(obj)
        """The key of the entry (the object's id while it lives)."""
        self.getter = getter
        self.stamp = stamp
        self.length = length
        self.checked = checked
        """The compile (`_Active.compile`) during which the stamp was last found unchanged."""
        self.key = key
        self.value = value
        self.value_size = value_size
        self.more: dict[Hashable, tuple[Any, int]] | None = None
        self.size = ENTRY_BYTES + VALUE_BYTES + value_size

    def find(self, key: Hashable) -> Any:
        if key == self.key:
            return self.value
        if self.more is not None:
            found = self.more.get(key)
            if found is not None:
                return found[0]
        return _MISSING

    def store(self, key: Hashable, value: Any, size: int) -> int:
        """Keep `value` under `key`; returns the change in bytes."""
        if key == self.key:
            delta = size - self.value_size
            self.value, self.value_size = value, size
        else:
            if self.more is None:
                self.more = {}
            previous = self.more.get(key)
            delta = (-(VALUE_BYTES + previous[1]) if previous is not None else 0) + VALUE_BYTES + size
            self.more[key] = (value, size)
        self.size += delta
        return delta


class ObjectMemo(Generic[V]):
    """Values computed from an object (a message or a part), for as long as the object lives unchanged.

    The object is held weakly: its entry is dropped when it is freed, so a memo never keeps a
    conversation in memory. A value is returned only while the object's `fields` (`MESSAGE_FIELDS` by
    default, `PART_FIELDS` for parts) are what they were when the value was stored (the same objects,
    or equal ones), and a message holds as many parts; within one compile this is compared once.
    The memo holds at most `max_bytes`
    (`ENTRY_BYTES` per object, plus `VALUE_BYTES` and the stated `size` per value) and, if given,
    `max_entries` objects; the oldest entries go first.

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
        self._fields = fields
        self._getters: dict[type, Callable[[Any], Any]] = {}
        self._items: collections.OrderedDict[int, _Slot] = collections.OrderedDict()
        self._bytes = 0
        # Sizes of entries dropped by a weakref callback, subtracted under the lock at the next put:
        # a callback may run in the middle of a put (when freeing an object frees another), so it
        # must neither take the lock nor update the total itself.
        self._freed: list[int] = []
        self._lock = threading.Lock()
        # One callback for every slot of this memo (holding the memo weakly); the slot it is given
        # names its entry.
        self._callback = functools.partial(_forget, weakref.ref(self))

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
        slot = self._items.get(id(obj))
        if slot is None or slot() is not obj:
            return default
        compile_id = _COMPILE.get()
        if not compile_id or slot.checked != compile_id:
            try:
                current = slot.getter(obj)
                if (current is not slot.stamp and current != slot.stamp) or (
                    slot.length >= 0 and len(obj.parts) != slot.length  # type: ignore[union-attr]
                ):
                    return default
            except RecursionError:  # equal-but-not-identical values nested too deep to compare
                return default
            slot.checked = compile_id
        if key == slot.key:
            return slot.value
        found = slot.find(key)
        return default if found is _MISSING else found

    def put(self, obj: Any, value: V, key: Hashable = None, *, size: int = 0) -> V:
        """Remember `value` for `obj` (as it is now) under `key`; `size` is what the value holds, in bytes."""
        if self.max_bytes == 0 or self.max_entries == 0:
            return value
        getter = self._getters.get(type(obj))
        if getter is None:
            getter = self._getters[type(obj)] = _getter(type(obj), self._fields)
        stamp = getter(obj)
        length = _length(obj)
        k = id(obj)
        size = max(size, 0)
        stale: list[_Slot] | None = None
        with self._lock:
            if self._freed:
                self._drain()
            slot = self._items.get(k)
            if slot is not None and slot() is obj and slot.length == length and _same(slot.stamp, stamp):
                self._bytes += slot.store(key, value, size)
                self._items.move_to_end(k)
            else:
                if slot is not None:
                    stale = [self._items.pop(k)]
                    self._bytes -= slot.size
                try:
                    slot = _Slot(obj, self._callback, getter, stamp, length, _COMPILE.get(), key, value, size)
                except TypeError:  # an object that cannot be referenced weakly is not remembered
                    return value
                self._items[k] = slot
                self._bytes += slot.size
            if self._bytes > self.max_bytes or (
                self.max_entries is not None and len(self._items) > self.max_entries
            ):
                stale = self._evict(stale or [])
        # Dropped entries are freed here, outside the lock: freeing a value may free an object
        # another memo (or this one) remembers, whose callback then runs.
        del stale
        return value

    def _evict(self, stale: list[_Slot]) -> list[_Slot]:
        while len(self._items) > 1 and (
            self._bytes > self.max_bytes
            or (self.max_entries is not None and len(self._items) > self.max_entries)
        ):
            _, oldest = self._items.popitem(last=False)
            self._bytes -= oldest.size
            stale.append(oldest)
        return stale

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            items, self._items = self._items, collections.OrderedDict()
            self._bytes = 0
            self._freed.clear()
        del items

    def _forget(self, slot: _Slot) -> None:
        key = slot.id
        if self._items.get(key) is slot:
            try:
                del self._items[key]
            except KeyError:  # pragma: no cover - removed by another thread meanwhile
                return
            self._freed.append(slot.size)

    def _drain(self) -> None:
        while self._freed:
            self._bytes -= self._freed.pop()


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
