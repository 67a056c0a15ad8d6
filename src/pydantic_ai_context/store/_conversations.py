"""What the SQL conversation stores share: rows to records and entries and back, with errors naming both.

Imported only where pydantic-ai has `ConversationStore` (2.66+).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pydantic
import pydantic_core
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord

from ..errors import StoreEntryMissing, StoreError
from ._codec import INCOMPATIBLE, check_id, describe_invalid, dump_message, load_message

RECORD_ADAPTER: Final[pydantic.TypeAdapter[ConversationRecord]] = pydantic.TypeAdapter(ConversationRecord)

MAX_HISTORY: Final = 1_000_000
"""The longest history `read_history` walks: a parent chain longer than this is reported as broken (a loop)."""


def encode_record(record: ConversationRecord) -> bytes:
    check_id(record.conversation_id, 'conversation id')
    try:
        return RECORD_ADAPTER.dump_json(record)
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError, RecursionError) as e:
        raise StoreError(
            f'conversation {record.conversation_id!r}: its record (usage, deferred tool requests) '
            f'cannot be serialized as JSON: {e}',
            conversation_id=record.conversation_id,
        ) from e


def decode_record(conversation_id: str, raw: object, *, where: str) -> ConversationRecord:
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    try:
        record = RECORD_ADAPTER.validate_json(data)
    except pydantic.ValidationError as e:
        raise StoreError(
            f'{where}: conversation {conversation_id!r}: its record is not a valid pydantic-ai '
            f'ConversationRecord ({describe_invalid(e)}); {INCOMPATIBLE}',
            path=where,
            conversation_id=conversation_id,
        ) from e
    if record.conversation_id != conversation_id:
        raise StoreError(
            f'{where}: conversation {conversation_id!r}: its record names conversation '
            f'{record.conversation_id!r} (the row was edited outside the store)',
            path=where,
            conversation_id=conversation_id,
        )
    return record


def encode_entries(
    conversation_id: str, entries: Sequence[ConversationEntry]
) -> list[tuple[str, str | None, str, str, bytes]]:
    """Rows `(entry_id, parent_id, conversation_id, kind, message)`, all serialized before anything is written."""
    rows: list[tuple[str, str | None, str, str, bytes]] = []
    for index, entry in enumerate(entries):
        check_id(entry.id, 'entry id')
        try:
            data = dump_message(entry.message)
        except (pydantic_core.PydanticSerializationError, ValueError, TypeError, RecursionError) as e:
            raise StoreError(
                f'conversation {conversation_id!r}: new message {index} (entry {entry.id!r}) cannot be '
                f'serialized as pydantic-ai JSON: {e}',
                conversation_id=conversation_id,
                entry_id=entry.id,
            ) from e
        rows.append((entry.id, entry.parent_id, conversation_id, entry.kind, data))
    return rows


def decode_entry(
    entry_id: str, parent_id: str | None, owner: str, kind: str, raw: object, *, where: str
) -> ConversationEntry:
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    if kind != 'message':
        raise StoreError(
            f'{where}: conversation {owner!r}: entry {entry_id!r} has kind {kind!r}, which this '
            f'pydantic-ai-context does not know; {INCOMPATIBLE}',
            path=where,
            conversation_id=owner,
            entry_id=entry_id,
        )
    try:
        message = load_message(data)
    except (pydantic.ValidationError, ValueError, RecursionError) as e:
        raise StoreError(
            f'{where}: conversation {owner!r}: entry {entry_id!r} is not a valid pydantic-ai message '
            f'({describe_invalid(e)}); {INCOMPATIBLE}',
            path=where,
            conversation_id=owner,
            entry_id=entry_id,
        ) from e
    return ConversationEntry(id=entry_id, parent_id=parent_id, message=message)


Row = tuple[str, str | None, str, str, object]


def chain(head_id: str, rows: Sequence[Row], limit: int | None, *, where: str) -> list[ConversationEntry]:
    """The entries of `rows` (newest first, as the recursive query walks them) oldest first, checked whole."""
    if not rows:
        raise StoreEntryMissing(
            f'{where}: entry {head_id!r} is not in the store', path=where, entry_id=head_id
        )
    expected: str | None = head_id
    for entry_id, parent_id, _, _, _ in rows:
        if entry_id != expected:  # pragma: no cover - the query walks parent links
            raise StoreError(f'{where}: the history of entry {head_id!r} is out of order', path=where)
        expected = parent_id
    wanted = MAX_HISTORY if limit is None else min(limit, MAX_HISTORY)
    if expected is not None and len(rows) < wanted:
        last = rows[-1]
        raise StoreEntryMissing(
            f'{where}: conversation {last[2]!r}: entry {expected!r}, the parent of entry {last[0]!r}, '
            'is not in the store',
            path=where,
            conversation_id=last[2],
            entry_id=expected,
        )
    if expected is not None and limit is None:
        raise StoreError(
            f'{where}: the history of entry {head_id!r} is longer than {MAX_HISTORY:,} entries: its parent '
            'links loop (the rows were edited outside the store)',
            path=where,
            entry_id=head_id,
        )
    entries = [decode_entry(*row, where=where) for row in rows]
    entries.reverse()
    return entries


def tips(record: ConversationRecord) -> list[str]:
    """The last entries of every history the record keeps: its head and the branches it left."""
    return list(dict.fromkeys(t for t in [record.head_id, *record.branches] if t is not None))
