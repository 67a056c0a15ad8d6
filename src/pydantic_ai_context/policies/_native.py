"""Removing native tool calls and results together, for the kinds that must not be edited.

A native result that must go back to its provider exactly as it came (see `_native_tools`) can
only leave the view whole, with its call: `trim_tool_outputs` removes an old one over its size
limit, `mask_observations` any old one. One line takes the pair's place, naming the call and the
ref that reads the result back; the response's marker keeps the pair's tokens (so the frontier,
which weighs what the log held, does not move).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Set as AbstractSet
from typing import Any, Final

from pydantic_ai.messages import ModelResponse

from pydantic_ai_context import _facts, _markers, _native_tools, _parts
from pydantic_ai_context.views import CompileContext

from ._frontier import nominal_part_tokens

__all__ = ('REMOVED_KEY', 'removable', 'without_native_pairs')

REMOVED_KEY: Final = 'native_tokens'
"""The key of a response's marker record holding the tokens of each pair removed, by `tool_call_id`."""


def removable(part: Any, exclude: AbstractSet[str] = frozenset()) -> bool:
    """A native result that may leave the view only whole: not editable, not pinned, not failed."""
    return (
        _native_tools.is_native_return(part)
        and _native_tools.editable_fields(part) is None
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
    line = f'[{summary} ran on the provider; its result was removed by pydantic-ai-context]'
    return _markers.with_ref(line, part.tool_call_id) if result is not None else line
