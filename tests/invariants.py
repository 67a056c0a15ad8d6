"""Checks of DESIGN.md section 2 that hold for every policy and profile on any input."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart

from pydantic_ai_context import normalize, run_spans, validate_view
from pydantic_ai_context._boundaries import is_tool_content, prompt_parts
from pydantic_ai_context._compaction import boundary, holds_provider_part, window
from pydantic_ai_context._parts import is_pinned, marker
from pydantic_ai_context.views import current_prompt


def parts_of(messages: Sequence[ModelMessage]) -> list[object]:
    return [p for m in messages for p in m.parts]


def assert_framing_kept(log: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> None:
    """Invariant 1: system prompt parts and the first user prompt survive verbatim."""
    view_parts = parts_of(view)
    for part in parts_of(log):
        if isinstance(part, SystemPromptPart):
            assert part in view_parts, f'system prompt lost: {part.content[:60]!r}'
    # As the policies read it (normalized: dropping an orphan result can make a tool's content the
    # first prompt). Content a tool returned beside results the model reads is no prompt: a view
    # masks it with them.
    messages = normalize(log)
    first_user = next(
        (p for m in messages for p in m.parts if isinstance(p, UserPromptPart) and not is_tool_content(p, m)),
        None,
    )
    before = next((i for i, m in enumerate(messages) if first_user in m.parts), len(messages))
    if any(holds_provider_part(m) for m in messages[:before]):
        # What is sent opens with a provider's compaction: the task framing went into the provider's
        # summary, and the response holding its part is kept (`assert_boundary_kept`).
        return
    if first_user is not None and any(isinstance(m, ModelRequest) for m in log):
        assert first_user in view_parts, 'first user prompt lost'


def current_prompt_parts(log: Sequence[ModelMessage]) -> list[UserPromptPart]:
    """The current run's prompt (the task at hand) of the log as the policies read it (normalized):
    the prompt parts of the newest run that has a prompt."""
    messages = normalize(log)
    at = current_prompt(messages)
    if at is None:
        return []
    starts = {span.start for span in run_spans(messages)}
    return prompt_parts(messages[at], run_start=at in starts)


def assert_current_prompt_kept(log: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> None:
    """Invariant 1: the current run's prompt survives verbatim, or clamped with a read-back ref."""
    view_parts = parts_of(view)
    clamped = [m for m in view if (marker(m) or {}).get('kind') == 'prompt_clamped']
    for part in current_prompt_parts(log):
        if part in view_parts:
            continue
        assert clamped, f'current prompt lost: {str(part.content)[:60]!r}'
        assert all((marker(m) or {}).get('ref') for m in clamped), 'a clamped prompt names no ref'


def assert_pinned_kept(log: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> None:
    """Invariant 4: pinned messages and parts survive verbatim."""
    view_parts = parts_of(view)
    for message in log:
        if is_pinned(message) and isinstance(message, ModelRequest):
            for part in message.parts:
                # A result is kept with its call (invariant 2), its id repaired where a marker
                # could not name it; the rest of a pinned request survives verbatim.
                if not hasattr(part, 'tool_call_id'):
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
    """Invariants 1 (the first and the current prompt), 2 (native tool calls and results included),
    4, 7, 8 and 15 (`snapshot` is a deep copy of `log` taken before compiling).

    After a provider's compaction, 1 and 4 hold for what the provider is sent (`_compaction.window`).
    """
    assert list(log) == list(snapshot), 'the input was mutated'
    assert_valid(view)
    # A profile (or a policy called as a processor) compiles the window; a policy's bare `apply`
    # works on the whole log (the response holding the part is pinned there).
    sent = window(log) if _from_window(log, view) else log
    assert_framing_kept(sent, view)
    assert_current_prompt_kept(sent, view)
    assert_pinned_kept(sent, view)
    assert_native_pairs(log, view)
    assert_boundary_kept(log, view)


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
