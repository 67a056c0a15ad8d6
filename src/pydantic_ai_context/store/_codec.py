"""How every store writes messages and ids: pydantic-ai JSON, checked on the way in and out."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import pydantic
import pydantic_core
from pydantic_ai import __version__ as pydantic_ai_version
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from ..errors import StoreError

# Same config as `ModelMessagesTypeAdapter`, so one stored row is byte for byte an item of the list
# pydantic-ai itself would dump: logs stay readable by plain `ModelMessagesTypeAdapter` code.
MESSAGE_ADAPTER: Final[pydantic.TypeAdapter[ModelMessage]] = pydantic.TypeAdapter(
    ModelMessage,
    config=pydantic.ConfigDict(defer_build=True, ser_json_bytes='base64', val_json_bytes='base64'),
)


def check_id(value: object, what: str) -> str:
    """`value` if it can be a key in every store: a non-empty str that encodes as UTF-8."""
    if not isinstance(value, str) or not value:
        raise StoreError(f'{what} must be a non-empty str, got {value!r}')
    if '\x00' in value:
        raise StoreError(f'{what} {value!r} holds a NUL character, which PostgreSQL cannot store in text')
    try:
        value.encode('utf-8')
    except UnicodeEncodeError as e:
        # A lone surrogate (from a bad decode upstream) cannot be stored in SQLite or PostgreSQL.
        raise StoreError(
            f'{what} {value!r} is not valid Unicode text: it holds a lone surrogate at position {e.start}, '
            'and ids are stored as UTF-8'
        ) from None
    return value


def dump_message(message: ModelMessage) -> bytes:
    """One message as pydantic-ai JSON; pydantic's serialization errors pass through."""
    return MESSAGE_ADAPTER.dump_json(message)


def load_message(raw: bytes) -> ModelMessage:
    """A message back from `dump_message`'s bytes; raises `pydantic.ValidationError` or `ValueError`."""
    try:
        return MESSAGE_ADAPTER.validate_json(raw)
    except pydantic.ValidationError as e:
        if not _json_too_deep(e):
            raise
    # pydantic-core's JSON parser stops at 200 levels of nesting while its serializer writes up to
    # about 255, so a message with deeply nested tool arguments is stored fine but would not load.
    # Python's parser goes deeper; python-mode validation reads base64 bytes differently, so the
    # result counts only if it dumps back to exactly the stored bytes.
    message = MESSAGE_ADAPTER.validate_python(json.loads(raw))
    if MESSAGE_ADAPTER.dump_json(message) != raw:
        raise ValueError('a deeply nested message did not read back exactly as it was written')
    return message


def _json_too_deep(error: pydantic.ValidationError) -> bool:
    return any(
        e['type'] == 'json_invalid' and 'recursion limit' in str(e.get('msg', '')) for e in error.errors()
    )


def describe_invalid(error: Exception) -> str:
    """A short account of why a stored row did not load, for an error message."""
    if isinstance(error, pydantic.ValidationError):
        first = error.errors()[0]
        loc = '.'.join(str(part) for part in first['loc']) or '<root>'
        return f'{error.error_count()} error(s), first at {loc}: {first["msg"]}'
    return f'{type(error).__name__}: {error}'


INCOMPATIBLE: Final = (
    'the row is corrupt or was written by an incompatible pydantic-ai '
    f'(this process runs {pydantic_ai_version})'
)


def encode_messages(session_id: str, messages: Sequence[ModelMessage]) -> list[bytes]:
    """Serialize every message before anything is written, so a bad one leaves the store untouched."""
    if isinstance(messages, ModelRequest | ModelResponse):
        raise StoreError(f'session {session_id!r}: expected a sequence of messages, got a single message')
    rows: list[bytes] = []
    for index, message in enumerate(messages):
        if not isinstance(message, ModelRequest | ModelResponse):
            raise StoreError(
                f'session {session_id!r}: message {index} is a {type(message).__name__}, '
                'not a ModelRequest or ModelResponse',
                session_id=session_id,
            )
        try:
            rows.append(dump_message(message))
        except (pydantic_core.PydanticSerializationError, ValueError, TypeError, RecursionError) as e:
            raise StoreError(
                f'session {session_id!r}: message {index} cannot be serialized as pydantic-ai JSON: {e}',
                session_id=session_id,
            ) from e
    return rows


def decode_messages(
    session_id: str, rows: Iterable[tuple[int, object]], *, path: str | None = None
) -> list[ModelMessage]:
    """Validate stored rows back into messages; a row that does not validate is an error, never skipped."""
    where = f'{path}: ' if path else ''
    messages: list[ModelMessage] = []
    for index, (seq, data) in enumerate(rows):
        if seq != index:
            raise StoreError(
                f'{where}session {session_id!r}: row seq {seq} found where message {index} belongs; '
                'rows are missing (the log was edited outside the store)',
                path=path,
                session_id=session_id,
                seq=seq,
            )
        raw = data if isinstance(data, bytes) else str(data).encode()
        try:
            messages.append(load_message(raw))
        except (pydantic.ValidationError, ValueError, RecursionError) as e:
            raise StoreError(
                f'{where}session {session_id!r}: message {index} (row seq {seq}) is not a valid '
                f'pydantic-ai message ({describe_invalid(e)}); {INCOMPATIBLE}',
                path=path,
                session_id=session_id,
                seq=seq,
            ) from e
    return messages


def encode_meta(what: str, meta: dict[str, Any] | None) -> str | None:
    if meta is None:
        return None
    try:
        # sort_keys: the same meta always stores the same text
        return json.dumps(meta, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise StoreError(f'{what}: meta is not JSON-serializable: {e}') from e


def decode_meta(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value = json.loads(text)
    if not isinstance(value, dict):
        raise TypeError(f'expected a JSON object, got {type(value).__name__}')
    return value


def utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)
