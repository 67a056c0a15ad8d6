"""Tool-call pairing, safe cut points, and the normalizer that keeps every view valid.

A view is valid (DESIGN.md invariants 2 and 7) when it starts with a request, requests and
responses alternate, it ends with a request, every tool result answers a call in the response
right before it, and every call in a response that is not the last has its result in the
request right after it. `normalize` makes any history valid, reporting each repair; it never
touches the input list or its messages.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolReturnPart

from . import _memo, _parts, _scope
from .errors import HistoryIntegrityError

__all__ = (
    'PairingReport',
    'Repair',
    'RepairKind',
    'ToolPair',
    'analyze_pairs',
    'check_messages',
    'normalize',
    'normalize_with_repairs',
    'patch_dangling_tool_calls',
    'safe_cut_points',
    'unique_call_ids',
    'validate_view',
)

logger = logging.getLogger('pydantic_ai_context.integrity')

RepairKind = Literal[
    'orphan_result',
    'duplicate_call',
    'duplicate_result',
    'dangling_call',
    'empty_message',
    'merged_requests',
    'merged_responses',
    'leading_response',
    'trailing_response',
    'opaque_arguments',
    'renamed_call_id',
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

INTERRUPTED_NOTE = 'Tool call was not completed: no result was recorded.'


@dataclass(frozen=True, kw_only=True)
class Repair:
    """One change `normalize` made to a view, and why.

    `index` is the position of the affected message in the *input* history.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart

        from pydantic_ai_context import normalize_with_repairs

        broken = [ModelRequest(parts=[UserPromptPart('hi'), ToolReturnPart('ls', 'x', tool_call_id='gone')])]
        view, repairs = normalize_with_repairs(broken)
        assert repairs[0].kind == 'orphan_result' and repairs[0].tool_call_id == 'gone'
        ```
    """

    kind: RepairKind
    """What was wrong."""
    index: int
    """Index of the message in the input history."""
    detail: str
    """A human-readable account of the repair."""
    tool_call_id: str | None = None
    """The tool call concerned, if any."""

    def __str__(self) -> str:
        return f'message {self.index}: {self.kind}: {self.detail}'


@dataclass(frozen=True, kw_only=True)
class ToolPair:
    """A tool call and the request part that answers it (one entry of `analyze_pairs(...).pairs`).

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart

        from pydantic_ai_context import analyze_pairs

        log = [
            ModelRequest(parts=[UserPromptPart('list the files')]),
            ModelResponse(parts=[ToolCallPart('ls', {}, tool_call_id='c1')]),
            ModelRequest(parts=[ToolReturnPart('ls', 'a.py', tool_call_id='c1')]),
        ]
        (pair,) = analyze_pairs(log).pairs
        assert (pair.tool_name, pair.call_index, pair.result_index, pair.failed) == ('ls', 1, 2, False)
        ```
    """

    tool_call_id: str
    tool_name: str
    call_index: int
    """Index of the response holding the call."""
    result_index: int | None
    """Index of the request holding the result, None when the call has none."""
    failed: bool = False
    """The result reports an error, a retry, a denial or an interruption."""


@dataclass(frozen=True, kw_only=True)
class PairingReport:
    """How the tool calls and results of a history pair up (by `tool_call_id`, adjacency-aware).

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart

        from pydantic_ai_context import analyze_pairs

        history = [
            ModelRequest(parts=[UserPromptPart('list files')]),
            ModelResponse(parts=[ToolCallPart('ls', {}, tool_call_id='a'), ToolCallPart('pwd', {}, tool_call_id='b')]),
            ModelRequest(parts=[ToolReturnPart('ls', 'x.py', tool_call_id='a')]),
        ]
        report = analyze_pairs(history)
        assert [p.tool_call_id for p in report.dangling] == ['b']
        assert not report.is_valid
        ```
    """

    pairs: tuple[ToolPair, ...] = ()
    """Every call with its result (adjacent), in order."""
    dangling: tuple[ToolPair, ...] = ()
    """Calls with no result in the next request (the last response's calls excluded)."""
    pending: tuple[ToolPair, ...] = ()
    """Calls in the last message, still waiting for their results."""
    orphans: tuple[tuple[int, str], ...] = ()
    """(request index, tool_call_id) of results with no call in the response right before them."""
    duplicates: tuple[tuple[int, str], ...] = ()
    """(message index, tool_call_id) of repeated call ids within one response or results within one request."""

    @property
    def is_valid(self) -> bool:
        """No orphans, dangling calls or duplicates (pending calls in the last response are fine)."""
        return not (self.dangling or self.orphans or self.duplicates)


def check_messages(messages: Sequence[Any]) -> None:
    """Raise `HistoryIntegrityError` naming the index of anything that is not a pydantic-ai message."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise HistoryIntegrityError(None, f'expected a list of ModelMessage, got {type(messages).__name__}')
    # During a compile, checked once per message: a log is the previous log plus a few messages.
    _scope.resumed_fold('integrity.checked', messages, _Checked, _nothing)


def _nothing(fold: object) -> None:
    return None


class _Checked:
    """`check_messages` as a fold: the messages read so far are all pydantic-ai messages."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []

    def truncate(self, n: int) -> None:
        del self.messages[n:]

    def extend(self, messages: Sequence[Any]) -> None:
        start = len(self.messages)
        rest = messages[start:]
        # The common case in two passes in C: plain messages holding lists of parts.
        if not (set(map(type, rest)) <= _MESSAGE_TYPES and set(map(type, map(_PARTS, rest))) <= {list}):
            for i in range(start, len(messages)):
                m = messages[i]
                if not isinstance(m, ModelRequest | ModelResponse):
                    raise HistoryIntegrityError(
                        i, f'expected a ModelRequest or ModelResponse, got {type(m).__name__}'
                    )
                if not isinstance(m.parts, Sequence) or isinstance(m.parts, str | bytes):
                    raise HistoryIntegrityError(i, f'parts must be a sequence, got {type(m.parts).__name__}')
        self.messages.extend(rest)


_MESSAGE_TYPES: Final = frozenset({ModelRequest, ModelResponse})
_PARTS: Final = operator.attrgetter('parts')


def analyze_pairs(messages: Sequence[ModelMessage]) -> PairingReport:
    """Pair every tool call with its result, by `tool_call_id`, following invariant 2."""
    check_messages(messages)
    pairs: list[ToolPair] = []
    dangling: list[ToolPair] = []
    pending: list[ToolPair] = []
    orphans: list[tuple[int, str]] = []
    duplicates: list[tuple[int, str]] = []
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            calls: dict[str, Any] = {}
            for call in _parts.tool_calls(message):
                if call.tool_call_id in calls:
                    duplicates.append((i, call.tool_call_id))
                else:
                    calls[call.tool_call_id] = call
            nxt = messages[i + 1] if i < last else None
            answered: dict[str, Any] = {}
            if isinstance(nxt, ModelRequest):
                for result in _parts.tool_results(nxt):
                    if result.tool_call_id in calls and result.tool_call_id not in answered:
                        answered[result.tool_call_id] = result
            for cid, call in calls.items():
                result = answered.get(cid)
                pair = ToolPair(
                    tool_call_id=cid,
                    tool_name=call.tool_name,
                    call_index=i,
                    result_index=i + 1 if result is not None else None,
                    failed=result is not None and _parts.is_failed_result(result),
                )
                if result is not None:
                    pairs.append(pair)
                elif i == last:
                    pending.append(pair)
                else:
                    dangling.append(pair)
        else:
            prev = messages[i - 1] if i > 0 else None
            call_ids = {c.tool_call_id for c in _parts.tool_calls(prev)} if prev is not None else set()
            seen: set[str] = set()
            for result in _parts.tool_results(message):
                cid = result.tool_call_id
                if cid not in call_ids:
                    orphans.append((i, cid))
                elif cid in seen:
                    duplicates.append((i, cid))
                seen.add(cid)
    return PairingReport(
        pairs=tuple(pairs),
        dangling=tuple(dangling),
        pending=tuple(pending),
        orphans=tuple(orphans),
        duplicates=tuple(duplicates),
    )


def safe_cut_points(messages: Sequence[ModelMessage]) -> list[int]:
    """Indices `i` where `messages[:i]` and `messages[i:]` can be separated without splitting a tool pair.

    A call and its result are matched by id (the nearest earlier response holding that id), so
    the answer is right for broken histories too. `0` and `len(messages)` are always included.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart

        from pydantic_ai_context import safe_cut_points

        history = [
            ModelRequest(parts=[UserPromptPart('hi')]),
            ModelResponse(parts=[ToolCallPart('ls', {}, tool_call_id='a')]),
            ModelRequest(parts=[ToolReturnPart('ls', 'x.py', tool_call_id='a')]),
            ModelResponse(parts=[TextPart('done')]),
        ]
        assert safe_cut_points(history) == [0, 1, 3, 4]
        ```
    """
    check_messages(messages)
    # During a compile the cut points of the previous list are resumed from its first changed message.
    return _scope.resumed_fold('integrity.cuts', messages, _Cuts, _Cuts.points)


class _Cuts:
    """`safe_cut_points` as a fold: position `i` is unsafe when a result at `j >= i` answers a call
    at `k < i`. Per message `j` it keeps `lo[j]`, the lowest position its results make unsafe (`j + 1`:
    none), so `i` is safe exactly when every `lo[j]` with `j >= i` is above `i`."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.lo: list[int] = []
        self.calls_at: dict[str, int] = {}
        """The response holding each call id last (the nearest earlier one, for a result)."""
        self.undo: list[list[tuple[str, int | None]]] = []
        """Per message: what it changed in `calls_at`, to undo when it is cut off."""
        self.safe: list[int] = []
        """Safe positions below `len(messages)` (that length is always safe)."""
        self._rescan = 0
        """Where the safe positions must be found again from."""

    def truncate(self, n: int) -> None:
        low = min(self.lo[n:], default=n)
        for j in range(len(self.messages) - 1, n - 1, -1):
            for call_id, before in reversed(self.undo[j]):
                if before is None:
                    self.calls_at.pop(call_id, None)
                else:
                    self.calls_at[call_id] = before
        del self.messages[n:], self.lo[n:], self.undo[n:]
        # Positions from `low` on may have been unsafe only because of what was cut off.
        self._cut_safe(min(low, n))

    def _cut_safe(self, start: int) -> None:
        self._rescan = min(self._rescan, start)

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        start = len(self.messages)
        low = start
        for j in range(start, len(messages)):
            message = messages[j]
            lo = j + 1
            changes: list[tuple[str, int | None]] = []
            if isinstance(message, ModelResponse):
                for call in _parts.tool_calls(message):
                    changes.append((call.tool_call_id, self.calls_at.get(call.tool_call_id)))
                    self.calls_at[call.tool_call_id] = j
            else:
                for result in _parts.tool_results(message):
                    k = self.calls_at.get(result.tool_call_id)
                    if k is not None and k + 1 < lo:
                        lo = k + 1
            self.messages.append(message)
            self.lo.append(lo)
            self.undo.append(changes)
            low = min(low, lo)
        if low < start:
            self._cut_safe(low)
        rescan = min(self._rescan, start)
        # Safe positions from `rescan` on: scanned right to left with the lowest `lo` seen so far.
        found: list[int] = []
        lowest = len(self.messages) + 1
        for i in range(len(self.messages) - 1, rescan - 1, -1):
            if self.lo[i] < lowest:
                lowest = self.lo[i]
            if lowest > i:
                found.append(i)
        found.reverse()
        del self.safe[bisect.bisect_left(self.safe, rescan) :]
        self.safe.extend(found)
        self._rescan = len(self.messages)

    def points(self) -> list[int]:
        return [*self.safe, len(self.messages)]


