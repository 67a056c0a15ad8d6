"""Tool-call pairing: the repair record, the pairing report, and the message-type check.

A tool call and its result are matched by `tool_call_id`, the result in the request right after
the response holding the call (DESIGN.md invariant 2).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from .. import _parts, _scope
from ..errors import HistoryIntegrityError

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
