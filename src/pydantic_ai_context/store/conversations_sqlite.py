"""`SqliteConversationStore`: pydantic-ai's `ConversationStore` in a SQLite file (one process, the default)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)

from ._codec import check_id
from ._conversations import MAX_HISTORY, Row, chain, decode_record, encode_entries, encode_record, tips
from ._sqlite_file import SqliteFile
from .artifacts import ArtifactStore

__all__ = ('SqliteConversationStore',)

_ENTRY_COLUMNS = 'entry_id, parent_id, conversation_id, kind, message'

# Deleting a conversation deletes the entries only it reaches: those it stored and every one its
# history (its head and the branches it left) passes through, including those of conversations
# deleted earlier, even when their id was taken again, unless a remaining conversation's history
# still passes through them, e.g. a fork of it.
_COLLECT_ENTRIES = """
WITH RECURSIVE
  history(entry_id, parent_id) AS (
    SELECT e.entry_id, e.parent_id FROM conversation_entries e
      JOIN conversation_tips t ON t.entry_id = e.entry_id WHERE t.conversation_id = :c
    UNION
    SELECT e.entry_id, e.parent_id FROM conversation_entries e JOIN history h ON e.entry_id = h.parent_id
  ),
  candidates(entry_id) AS (
    SELECT entry_id FROM conversation_entries WHERE conversation_id = :c
    UNION
    SELECT entry_id FROM history
  ),
  descendants(entry_id) AS (
    SELECT entry_id FROM candidates
    UNION
    SELECT e.entry_id FROM conversation_entries e JOIN descendants d ON e.parent_id = d.entry_id
  ),
  needed(entry_id, parent_id) AS (
    SELECT e.entry_id, e.parent_id FROM conversation_entries e
      JOIN conversation_tips t ON t.entry_id = e.entry_id
      WHERE t.conversation_id <> :c AND t.entry_id IN (SELECT entry_id FROM descendants)
    UNION
    SELECT e.entry_id, e.parent_id FROM conversation_entries e JOIN needed n ON e.entry_id = n.parent_id
  )
