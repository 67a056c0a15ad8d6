"""OpenAI chat-format message dicts ⇄ pydantic-ai messages, in both directions.

Frameworks outside pydantic-ai pass conversations as lists of OpenAI chat-completions dicts:
`{'role': 'system' | 'developer' | 'user' | 'assistant' | 'tool', 'content': ..., 'tool_calls': [...],
'tool_call_id': ...}`. `from_openai` turns such a list into a pydantic-ai history and `to_openai`
turns a history back into dicts, so a `ContextSession` can sit behind those frameworks.

The mapping:

| OpenAI | pydantic-ai |
|---|---|
| consecutive `system` / `developer` / `user` / `tool` messages | one `ModelRequest`, one part each, in order |
| `system`, `developer` | `SystemPromptPart` (the request's metadata remembers which were `developer`) |
| `user` (str or `text` / `image_url` / `input_audio` / `file` parts) | `UserPromptPart` |
| `assistant` | one `ModelResponse`: a `TextPart` per text (or refusal), a `ToolCallPart` per tool call |
| `assistant` with the legacy `function_call` | a `ToolCallPart` with the id `function_call_<index>` |
| `tool` | `ToolReturnPart` (the tool name is looked up from the call with the same `tool_call_id`) |
| legacy `function` (a result by `name`) | `ToolReturnPart` answering the oldest unanswered legacy call of that name |

Going back, each request part becomes one message (legacy function calls and results come back
as `tool_calls` and `tool` messages, with their ids); `RetryPromptPart`s become `tool` messages
(or `user` messages when they answer no call, like 2.x `RetryFeedbackPart`s) carrying the
retry text; a tool return whose content
is not a str is sent as JSON. Parts the chat format cannot carry are left out: thinking, built-in
tool calls and returns, files in responses, and framework parts this module does not know (the
conversion is lossy in that direction only for what a chat-completions request could not hold
anyway). User content the format cannot express (e.g. a `DocumentUrl`) raises `HistoryIntegrityError`
(a `ValueError`) naming the message, as does any malformed dict (an unknown role, a data URI whose
base64 does not decode): nothing is dropped silently.

Conversion is deterministic: parts get a fixed timestamp (`CONVERTED_AT`, or the one you pass),
so converting the same dicts twice gives equal messages, and cached summaries keyed by message
content keep matching when a framework sends its whole history again.
"""

from __future__ import annotations

import base64
import binascii
import collections
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal
from urllib.parse import unquote_to_bytes

from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .errors import HistoryIntegrityError

__all__ = ('CONVERTED_AT', 'OPENAI_ROLES', 'from_openai', 'to_openai')

OPENAI_ROLES: Final = frozenset({'system', 'developer', 'user', 'assistant', 'tool', 'function'})
"""The roles `from_openai` accepts (`function`: results of the legacy `function_call`)."""

LEGACY_CALL_ID: Final = 'function_call_{index}'
"""The `tool_call_id` `from_openai` gives the legacy `function_call` of the assistant message at `index`."""

CONVERTED_AT: Final = datetime(1970, 1, 1, tzinfo=UTC)
"""The timestamp `from_openai` gives parts when none is passed: fixed, so conversion is deterministic."""

METADATA_KEY: Final = 'openai'
"""Key in `ModelRequest.metadata` under which `from_openai` records which system parts were `developer`."""

_AUDIO_FORMATS: Final = {'mp3': 'audio/mpeg', 'wav': 'audio/wav'}
_AUDIO_MEDIA_TYPES: Final = {
    'audio/mpeg': 'mp3',
    'audio/mp3': 'mp3',
    'audio/wav': 'wav',
    'audio/x-wav': 'wav',
}


# --- OpenAI -> pydantic-ai -----------------------------------------------------------------------


