"""Checks of DESIGN.md section 2 that hold for every policy and profile on any input."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart, UserPromptPart

from pydantic_ai_context import validate_view
from pydantic_ai_context._parts import is_pinned


def parts_of(messages: Sequence[ModelMessage]) -> list[object]:
    return [p for m in messages for p in m.parts]


def assert_framing_kept(log: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> None:
    """Invariant 1: system prompt parts and the first user prompt survive verbatim."""
    view_parts = parts_of(view)
    for part in parts_of(log):
        if isinstance(part, SystemPromptPart):
            assert part in view_parts, f'system prompt lost: {part.content[:60]!r}'
    first_user = next((p for p in parts_of(log) if isinstance(p, UserPromptPart)), None)
    if first_user is not None and any(isinstance(m, ModelRequest) for m in log):
        assert first_user in view_parts, 'first user prompt lost'


def assert_pinned_kept(log: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> None:
    """Invariant 4: pinned messages and parts survive verbatim."""
    view_parts = parts_of(view)
    for message in log:
        if is_pinned(message) and isinstance(message, ModelRequest):
            for part in message.parts:
                if not getattr(part, 'tool_call_id', None):
                    assert part in view_parts, 'pinned content lost'
        for part in message.parts:
            if is_pinned(part):
                assert part in view_parts, 'pinned part lost'


def assert_valid(view: Sequence[ModelMessage]) -> None:
    """Invariants 2 and 7."""
    validate_view(view)


def assert_all(
    log: Sequence[ModelMessage], snapshot: Sequence[ModelMessage], view: Sequence[ModelMessage]
) -> None:
    """Invariants 1, 2 (native tool calls and results included), 4, 7 and 8 (`snapshot` is a deep copy
    of `log` taken before compiling)."""
    assert list(log) == list(snapshot), 'the input was mutated'
    assert_valid(view)
    assert_framing_kept(log, view)
    assert_pinned_kept(log, view)
    assert_native_pairs(log, view)


def assert_native_pairs(log: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> None:
    """Native tool calls and results stay together: a result in a view's response has its call in
    that response, and a call whose result the log holds still has it (or both are gone)."""
    returned = {
        p.tool_call_id for m in log for p in m.parts if getattr(p, 'part_kind', None) == 'builtin-tool-return'
    }
    for message in view:
        calls = {
            p.tool_call_id for p in message.parts if getattr(p, 'part_kind', None) == 'builtin-tool-call'
        }
        results = {
            p.tool_call_id for p in message.parts if getattr(p, 'part_kind', None) == 'builtin-tool-return'
        }
        assert results <= calls, f'native results without their call: {sorted(results - calls)}'
        assert calls & returned <= results, (
            f'native calls without their result: {sorted(calls & returned - results)}'
        )