DELETE FROM conversation_entries
WHERE entry_id IN (SELECT entry_id FROM candidates) AND entry_id NOT IN (SELECT entry_id FROM needed)
"""


@dataclass(eq=False)
class SqliteConversationStore(SqliteFile, ConversationStore, ArtifactStore):
    """pydantic-ai's `ConversationStore` in a SQLite file: conversations survive restarts, crashes and power loss.

    Use it as pydantic-ai documents (`load`, `save`, `branch`, `fork`, `list_conversations`,
    `delete`): it implements the storage primitives, with `read_history` as one recursive query.
    Every `save` is one transaction (the new messages and the record together, or nothing), in WAL
    mode with `synchronous=FULL` by default: a save that returned survives a crash or power loss.
    Concurrent writers, in this process or others on the same file, are serialised by SQLite's
    write lock, and the revision check inside that transaction makes the loser's save raise
    pydantic-ai's `ConversationConflict` (load again and retry). A new file is created readable by
    its owner only (0o600); a file with a newer schema is refused; a corrupt row raises
    `StoreError` naming the conversation and the entry.

    `delete` removes the conversation's record, the artifacts it owns, and the messages no other
    conversation reaches (a fork keeps the history it shares). It is also an `ArtifactStore`
    (summaries and read-back originals in the same file), and `SqliteStore` can open the same
    file. Nothing is opened until the first call, on the store's worker thread, so constructing it
    never blocks; `await store.aclose()` releases it. Needs pydantic-ai 2.66 or later.

    Example:
        ```python {requires="2.66"}
        import asyncio
        import tempfile
        from pathlib import Path

        from pydantic_ai import Agent
        from pydantic_ai.conversation import Conversation
        from pydantic_ai.models.test import TestModel
        from pydantic_ai_context.store import SqliteConversationStore


        async def main() -> None:
            path = Path(tempfile.mkdtemp()) / 'conversations.db'
            agent = Agent(TestModel(custom_output_text='Hello!'))
            async with SqliteConversationStore(path) as store:
                conversation = await store.load('chat-1') or Conversation(conversation_id='chat-1')
                await store.save(await agent.run('Hi', conversation=conversation))
            async with SqliteConversationStore(path) as store:  # e.g. after a restart
                conversation = await store.load('chat-1')
                assert conversation is not None and len(conversation.messages) == 2


        asyncio.run(main())
        ```
    """

    _open_lazily: ClassVar[bool] = True
    _kind: ClassVar[str] = 'conversation store'

    # --- reading ---

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        check_id(conversation_id, 'conversation id')
        return await self._run(self._read_record_sync, conversation_id)

    def _read_record_sync(self, conversation_id: str) -> ConversationRecord | None:
        row = self._conn.execute(
            'SELECT record FROM conversations WHERE conversation_id = ?', (conversation_id,)
        ).fetchone()
        return None if row is None else decode_record(conversation_id, row[0], where=self._where)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        return await self._run(self._read_records_sync, scope, -1 if limit is None else limit)

    def _read_records_sync(self, scope: str | None, limit: int) -> list[ConversationRecord]:
        if scope is None:
            rows = self._conn.execute(
                'SELECT conversation_id, record FROM conversations ORDER BY updated_at DESC, conversation_id '
                'LIMIT ?',
                (limit,),
            ).fetchall()
        else:
            rows = self._conn.execute(
                'SELECT conversation_id, record FROM conversations WHERE scope = ? '
                'ORDER BY updated_at DESC, conversation_id LIMIT ?',
                (scope, limit),
            ).fetchall()
        return [decode_record(cid, raw, where=self._where) for cid, raw in rows]

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        check_id(entry_id, 'entry id')
        return (await self.read_history(entry_id, limit=1))[0]

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The entries from the first up to `head_id` (or its last `limit`), oldest first, in one query."""
        if head_id is None or limit == 0:
            return []
        check_id(head_id, 'entry id')
        return await self._run(self._read_history_sync, head_id, limit)

    def _read_history_sync(self, head_id: str, limit: int | None) -> list[ConversationEntry]:
        depth = MAX_HISTORY if limit is None else min(limit, MAX_HISTORY)
        rows: list[Row] = self._conn.execute(
            f"""
            WITH RECURSIVE walk(entry_id, parent_id, depth) AS (
                SELECT entry_id, parent_id, 1 FROM conversation_entries WHERE entry_id = ?
                UNION ALL
                SELECT e.entry_id, e.parent_id, w.depth + 1
                FROM conversation_entries e JOIN walk w ON e.entry_id = w.parent_id
                WHERE w.depth < ?
            )
            SELECT {', '.join(f'e.{c}' for c in _ENTRY_COLUMNS.split(', '))}
            FROM walk w JOIN conversation_entries e ON e.entry_id = w.entry_id
            ORDER BY w.depth
            """,
            (head_id, depth),
        ).fetchall()
        return chain(head_id, rows, limit, where=self._where)

    # --- writing ---

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        # Serialized here, before the await: the store keeps what it was given at the call.
        data = encode_record(record)
        rows = encode_entries(record.conversation_id, new_entries)
        await self._run(self._write_record_sync, record, data, rows, expected_revision)

    def _write_record_sync(
        self,
        record: ConversationRecord,
        data: bytes,
        rows: list[tuple[str, str | None, str, str, bytes]],
        expected_revision: str | None,
    ) -> None:
        cid = record.conversation_id

        def body(conn: sqlite3.Connection) -> None:
            # BEGIN IMMEDIATE holds the write lock: no other writer can change the revision between
            # this check and the commit.
            stored = conn.execute(
                'SELECT revision FROM conversations WHERE conversation_id = ?', (cid,)
            ).fetchone()
            if (None if stored is None else stored[0]) != expected_revision:
                raise ConversationConflict(cid)
            new_ids = {row[0] for row in rows}
            if record.head_id is not None and record.head_id not in new_ids:
                found = conn.execute(
                    'SELECT 1 FROM conversation_entries WHERE entry_id = ?', (record.head_id,)
                ).fetchone()
                if found is None:  # a concurrent delete released the entry a fork points at
                    raise ConversationConflict(cid)
            conn.executemany(
                f'INSERT INTO conversation_entries ({_ENTRY_COLUMNS}) VALUES (?, ?, ?, ?, ?)', rows
            )
            conn.execute(
                'INSERT INTO conversations (conversation_id, revision, head_id, scope, updated_at, record) '
                'VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET '
                'revision = excluded.revision, head_id = excluded.head_id, scope = excluded.scope, '
                'updated_at = excluded.updated_at, record = excluded.record',
                (cid, record.revision, record.head_id, record.scope, record.updated_at.timestamp(), data),
            )
            new_tips = tips(record)
            conn.execute(
                f'DELETE FROM conversation_tips WHERE conversation_id = ? '
                f'AND entry_id NOT IN ({", ".join("?" * len(new_tips))})',
                (cid, *new_tips),
            )
            conn.executemany(
                'INSERT OR IGNORE INTO conversation_tips (conversation_id, entry_id) VALUES (?, ?)',
                [(cid, tip) for tip in new_tips],
            )

        self._write(body)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Delete the record, the artifacts it owns, and the entries no remaining conversation reaches."""
        check_id(conversation_id, 'conversation id')
        await self._run(self._delete_record_sync, conversation_id, expected_revision)

    def _delete_record_sync(self, conversation_id: str, expected_revision: str) -> None:
        def body(conn: sqlite3.Connection) -> None:
            deleted = conn.execute(
                'DELETE FROM conversations WHERE conversation_id = ? AND revision = ?',
                (conversation_id, expected_revision),
            )
            if deleted.rowcount != 1:
                raise ConversationConflict(conversation_id)
            conn.execute(_COLLECT_ENTRIES, {'c': conversation_id})
            conn.execute('DELETE FROM conversation_tips WHERE conversation_id = ?', (conversation_id,))
            conn.execute('DELETE FROM artifacts WHERE conversation_id = ?', (conversation_id,))

        self._write(body)