def from_openai(
    messages: Sequence[Mapping[str, Any]],
    *,
    timestamp: datetime | None = None,
    tool_names: Mapping[str, str] | None = None,
) -> list[ModelMessage]:
    """Convert OpenAI chat-format message dicts to a pydantic-ai message history.

    Consecutive non-assistant messages (system, developer, user, tool, function) become one
    `ModelRequest`; each assistant message becomes one `ModelResponse`, its legacy `function_call`
    a tool call with the id `function_call_<index>` that the next `function` message of that name
    answers. A dict without `role`, with an unknown role, or with a malformed field (a data URI
    whose base64 does not decode, too) raises `HistoryIntegrityError` (a `ValueError`) naming its index.

    A tool message gets its tool name from the assistant message that made the call; pass
    `tool_names` (tool name by `tool_call_id`) for calls made before `messages`, e.g. when
    tool results arrive one at a time. `timestamp` is given to every part (default `CONVERTED_AT`).

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolReturnPart

        from pydantic_ai_context.openai_format import from_openai, to_openai

        chat = [
            {'role': 'system', 'content': 'You are terse.'},
            {'role': 'user', 'content': 'Weather in Paris?'},
            {'role': 'assistant', 'content': None, 'tool_calls': [
                {'id': 'call_1', 'type': 'function', 'function': {'name': 'weather', 'arguments': '{"city": "Paris"}'}},
            ]},
            {'role': 'tool', 'tool_call_id': 'call_1', 'content': 'sunny'},
            {'role': 'assistant', 'content': 'Sunny.'},
        ]
        history = from_openai(chat)
        assert [type(m) for m in history] == [ModelRequest, ModelResponse, ModelRequest, ModelResponse]
        tool_return = history[2].parts[0]
        assert isinstance(tool_return, ToolReturnPart) and tool_return.tool_name == 'weather'
        assert to_openai(history) == chat
        ```
    """
    stamp = timestamp or CONVERTED_AT
    out: list[ModelMessage] = []
    request_parts: list[Any] = []
    developer: list[int] = []
    call_names: dict[str, str] = dict(tool_names or {})
    legacy_calls: dict[str, collections.deque[str]] = collections.defaultdict(collections.deque)

    def flush() -> None:
        if request_parts:
            metadata = {METADATA_KEY: {'developer': list(developer)}} if developer else None
            out.append(ModelRequest(parts=list(request_parts), timestamp=stamp, metadata=metadata))
            request_parts.clear()
            developer.clear()

    for index, item in enumerate(messages):
        if not isinstance(item, Mapping):
            raise HistoryIntegrityError(index, f'expected a dict with a role, got {type(item).__name__}')
        if 'role' not in item:
            raise HistoryIntegrityError(index, f'missing "role" (one of {_roles()})')
        role = item['role']
        if not isinstance(role, str) or role not in OPENAI_ROLES:
            raise HistoryIntegrityError(index, f'unknown role {role!r}; expected one of {_roles()}')
        if role == 'assistant':
            flush()
            out.append(_response(index, item, stamp, call_names, legacy_calls))
        elif role == 'function':
            request_parts.append(_function_return(index, item, stamp, legacy_calls))
        elif role in ('system', 'developer'):
            if role == 'developer':
                developer.append(len(request_parts))
            text = _text_content(index, item.get('content'), role)
            request_parts.append(SystemPromptPart(content=text, timestamp=stamp))
        elif role == 'user':
            request_parts.append(
                UserPromptPart(content=_user_content(index, item.get('content')), timestamp=stamp)
            )
        else:
            request_parts.append(_tool_return(index, item, stamp, call_names))
    flush()
    return out


def _roles() -> str:
    return ', '.join(sorted(OPENAI_ROLES))


