"""Is a history already a valid view? The cheap check `normalize` starts with, and `validate_view`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest

from .. import _memo, _parts, _scope
from .._compaction import opens_with_provider_part
from ..errors import HistoryIntegrityError
from ._call_ids import _readable_id
from ._pairing import analyze_pairs, check_messages

_Shape = tuple[bool, tuple[str, ...], tuple[str, ...], bool]
"""(has parts, tool call ids, tool result ids, has arguments too deep to send as they are) of one message."""

_SHAPES: _memo.ObjectMemo[_Shape] = _memo.ObjectMemo(max_bytes=16 * 1024 * 1024, fields=_memo.PARTS_FIELDS)
"""Shapes of the messages seen, while they live unchanged (at most 16 MiB)."""


def _shape(message: ModelMessage) -> _Shape:
    # Messages of a log are the same objects from one compile to the next: remembering their
    # shape makes the validity check a pass over tuples. The memo checks the message was not
    # edited in place (pydantic-ai reassigns the parts of the request it is about to send).
    found = _SHAPES.get(message)
    if found is not None:
        return found
    parts: list[Any] = list(message.parts)
    if isinstance(message, ModelRequest):
        results = tuple(p.tool_call_id for p in parts if _parts.is_tool_result(p))
        shape: _Shape = (bool(parts), (), results, False)
    else:
        calls = [p for p in parts if _parts.is_tool_call(p)]
        deep = any(_parts.arguments_too_deep(p) for p in calls)
        shape = (bool(parts), tuple(p.tool_call_id for p in calls), (), deep)
    return _SHAPES.put(message, shape, size=sum(map(len, shape[1] + shape[2])))


def _already_valid(messages: Sequence[ModelMessage]) -> bool:
    """One cheap pass answering "would normalize change anything?" (the common case: no)."""
    if not messages:
        return True
    # During a compile, the check of the list without its newest request (which pydantic-ai may
    # still fill in) is resumed from the first message that changed since an earlier list.
    valid, expect_request, calls = _scope.resumed_fold(
        'integrity.valid', messages[:-1], _Validity, _Validity.state
    )
    if not valid:
        return False
    last = messages[-1]
    if not isinstance(last, ModelRequest) or not expect_request:
        return False  # out of turn, or a view that ends with a response
    has_parts, _, result_ids, deep = _shape(last)
    return has_parts and not deep and len(result_ids) == len(calls) and set(result_ids) == set(calls)


class _Validity:
    """`_already_valid` as a fold: requests and responses alternate from a request (or from a provider's
    compaction response), every request
    answers exactly the calls of the response before it, call ids are unique and readable."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.call_ids: list[tuple[str, ...]] = []
        """The call ids of each message read (before `bad_at`)."""
        self.seen: set[str] = set()
        self.bad_at: int | None = None
        """The first message that makes the list invalid (nothing after it is read)."""
        self.opening = 0
        """1 when the list starts with a provider's compaction response (what it answers is not sent)."""

    @property
    def expect_request(self) -> bool:
        return (len(self.messages) + self.opening) % 2 == 0

    @property
    def calls(self) -> tuple[str, ...]:
        return self.call_ids[-1] if self.call_ids else ()

    def state(self) -> tuple[bool, bool, tuple[str, ...]]:
        """(valid so far, a request is expected next, the calls it must answer)."""
        return self.bad_at is None, self.expect_request, self.calls

    def truncate(self, n: int) -> None:
        if self.bad_at is not None and self.bad_at < n:
            del self.messages[n:]
            return
        for ids in self.call_ids[n:]:
            self.seen.difference_update(ids)
        del self.messages[n:], self.call_ids[n:]
        self.bad_at = None
        if n == 0:
            self.opening = 0

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        for i in range(len(self.messages), len(messages)):
            message = messages[i]
            if self.bad_at is None and not self._read(message):
                self.bad_at = i
            self.messages.append(message)

    def _read(self, message: ModelMessage) -> bool:
        if not self.messages and opens_with_provider_part(message):
            self.opening = 1
        expect_request = self.expect_request
        if isinstance(message, ModelRequest) is not expect_request:
            return False
        has_parts, call_ids, result_ids, deep = _shape(message)
        if not has_parts or deep:
            return False
        if expect_request:
            calls = self.calls
            if len(result_ids) != len(calls) or set(result_ids) != set(calls):
                return False
        elif (
            len(set(call_ids)) != len(call_ids)
            or not self.seen.isdisjoint(call_ids)
            or any(_readable_id(c) != c for c in call_ids)
        ):
            return False
        self.seen.update(call_ids)
        self.call_ids.append(call_ids)
        return True


def validate_view(messages: Sequence[ModelMessage]) -> None:
    """Raise `HistoryIntegrityError` if `messages` is not a valid view (invariants 2 and 7)."""
    check_messages(messages)
    if not messages:
        return
    if not isinstance(messages[0], ModelRequest) and not opens_with_provider_part(messages[0]):
        raise HistoryIntegrityError(
            0,
            "a view must start with a ModelRequest, or a ModelResponse opening with a provider's CompactionPart",
        )
    if not isinstance(messages[-1], ModelRequest):
        raise HistoryIntegrityError(len(messages) - 1, 'a view must end with a ModelRequest')
    for i in range(1, len(messages)):
        if type(messages[i]) is type(messages[i - 1]) or (
            isinstance(messages[i], ModelRequest) == isinstance(messages[i - 1], ModelRequest)
        ):
            raise HistoryIntegrityError(i, 'requests and responses must alternate')
    report = analyze_pairs(messages)
    if report.orphans:
        i, cid = report.orphans[0]
        raise HistoryIntegrityError(i, f'tool result {cid!r} has no call in the response before it')
    if report.dangling:
        pair = report.dangling[0]
        raise HistoryIntegrityError(
            pair.call_index,
            f'tool call {pair.tool_call_id!r} ({pair.tool_name}) has no result in the next request',
        )
    if report.duplicates:
        i, cid = report.duplicates[0]
        raise HistoryIntegrityError(i, f'tool call id {cid!r} is repeated')
