"""Native (provider-side) tool parts: which may be edited, and how an edited one keeps its shape.

A native tool (code execution, web search, web fetch, MCP servers run by the provider...) records
its call and its result together in one `ModelResponse`, as `NativeToolCallPart` and
`NativeToolReturnPart` (`BuiltinToolCallPart` / `BuiltinToolReturnPart` on pydantic-ai 1.x; the same
`part_kind` on every version). The model adapters send the result back in the shape the provider
gave it, so a shortened result must keep that shape: its output text fields are replaced, every
other key stays. Some results must go back exactly as they came or not at all (Anthropic's web
search results carry `encrypted_content`): those are never edited, and an old one leaves the view
together with its call ("whole" below).

| kind (`tool_name`) | content | in a view |
|---|---|---|
| `code_execution` (Anthropic `code_execution_result`, `bash_code_execution_result`) | `stdout`, `stderr` | editable |
| `code_execution` (Anthropic `text_editor_code_execution_view_result`) | `content` | editable |
| `code_execution` (Google `{'outcome', 'output'}`) | `output` | editable |
| `code_execution` (OpenAI Responses `{'status', 'logs'}`) | `logs` | editable (not sent back: replayed by id) |
| `mcp_server:*` (`{'content': [text blocks], 'is_error'}`) | the text blocks | editable |
| any kind, text content | the text | editable |
| `web_search`, `web_fetch`, `advisor`, image generation, file search, others | | whole |
| tool search | | whole, and never removed (it declares the tools later calls use) |
| any result with an `encrypted…` key | | whole |
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeGuard

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart

from . import _parts

__all__ = (
    'CODE_EXECUTION_TOOLS',
    'NATIVE_CALL_KINDS',
    'NATIVE_RETURN_KINDS',
    'call_of',
    'editable_fields',
    'is_native_call',
    'is_native_return',
    'is_tool_search',
    'native_calls',
    'native_returns',
    'output_text',
    'result_text',
    'with_output',
    'without_pairs',
)

NATIVE_CALL_KINDS: Final = frozenset({'builtin-tool-call', 'builtin-tool-search-call'})
NATIVE_RETURN_KINDS: Final = frozenset({'builtin-tool-return', 'builtin-tool-search-return'})

CODE_EXECUTION_TOOLS: Final = frozenset(
    {'code_execution', 'code_execution_tool_result', 'bash_code_execution', 'text_editor_code_execution'}
)
"""Tool names pydantic-ai gives code-execution results (the last three are older or Anthropic-specific)."""

_OUTPUT_TYPES: Final = frozenset({'code_execution_result', 'bash_code_execution_result'})
_VIEW_TYPES: Final = frozenset({'text_editor_code_execution_view_result'})
_MCP_PREFIX: Final = 'mcp_server'
_TEXT: Final = ''
"""The field name standing for a result whose whole content is text."""
_STDERR_LINE: Final = '\n[stderr]\n'


def is_native_call(part: Any) -> TypeGuard[Any]:
    """A call the provider executed itself (its result is in the same response)."""
    return getattr(part, 'part_kind', None) in NATIVE_CALL_KINDS


def is_native_return(part: Any) -> TypeGuard[Any]:
    """The result of a native tool call, recorded in the response that made the call."""
    return getattr(part, 'part_kind', None) in NATIVE_RETURN_KINDS


def is_tool_search(part: Any) -> bool:
    """A native tool search (its results declare deferred tools that later calls may use)."""
    return getattr(part, 'tool_kind', None) == 'tool-search' or str(
        getattr(part, 'tool_name', '')
    ).startswith('tool_search')


def native_returns(message: ModelMessage) -> list[Any]:
    """The native tool results a response carries (none in a request)."""
    if isinstance(message, ModelResponse):
        return [p for p in message.parts if is_native_return(p)]
    return []


def native_calls(message: ModelMessage) -> list[Any]:
    """The native tool calls a response carries (none in a request)."""
    if isinstance(message, ModelResponse):
        return [p for p in message.parts if is_native_call(p)]
    return []


def editable_fields(part: Any) -> tuple[str, ...] | None:
    """The keys of `part.content` that hold its output text, when this kind of result may be
    edited (the first is where a shortened text goes); `('',)` for text content; `None` when the
    result must go back to its provider exactly as it is."""
    if not is_native_return(part):
        return None
    content = part.content
    if isinstance(content, str):
        return (_TEXT,)
    if not isinstance(content, dict) or any('encrypted' in str(key) for key in content):
        return None
    name = str(getattr(part, 'tool_name', '') or '')
    if name in CODE_EXECUTION_TOOLS:
        kind = content.get('type')
        if kind in _OUTPUT_TYPES:
            fields = tuple(k for k in ('stdout', 'stderr') if isinstance(content.get(k), str))
            return fields if fields and fields[0] == 'stdout' else None
        if kind in _VIEW_TYPES and isinstance(content.get('content'), str):
            return ('content',)
        if kind is None and isinstance(content.get('output'), str):
            return ('output',)
        logs = content.get('logs')
        if kind is None and isinstance(logs, list) and all(isinstance(x, str) for x in logs):
            return ('logs',)
        return None
    if name.startswith(_MCP_PREFIX) and _mcp_texts(content) is not None:
        return ('content',)
    return None


def _mcp_texts(content: dict[str, Any]) -> list[str] | None:
    blocks = content.get('content')
    if not isinstance(blocks, list) or not blocks:
        return None
    texts: list[str] = []
    for block in blocks:
        if not (
            isinstance(block, dict) and block.get('type') == 'text' and isinstance(block.get('text'), str)
        ):
            return None
        texts.append(block['text'])
    return texts


def output_text(part: Any) -> str:
    """What a native result says, as readable text: its output fields joined (stderr after
    stdout), else its content as indented JSON."""
    fields = editable_fields(part)
    content: Any = getattr(part, 'content', None)
    if fields is None:
        if isinstance(content, dict | list):
            # One field a line: read back a page at a time (search results are long).
            try:
                return json.dumps(content, ensure_ascii=False, indent=1, default=repr)
            except (TypeError, ValueError, RecursionError):
                pass
        return _parts.tool_content_text(content)
    if fields == (_TEXT,):
        return str(content)
    if fields == ('logs',):
        return '\n'.join(content['logs'])
    if fields == ('content',) and not isinstance(content['content'], str):
        return '\n'.join(_mcp_texts(content) or [])
    texts: list[str] = [content[k] for k in fields]
    if len(texts) == 2 and texts[1]:
        return texts[0] + _STDERR_LINE + texts[1]
    return texts[0]


def result_text(part: Any) -> str:
    """The readable text of any tool result: a native one's `output_text`, else its content's text."""
    if is_native_return(part):
        return output_text(part)
    return _parts.tool_content_text(getattr(part, 'content', None))


def with_output(part: Any, text: str, metadata: Any) -> Any:
    """`part` whose output fields say `text` instead (the other fields emptied, every other key
    kept, so the provider still accepts it), with `metadata`. The part must be editable."""
    fields = editable_fields(part)
    assert fields is not None, 'with_output needs an editable native result'
    content: Any = part.content
    if fields == (_TEXT,):
        new: Any = text
    elif fields == ('logs',):
        new = {**content, 'logs': [text]}
    elif fields == ('content',) and not isinstance(content.get('content'), str):
        new = {**content, 'content': [{'type': 'text', 'text': text}]}
    else:
        new = {**content, fields[0]: text, **dict.fromkeys(fields[1:], '')}
    return dataclasses.replace(part, content=new, metadata=metadata)


def call_of(part: Any, parts: Sequence[Any]) -> Any:
    """The native call in `parts` that `part` (a native result) answers, if any."""
    return next(
        (p for p in parts if is_native_call(p) and p.tool_call_id == part.tool_call_id),
        None,
    )


REMOVED_NOTE: Final = 'ran on the provider; its result was removed by pydantic-ai-context]'
"""How the line standing for a removed native pair ends (before its read-back line)."""


def is_removal_note(part: Any) -> bool:
    """A text part `without_pairs` put in place of a removed native pair."""
    return getattr(part, 'part_kind', None) == 'text' and REMOVED_NOTE in part.content


def without_pairs(response: ModelResponse, ids: frozenset[str], note: Callable[[Any, Any], str]) -> list[Any]:
    """`response`'s parts with the native calls and results named by `ids` removed together, each
    pair replaced by one text part saying what it was (`note(call, result)`)."""
    parts: list[Any] = []
    for part in response.parts:
        if (is_native_call(part) or is_native_return(part)) and part.tool_call_id in ids:
            if is_native_return(part):
                parts.append(TextPart(note(call_of(part, response.parts), part)))
            elif not any(is_native_return(p) and p.tool_call_id == part.tool_call_id for p in response.parts):
                parts.append(TextPart(note(part, None)))
            continue
        parts.append(part)
    return parts