# --- normalize --------------------------------------------------------------------------------


@dataclass
class _Slot:
    """A message of the view under construction, with the input indices it came from."""

    message: ModelMessage
    sources: list[int] = field(default_factory=list)

    @property
    def index(self) -> int:
        return self.sources[0] if self.sources else -1


def normalize_with_repairs(messages: Sequence[ModelMessage]) -> tuple[list[ModelMessage], list[Repair]]:
    """Return a valid view of `messages` and the list of repairs that made it so.

    Repairs, each safe for a view (the log keeps everything):

    - empty messages are dropped; consecutive requests (or responses) are merged into one;
    - leading responses are dropped (a view starts with a request);
    - results whose call is not in the response right before them are dropped (orphans),
      as are repeated call ids within one response and repeated results for one call;
    - calls without a result get a synthetic result saying so (`outcome='interrupted'` on
      pydantic-ai 2.x), in the next request or, after the last response, in a new request;
    - a trailing response without calls is left out (a model request must end with a request);
    - a call id an earlier step already used is renamed, with its result (`unique_call_ids`);
    - tool-call arguments nested deeper than `MAX_ARGUMENTS_DEPTH` (200) levels are sent as their
      JSON text: nothing here, in pydantic-ai or in a provider SDK, has to walk them recursively.

    Raises:
        HistoryIntegrityError: an element is not a `ModelRequest`/`ModelResponse`.
    """
    check_messages(messages)
    if _already_valid(messages):
        return list(messages), []
    repairs: list[Repair] = []
    slots = [_Slot(m, [i]) for i, m in enumerate(_unique_call_ids(messages, repairs))]
    # Each pass can expose work for another (dropping an orphan can empty a request, which makes
    # two responses adjacent); iterate to a fixed point, which also makes normalize idempotent.
    for _ in range(len(slots) + 2):
        before = len(repairs)
        slots = _drop_empty(slots, repairs)
        slots = _opaque_arguments(slots, repairs)
        slots = _merge_adjacent(slots, repairs)
        slots = _drop_leading_responses(slots, repairs)
        slots = _pair(slots, repairs)
        slots = _end_with_request(slots, repairs)
        if len(repairs) == before:
            break
    for repair in repairs:
        logger.info('normalize repaired %s', repair)
    return [s.message for s in slots], repairs


