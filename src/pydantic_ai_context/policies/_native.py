"""Removing native tool calls and results together, for the kinds that must not be edited.

A native result that must go back to its provider exactly as it came (see `_native_tools`) can
only leave the view whole, with its call: `trim_tool_outputs` removes an old one over its size
limit, `mask_observations` any old one. One line takes the pair's place, naming the call and the
ref that reads the result back; the response's marker keeps the pair's tokens (so the frontier,
which weighs what the log held, does not move).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any, Final

from pydantic_ai.messages import ModelResponse

from pydantic_ai_context import _facts, _markers, _native_tools, _parts
from pydantic_ai_context.views import CompileContext

from ._frontier import nominal_part_tokens, part_text_tokens

__all__ = ('REMOVED_KEY', 'removable', 'shortened_native', 'without_native_pairs')

HeadTail = Callable[[Any, str, int, int, int, int], str]
"""`TrimToolOutputs._head_tail`: (part, text, tokens, keep, nominal tokens, lines) -> shortened text."""

REMOVED_KEY: Final = 'native_tokens'
"""The key of a response's marker record holding the tokens of each pair removed, by `tool_call_id`."""


def removable(part: Any, exclude: AbstractSet[str] = frozenset()) -> bool:
    """A native result that may leave the view only whole: not editable, not pinned, not failed, and
    not a tool search (small, and what it found declares the tools later calls use: it stays)."""
    return (
        _native_tools.is_native_return(part)
        and _native_tools.editable_fields(part) is None
        and not _native_tools.is_tool_search(part)
        and not _parts.is_pinned(part)
        and not _parts.is_failed_result(part)
        and part.tool_name not in exclude
    )


def without_native_pairs(
    message: ModelResponse, ids: AbstractSet[str], context: CompileContext
) -> ModelResponse:
    """`message` without the native calls and results named by `ids`, each pair replaced by a line."""
    if not ids:
        return message
    counter = context.counter
    tokens: dict[str, int] = {}
    for part in message.parts:
        if (
            _native_tools.is_native_call(part) or _native_tools.is_native_return(part)
        ) and part.tool_call_id in ids:
            tokens[part.tool_call_id] = tokens.get(part.tool_call_id, 0) + nominal_part_tokens(part, counter)
            if _native_tools.is_native_return(part) and context.originals is not None:
                context.originals.keep_result(part.tool_call_id, part)
    parts = _native_tools.without_pairs(message, frozenset(ids), _note)
    record = dict(_parts.marker(message) or {})
    previous = record.get(REMOVED_KEY)
    record.update(
        kind=record.get('kind', 'native_removed'),
        **{REMOVED_KEY: {**(previous if isinstance(previous, dict) else {}), **tokens}},
    )
    return dataclasses.replace(message, parts=parts, metadata=_parts.with_marker(message.metadata, record))


def _note(call: Any, result: Any) -> str:
    """The line standing for a native call and its result removed together."""
    part = result if result is not None else call
    summary = _facts.call_summary(call, tool_name=part.tool_name)
    line = f'[{summary} {_native_tools.REMOVED_NOTE}'
    return _markers.with_ref(line, part.tool_call_id) if result is not None else line


def shortened_native(
    message: ModelResponse,
    *,
    old: bool,
    limit: int,
    keep: int,
    reclamp: bool,
    context: CompileContext,
    head_tail: HeadTail,
    policy: str,
) -> ModelResponse:
    """`message` with its editable native results over `limit` cut to about `keep` tokens, head and
    tail, in the shape their provider gave them (`'trimmed'` when `old`, else `'clamped'`); an old
    one that must go back whole leaves with its call instead."""
    counter = context.counter
    parts: list[Any] = list(message.parts)
    changed = False
    removed: set[str] = set()
    for j, part in enumerate(parts):
        if old and removable(part) and part_text_tokens(part, counter) > limit:
            removed.add(part.tool_call_id)
            continue
        if (
            not _native_tools.is_native_return(part)
            or _native_tools.editable_fields(part) is None
            or _parts.is_pinned(part)
        ):
            continue
        record = _parts.marker(part) or {}
        kind = record.get('kind')
        if kind not in (None, 'clamped') or (kind == 'clamped' and not old and not reclamp):
            continue
        if part_text_tokens(part, counter) <= limit:
            continue
        text = _native_tools.output_text(part)
        tokens = counter.count_text(text)
        nominal = nominal_part_tokens(part, counter)
        lines = record.get('lines', text.count('\n') + 1)
        chars = record.get('chars', len(text))
        new_text = head_tail(part, text, tokens, keep, nominal, lines)
        new_record = {'kind': 'trimmed' if old else 'clamped', 'policy': policy, 'tokens': nominal}
        new_record |= {'lines': lines, 'chars': chars}
        parts[j] = _markers.mark_result(part, new_text, new_record, context.originals, ref_in_text=True)
        changed = True
    out = dataclasses.replace(message, parts=parts) if changed else message
    return without_native_pairs(out, removed, context)
