"""Checks of DESIGN.md section 2 that hold for every policy and profile on any input."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart

from pydantic_ai_context import validate_view
from pydantic_ai_context._compaction import boundary, window
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


def assert_boundary_kept(log: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> None:
    """Invariant 15: the active provider compaction part (the latest, unless its response ends the
    log, which a view leaves out) is in the view, in a response holding the rest of its response's
    parts after it."""
    found = boundary(log)
    if found is None:
        return
    at, index = found
    part = log[at].parts[index]
    rest = list(log[at].parts[index:])
    holding = [m for m in view if any(p is part or p == part for p in m.parts)]
    assert holding, "the provider's compaction part is not in the view"
    assert isinstance(holding[-1], ModelResponse)
    assert list(holding[-1].parts[-len(rest) :]) == rest, "the provider's compaction response was changed"


def _from_window(log: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> bool:
    """`view` was compiled from `window(log)`: it opens as the window does (the standing prompt, or
    the response holding the provider's part)."""
    sent = window(log)
    return sent is not log and bool(view) and view[0].parts == sent[0].parts


def assert_valid(view: Sequence[ModelMessage]) -> None:
    """Invariants 2 and 7."""
    validate_view(view)


def assert_all(
    log: Sequence[ModelMessage], snapshot: Sequence[ModelMessage], view: Sequence[ModelMessage]
) -> None:
    """Invariants 1, 2, 4, 7, 8 and 15 (`snapshot` is a deep copy of `log` taken before compiling).

    After a provider's compaction, 1 and 4 hold for what the provider is sent (`_compaction.window`).
    """
    assert list(log) == list(snapshot), 'the input was mutated'
    assert_valid(view)
    # A profile (or a policy called as a processor) compiles the window; a policy's bare `apply`
    # works on the whole log (the response holding the part is pinned there).
    sent = window(log) if _from_window(log, view) else log
    assert_framing_kept(sent, view)
    assert_pinned_kept(sent, view)
    assert_boundary_kept(log, view)