def normalize(
    messages: Sequence[ModelMessage],
    *,
    on_repair: Callable[[Repair], None] | None = None,
) -> list[ModelMessage]:
    """Return a valid view of `messages` (invariants 2 and 7), repairing what is safe to repair.

    Each repair is logged on the `pydantic_ai_context.integrity` logger and passed to
    `on_repair`. A valid history comes back equal to the input (as a new list).
    Usable directly as a history processor.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, UserPromptPart

        from pydantic_ai_context import normalize

        interrupted = [
            ModelRequest(parts=[UserPromptPart('run the tests')]),
            ModelResponse(parts=[ToolCallPart('pytest', {}, tool_call_id='t1')]),
        ]
        view = normalize(interrupted)
        assert len(view) == 3 and view[2].parts[0].tool_call_id == 't1'
        assert len(interrupted) == 2  # the input is never changed
        ```
    """
    view, repairs = normalize_with_repairs(messages)
    if on_repair is not None:
        for repair in repairs:
            on_repair(repair)
    return view


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
    """`_already_valid` as a fold: requests and responses alternate from a request, every request
    answers exactly the calls of the response before it, call ids are unique and readable."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.call_ids: list[tuple[str, ...]] = []
        """The call ids of each message read (before `bad_at`)."""
        self.seen: set[str] = set()
        self.bad_at: int | None = None
        """The first message that makes the list invalid (nothing after it is read)."""

    @property
    def expect_request(self) -> bool:
        return len(self.messages) % 2 == 0

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

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        for i in range(len(self.messages), len(messages)):
            message = messages[i]
            if self.bad_at is None and not self._read(message):
                self.bad_at = i
            self.messages.append(message)

    def _read(self, message: ModelMessage) -> bool:
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
    if not isinstance(messages[0], ModelRequest):
        raise HistoryIntegrityError(0, 'a view must start with a ModelRequest')
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


def unique_call_ids(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """`messages` where every tool call id is unique and can be named in a marker's ref.

    Some models and providers number calls per response (`call_0` in every step) or send empty
    ids. A view that repeats an id is rejected by some providers and makes a marker's ref (the
    `tool_call_id`) name several results; an empty id, or one with a quote, a backslash, a control
    character or surrounding space, cannot be written in `read_context('<ref>')` and read back. So
    such a call becomes `<id>-<n>` (the first `n` from 2 not already used; the id made readable
    first, `call` for an empty one), in the call and in its result. Only earlier messages decide
    a name, so a log that grows keeps its names, and `read_context` finds a ref in the canonical
    log by renaming it the same way. The last message's calls keep their ids while their results
    are pending.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart

        from pydantic_ai_context.integrity import unique_call_ids

        step = [ModelResponse(parts=[ToolCallPart('ls', {}, tool_call_id='0')]),
                ModelRequest(parts=[ToolReturnPart('ls', 'a.py', tool_call_id='0')])]
        log = [ModelRequest(parts=[UserPromptPart('list twice')]), *step, *step]
        assert [p.tool_call_id for m in unique_call_ids(log)[3:] for p in m.parts] == ['0-2', '0-2']
        ```
    """
    return _unique_call_ids(messages, [])


_UNREADABLE_ID: Final = re.compile(r"['\\\x00-\x1f\x7f]")
_MAX_ID_CHARS: Final = 120


_SUFFIX_ROOM: Final = 8
"""A renamed id is its readable base (at most `_MAX_ID_CHARS`) plus `-<n>`: an id that long is
already readable, so a view of a view keeps the names its first compile gave."""


def _readable_id(call_id: str) -> str:
    cleaned = _UNREADABLE_ID.sub('_', call_id.strip())
    if cleaned == call_id and 0 < len(call_id) <= _MAX_ID_CHARS + _SUFFIX_ROOM:
        return call_id
    return cleaned[:_MAX_ID_CHARS] or 'call'


def _unique_call_ids(messages: Sequence[ModelMessage], repairs: list[Repair]) -> list[ModelMessage]:
    used: set[str] = set()
    renames: dict[str, str] = {}
    out: list[ModelMessage] = list(messages)
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            renames = {}
            ids = list(dict.fromkeys(c.tool_call_id for c in _parts.tool_calls(message)))
            if i < last:
                own = set(ids)
                for cid in ids:
                    name = _readable_id(cid)
                    if name == cid and cid not in used:
                        continue
                    new, n = name, 2
                    while new in used or (new in own and new != cid):
                        new, n = f'{name}-{n}', n + 1
                    renames[cid] = new
                    used.add(new)
                    why = 'was used by an earlier call' if cid in used else 'cannot be named in a marker'
                    repairs.append(
                        Repair(
                            kind='renamed_call_id',
                            index=i,
                            detail=f'call id {cid!r} {why}; renamed {new!r} in the view',
                            tool_call_id=cid,
                        )
                    )
            used.update(ids)
            if renames:
                out[i] = _renamed(message, renames, _parts.is_tool_call)
        elif renames and any(p.tool_call_id in renames for p in _parts.tool_results(message)):
            out[i] = _renamed(message, renames, _parts.is_tool_result)
    return out


def _renamed(message: ModelMessage, renames: dict[str, str], which: Callable[[Any], bool]) -> ModelMessage:
    parts: list[Any] = []
    part: Any
    for part in message.parts:
        if which(part) and part.tool_call_id in renames:
            part = dataclasses.replace(part, tool_call_id=renames[part.tool_call_id])
        parts.append(part)
    return _parts.replace_parts(message, parts)


def _drop_empty(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    out: list[_Slot] = []
    for slot in slots:
        if not slot.message.parts:
            kind = 'request' if isinstance(slot.message, ModelRequest) else 'response'
            repairs.append(Repair(kind='empty_message', index=slot.index, detail=f'empty {kind} left out'))
        else:
            out.append(slot)
    return out


def _opaque_arguments(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    out: list[_Slot] = []
    for slot in slots:
        message = slot.message
        if isinstance(message, ModelResponse) and _shape(message)[3]:
            # The same copy every compile, so what is remembered about it stays warm.
            copy = _memo.remembered_copy(
                _AS_TEXT, message, None, _with_arguments_as_text, message, size=_parts_text_size
            )
            for part in message.parts:
                if _parts.is_tool_call(part) and _parts.arguments_too_deep(part):
                    repairs.append(
                        Repair(
                            kind='opaque_arguments',
                            index=slot.index,
                            detail=f'arguments of call {part.tool_call_id!r} ({part.tool_name}) are nested deeper '
                            f'than {_parts.MAX_ARGUMENTS_DEPTH} levels; sent as their JSON text',
                            tool_call_id=part.tool_call_id,
                        )
                    )
            slot = _Slot(copy, slot.sources)
        out.append(slot)
    return out


_AS_TEXT: _memo.ObjectMemo[Any] = _memo.ObjectMemo(max_bytes=16 * 1024 * 1024)


def _parts_text_size(message: ModelMessage) -> int:
    return sum(len(_parts.args_text(p)) for p in _parts.tool_calls(message))


def _with_arguments_as_text(message: ModelResponse) -> ModelResponse:
    parts = [
        dataclasses.replace(p, args=_parts.json_text(p.args))
        if _parts.is_tool_call(p) and _parts.arguments_too_deep(p)
        else p
        for p in message.parts
    ]
    return dataclasses.replace(message, parts=parts)


def _merge_adjacent(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    out: list[_Slot] = []
    for slot in slots:
        prev = out[-1] if out else None
        if (
            prev is not None
            and isinstance(prev.message, ModelRequest)
            and isinstance(slot.message, ModelRequest)
        ):
            merged = dataclasses.replace(
                prev.message,
                parts=[*prev.message.parts, *slot.message.parts],
                instructions=slot.message.instructions or prev.message.instructions,
                metadata=_merged_metadata(prev.message, slot.message),
            )
            out[-1] = _Slot(merged, prev.sources + slot.sources)
            repairs.append(
                Repair(
                    kind='merged_requests', index=slot.index, detail='consecutive requests merged into one'
                )
            )
        elif (
            prev is not None
            and isinstance(prev.message, ModelResponse)
            and isinstance(slot.message, ModelResponse)
        ):
            merged_response = dataclasses.replace(
                prev.message,
                parts=[*prev.message.parts, *slot.message.parts],
                metadata=_merged_metadata(prev.message, slot.message),
            )
            out[-1] = _Slot(merged_response, prev.sources + slot.sources)
            repairs.append(
                Repair(
                    kind='merged_responses', index=slot.index, detail='consecutive responses merged into one'
                )
            )
        else:
            out.append(slot)
    return out


def _merged_metadata(first: ModelMessage, second: ModelMessage) -> Any:
    """The first message's metadata, pinned when either message was: a pin on the second message
    must survive the merge (the application asked for that content to be kept)."""
    if _parts.is_pinned(second) and not _parts.is_pinned(first):
        return {**(first.metadata or {}), 'pinned': True}
    return first.metadata


def _drop_leading_responses(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    start = 0
    while start < len(slots) and isinstance(slots[start].message, ModelResponse):
        repairs.append(
            Repair(
                kind='leading_response',
                index=slots[start].index,
                detail='a view starts with a request; the response before the first request is left out',
            )
        )
        start += 1
    return slots[start:]


def _pair(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    out = list(slots)
    for i, slot in enumerate(out):
        message = slot.message
        if isinstance(message, ModelResponse):
            seen: set[str] = set()
            kept: list[Any] = []
            response_parts: list[Any] = list(message.parts)
            for part in response_parts:
                if _parts.is_tool_call(part):
                    if part.tool_call_id in seen:
                        repairs.append(
                            Repair(
                                kind='duplicate_call',
                                index=slot.index,
                                detail=f'repeated call id {part.tool_call_id!r} ({part.tool_name}) left out',
                                tool_call_id=part.tool_call_id,
                            )
                        )
                        continue
                    seen.add(part.tool_call_id)
                kept.append(part)
            if len(kept) != len(message.parts):
                out[i] = _Slot(dataclasses.replace(message, parts=kept), slot.sources)
            continue
        prev = out[i - 1].message if i > 0 else None
        calls = {c.tool_call_id: c for c in _parts.tool_calls(prev)} if prev is not None else {}
        answered: set[str] = set()
        new_parts: list[Any] = []
        changed = False
        request_parts: list[Any] = list(message.parts)
        for part in request_parts:
            if _parts.is_tool_result(part):
                cid = part.tool_call_id
                if cid not in calls:
                    repairs.append(
                        Repair(
                            kind='orphan_result',
                            index=slot.index,
                            detail=f'result for {cid!r} ({getattr(part, "tool_name", None)}) has no call '
                            'in the response before it; left out of the view',
                            tool_call_id=cid,
                        )
                    )
                    changed = True
                    continue
                if cid in answered:
                    repairs.append(
                        Repair(
                            kind='duplicate_result',
                            index=slot.index,
                            detail=f'second result for {cid!r} left out',
                            tool_call_id=cid,
                        )
                    )
                    changed = True
                    continue
                answered.add(cid)
            new_parts.append(part)
        missing = [c for cid, c in calls.items() if cid not in answered]
        if missing:
            changed = True
            synthetic = [_synthetic_result(c, INTERRUPTED_NOTE, out[i - 1].message) for c in missing]
            for c in missing:
                repairs.append(
                    Repair(
                        kind='dangling_call',
                        index=out[i - 1].index,
                        detail=f'call {c.tool_call_id!r} ({c.tool_name}) had no result; a synthetic one was added',
                        tool_call_id=c.tool_call_id,
                    )
                )
            new_parts = synthetic + new_parts
        if changed:
            out[i] = _Slot(dataclasses.replace(message, parts=new_parts), slot.sources)
    return out


def _end_with_request(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    if not slots or isinstance(slots[-1].message, ModelRequest):
        return slots
    last = slots[-1]
    calls = _parts.tool_calls(last.message)
    if calls:
        for c in calls:
            repairs.append(
                Repair(
                    kind='dangling_call',
                    index=last.index,
                    detail=f'call {c.tool_call_id!r} ({c.tool_name}) in the last response had no result; '
                    'a synthetic one was added',
                    tool_call_id=c.tool_call_id,
                )
            )
        request = ModelRequest(
            parts=[_synthetic_result(c, INTERRUPTED_NOTE, last.message) for c in _unique_calls(calls)],
            timestamp=getattr(last.message, 'timestamp', None),
        )
        request = _copy_run_ids(request, last.message)
        return [*slots, _Slot(request, [])]
    repairs.append(
        Repair(
            kind='trailing_response',
            index=last.index,
            detail='a view sent to a model ends with a request; the final response is left out of it',
        )
    )
    return slots[:-1]


def _unique_calls(calls: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for c in calls:
        if c.tool_call_id not in seen:
            seen.add(c.tool_call_id)
            out.append(c)
    return out


def _copy_run_ids(request: ModelRequest, like: ModelMessage) -> ModelRequest:
    updates = {
        name: getattr(like, name)
        for name in ('run_id', 'conversation_id')
        if hasattr(request, name) and getattr(like, name, None)
    }
    return dataclasses.replace(request, **updates) if updates else request


def _synthetic_result(call: Any, note: str, response: ModelMessage) -> ToolReturnPart:
    # The response's timestamp, not the clock: the same log must give the same view.
    part = ToolReturnPart(
        tool_name=call.tool_name,
        content=note,
        tool_call_id=call.tool_call_id,
        metadata={_parts.META_KEY: {'kind': 'synthetic', 'reason': 'dangling_call'}},
        timestamp=response.timestamp or _EPOCH,
    )
    if hasattr(part, 'outcome'):
        part = dataclasses.replace(part, outcome=_parts.INTERRUPTED_OUTCOME)
    return part


def patch_dangling_tool_calls(
    messages: Sequence[ModelMessage], *, note: str = 'Interrupted by user.'
) -> list[ModelMessage]:
    """Give every tool call that has no result a synthetic result carrying `note`.

    For chat loops after an interrupt (Ctrl-C during tool execution): the history can be sent
    again without the provider rejecting an unanswered call. Unlike `normalize`, this is meant for
    the canonical log, so it changes nothing else: orphans, merges and a trailing response stay
    as they are. The input is not mutated.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, UserPromptPart

        from pydantic_ai_context import patch_dangling_tool_calls

        history = [
            ModelRequest(parts=[UserPromptPart('deploy')]),
            ModelResponse(parts=[ToolCallPart('deploy', {'env': 'prod'}, tool_call_id='d1')]),
        ]
        patched = patch_dangling_tool_calls(history)
        assert patched[-1].parts[0].content == 'Interrupted by user.'
        ```
    """
    check_messages(messages)
    out: list[ModelMessage] = []
    n = len(messages)
    i = 0
    while i < n:
        message = messages[i]
        out.append(message)
        calls = _unique_calls(_parts.tool_calls(message))
        if calls:
            nxt = messages[i + 1] if i + 1 < n else None
            if isinstance(nxt, ModelRequest):
                answered = {r.tool_call_id for r in _parts.tool_results(nxt)}
                missing = [c for c in calls if c.tool_call_id not in answered]
                if missing:
                    patched = [_synthetic_result(c, note, message) for c in missing]
                    out.append(dataclasses.replace(nxt, parts=[*patched, *nxt.parts]))
                    i += 2
                    continue
            else:
                request = ModelRequest(
                    parts=[_synthetic_result(c, note, message) for c in calls],
                    timestamp=getattr(message, 'timestamp', None),
                )
                out.append(_copy_run_ids(request, message))
        i += 1
    return out
