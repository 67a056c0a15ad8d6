"""Unique, readable tool call ids: the renaming every view gets (and `read_context` repeats)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelResponse

from .. import _parts
from ._pairing import Repair


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