def _text_content(index: int, content: Any, role: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for n, item in enumerate(content):
            if isinstance(item, Mapping) and item.get('type') == 'text' and isinstance(item.get('text'), str):
                texts.append(item['text'])
            else:
                raise HistoryIntegrityError(
                    index, f'{role} content part {n} must be a text part, got {item!r}'
                )
        return '\n\n'.join(texts)
    raise HistoryIntegrityError(
        index, f'{role} content must be a str or a list of text parts, got {content!r}'
    )


def _user_content(index: int, content: Any) -> str | list[Any]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise HistoryIntegrityError(index, f'user content must be a str or a list of parts, got {content!r}')
    items: list[Any] = []
    for n, part in enumerate(content):
        kind = part.get('type') if isinstance(part, Mapping) else None
        try:
            if kind == 'text':
                items.append(_required_str(part, 'text'))
            elif kind == 'image_url':
                url = _required_str(part.get('image_url') or {}, 'url')
                items.append(_from_data_uri(url) if url.startswith('data:') else ImageUrl(url=url))
            elif kind == 'input_audio':
                audio = part.get('input_audio') or {}
                fmt = _required_str(audio, 'format')
                media_type = _AUDIO_FORMATS.get(fmt, f'audio/{fmt}')
                items.append(BinaryContent(data=_base64(_required_str(audio, 'data')), media_type=media_type))
            elif kind == 'file':
                file = part.get('file') or {}
                if 'file_data' not in file:
                    raise ValueError(
                        'only inline files ("file_data") can be converted, not uploaded file ids'
                    )
                items.append(_from_data_uri(_required_str(file, 'file_data')))
            else:
                raise ValueError(f'unknown content part type {kind!r}')
        except (ValueError, TypeError, KeyError) as e:
            raise HistoryIntegrityError(index, f'user content part {n}: {e}') from e
    return items


_WHITESPACE: Final = re.compile(rb'\s+')


def _base64(data: str | bytes) -> bytes:
    """Strictly decoded base64 (whitespace allowed): a payload that does not decode is an error, never b''."""
    raw = data.encode('ascii', 'replace') if isinstance(data, str) else data
    try:
        decoded = base64.b64decode(_WHITESPACE.sub(b'', raw), validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f'the base64 data does not decode ({e})') from e
    if not decoded:
        raise ValueError('the base64 data is empty')
    return decoded


def _from_data_uri(uri: str) -> BinaryContent:
    """`BinaryContent.from_data_uri`, except that data which is not valid base64 raises."""
    if not uri.startswith('data:') or ';base64,' not in uri:
        raise ValueError('a data URI must look like "data:<media type>;base64,<data>"')
    media_type, data = uri[len('data:') :].split(';base64,', 1)
    return BinaryContent.narrow_type(
        BinaryContent(data=_base64(unquote_to_bytes(data)), media_type=media_type)
    )


def _required_str(mapping: Any, key: str) -> str:
    value = mapping.get(key) if isinstance(mapping, Mapping) else None
    if not isinstance(value, str):
        raise ValueError(f'"{key}" must be a str, got {value!r}')
    return value


def _response(
    index: int,
    item: Mapping[str, Any],
    stamp: datetime,
    call_names: dict[str, str],
    legacy_calls: dict[str, collections.deque[str]],
) -> ModelResponse:
    parts: list[Any] = []
    content = item.get('content')
    if isinstance(content, str):
        parts.append(TextPart(content=content))
    elif isinstance(content, list):
        for n, piece in enumerate(content):
            kind = piece.get('type') if isinstance(piece, Mapping) else None
            if kind in ('text', 'refusal') and isinstance(piece.get(kind), str):
                parts.append(TextPart(content=piece[kind]))
            else:
                raise HistoryIntegrityError(
                    index, f'assistant content part {n} must be a text part, got {piece!r}'
                )
    elif content is not None:
        raise HistoryIntegrityError(
            index, f'assistant content must be a str, a list or None, got {content!r}'
        )
    refusal = item.get('refusal')
    if isinstance(refusal, str) and refusal:
        parts.append(TextPart(content=refusal))
    tool_calls = item.get('tool_calls') or []
    if not isinstance(tool_calls, list):
        raise HistoryIntegrityError(index, f'"tool_calls" must be a list, got {tool_calls!r}')
    for n, call in enumerate(tool_calls):
        where = f'tool call {n}'
        if not isinstance(call, Mapping) or call.get('type', 'function') != 'function':
            raise HistoryIntegrityError(
                index,
                f'{where}: only function calls ({{"type": "function", ...}}) are supported, got {call!r}',
            )
        function = call.get('function')
        call_id = call.get('id')
        if not isinstance(call_id, str) or not isinstance(function, Mapping):
            raise HistoryIntegrityError(
                index, f'{where}: needs an "id" str and a "function" dict, got {call!r}'
            )
        name, arguments = _function(index, where, function)
        call_names[call_id] = name
        parts.append(ToolCallPart(tool_name=name, args=arguments, tool_call_id=call_id))
    legacy = item.get('function_call')
    if legacy is not None:
        # The deprecated single call (before `tool_calls`): it has no id, so it gets one from its position.
        if not isinstance(legacy, Mapping):
            raise HistoryIntegrityError(index, f'"function_call" must be a dict, got {legacy!r}')
        name, arguments = _function(index, 'function_call', legacy)
        call_id = LEGACY_CALL_ID.format(index=index)
        call_names[call_id] = name
        legacy_calls[name].append(call_id)
        parts.append(ToolCallPart(tool_name=name, args=arguments, tool_call_id=call_id))
    return ModelResponse(parts=parts, timestamp=stamp)


def _function(index: int, where: str, function: Mapping[str, Any]) -> tuple[str, str | dict[str, Any]]:
    name = function.get('name')
    arguments = function.get('arguments', '{}')
    if not isinstance(name, str) or not isinstance(arguments, str | dict):
        raise HistoryIntegrityError(
            index, f'{where}: function needs a "name" str and "arguments" (a JSON str), got {function!r}'
        )
    return name, arguments


def _function_return(
    index: int, item: Mapping[str, Any], stamp: datetime, legacy_calls: dict[str, collections.deque[str]]
) -> ToolReturnPart:
    name = item.get('name')
    if not isinstance(name, str):
        raise HistoryIntegrityError(index, f'a function message needs a "name" str, got {name!r}')
    pending = legacy_calls.get(name)
    if not pending:
        raise HistoryIntegrityError(
            index, f'function message {name!r} answers no earlier assistant "function_call" of that name'
        )
    content = _text_content(index, item.get('content'), 'function')
    return ToolReturnPart(tool_name=name, content=content, tool_call_id=pending.popleft(), timestamp=stamp)


def _tool_return(
    index: int, item: Mapping[str, Any], stamp: datetime, call_names: dict[str, str]
) -> ToolReturnPart:
    call_id = item.get('tool_call_id')
    if not isinstance(call_id, str):
        raise HistoryIntegrityError(index, f'a tool message needs a "tool_call_id" str, got {call_id!r}')
    name = item.get('name') if isinstance(item.get('name'), str) else call_names.get(call_id)
    if name is None:
        raise HistoryIntegrityError(
            index,
            f'tool message answers tool_call_id {call_id!r}, which no earlier assistant message '
            'called (and the message has no "name")',
        )
    content = _text_content(index, item.get('content'), 'tool')
    return ToolReturnPart(tool_name=name, content=content, tool_call_id=call_id, timestamp=stamp)


# --- pydantic-ai -> OpenAI -----------------------------------------------------------------------


def to_openai(
    messages: Sequence[ModelMessage], *, system_role: Literal['system', 'developer'] = 'system'
) -> list[dict[str, Any]]:
    """Convert a pydantic-ai message history to OpenAI chat-format message dicts.

    System prompt parts become `system_role` messages, except those `from_openai` read from
    `developer` messages, which stay `developer`. See the module docstring for what is left out.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context.openai_format import to_openai

        history = [ModelRequest(parts=[UserPromptPart('hi')]), ModelResponse(parts=[TextPart('hello!')])]
        assert to_openai(history) == [
            {'role': 'user', 'content': 'hi'},
            {'role': 'assistant', 'content': 'hello!'},
        ]
        ```
    """
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if isinstance(message, ModelRequest):
            out.extend(_request_dicts(index, message, system_role))
        elif isinstance(message, ModelResponse):
            out.append(_response_dict(message))
        else:
            raise HistoryIntegrityError(
                index, f'expected a ModelRequest or ModelResponse, got {type(message).__name__}'
            )
    return out


def _request_dicts(index: int, message: ModelRequest, system_role: str) -> list[dict[str, Any]]:
    record = (message.metadata or {}).get(METADATA_KEY)
    developer = set(record.get('developer', ())) if isinstance(record, dict) else set()
    out: list[dict[str, Any]] = []
    for n, part in enumerate(message.parts):
        if isinstance(part, SystemPromptPart):
            out.append({'role': 'developer' if n in developer else system_role, 'content': part.content})
        elif isinstance(part, UserPromptPart):
            out.append({'role': 'user', 'content': _user_content_dicts(index, n, part.content)})
        elif isinstance(part, ToolReturnPart):
            out.append(
                {'role': 'tool', 'tool_call_id': part.tool_call_id, 'content': part.model_response_str()}
            )
        elif isinstance(part, RetryPromptPart):
            if part.tool_name is not None:
                out.append(
                    {'role': 'tool', 'tool_call_id': part.tool_call_id, 'content': part.model_response()}
                )
            else:
                out.append({'role': 'user', 'content': part.model_response()})
        elif getattr(part, 'part_kind', None) == 'retry-feedback':
            # pydantic-ai 2.x feedback on an unusable response: the model must read it, as the user.
            feedback: Any = part
            out.append({'role': 'user', 'content': feedback.model_response()})
        # Anything else (2.x deltas and feedback parts, future parts) has no chat-format equivalent.
    return out


def _user_content_dicts(index: int, n: int, content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    out: list[dict[str, Any]] = []
    for item in content:
        if isinstance(item, str):
            out.append({'type': 'text', 'text': item})
        elif isinstance(item, ImageUrl):
            out.append({'type': 'image_url', 'image_url': {'url': item.url}})
        elif isinstance(item, BinaryContent) and item.is_image:
            out.append({'type': 'image_url', 'image_url': {'url': item.data_uri}})
        elif isinstance(item, BinaryContent) and item.media_type in _AUDIO_MEDIA_TYPES:
            audio = {
                'data': base64.b64encode(item.data).decode(),
                'format': _AUDIO_MEDIA_TYPES[item.media_type],
            }
            out.append({'type': 'input_audio', 'input_audio': audio})
        elif isinstance(item, BinaryContent) and item.is_document:
            out.append({'type': 'file', 'file': {'file_data': item.data_uri}})
        elif getattr(item, 'kind', None) == 'cache-point':
            continue  # a provider caching hint, not content
        else:
            raise HistoryIntegrityError(
                index,
                f'user prompt part {n} holds {type(item).__name__}, which the OpenAI chat format cannot carry',
            )
    return out


def _response_dict(message: ModelResponse) -> dict[str, Any]:
    texts = [p.content for p in message.parts if isinstance(p, TextPart)]
    calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
    content: str | list[dict[str, Any]] | None
    if not texts:
        content = None
    elif len(texts) == 1:
        content = texts[0]
    else:
        content = [{'type': 'text', 'text': t} for t in texts]
    out: dict[str, Any] = {'role': 'assistant', 'content': content}
    if calls:
        out['tool_calls'] = [
            {
                'id': call.tool_call_id,
                'type': 'function',
                # A str is sent as received: re-serialising would change what the model wrote.
                'function': {
                    'name': call.tool_name,
                    'arguments': call.args if isinstance(call.args, str) else call.args_as_json_str(),
                },
            }
            for call in calls
        ]
    return out
