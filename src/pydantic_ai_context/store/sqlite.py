"""`SqliteStore`: the `SessionStore` in a SQLite file that survives restarts and crashes."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage

from ..errors import StoreError
from ._codec import check_id, decode_messages, decode_meta, encode_messages, encode_meta, utc
from ._sqlite_file import SqliteFile
from .artifacts import ArtifactStore
from .sessions import SessionInfo, SessionStore, SummaryRecord

__all__ = ('SqliteStore',)


@dataclass(eq=False)
class SqliteStore(SqliteFile, SessionStore, ArtifactStore):
    """A `SessionStore` in a SQLite file: sessions survive restarts, crashes and power loss.

    The file is in WAL mode and every `append`, `replace`, `clear` and `delete` is one
    transaction, so a log is never half written: after a crash it holds exactly the calls that
    returned (and perhaps the one in flight, whole or not at all). Power loss is covered by the
    default `synchronous='full'`. Messages are stored one row each as pydantic-ai JSON, numbered
    by `seq`. A new file is created readable by its owner only (0o600); a file from a newer
    version of this package is refused rather than misread.

    The connection is opened (and the schema created or migrated) by the constructor; the async
    methods run their SQLite work on one worker thread, so the event loop never waits on the disk.
    Opening is quick, but from async code you can also write
    `store = await asyncio.to_thread(SqliteStore, path)`. Several stores (or processes) may share
    a file. A cancelled call may still complete: its work is already queued on the worker.

    Example:
        ```python
        import asyncio
        import tempfile
        from pathlib import Path

        from pydantic_ai.messages import ModelRequest, UserPromptPart
        from pydantic_ai_context.store import SqliteStore


        async def main() -> None:
            path = Path(tempfile.mkdtemp()) / 'sessions.db'
            async with SqliteStore(path) as store:
                await store.append('chat-1', [ModelRequest(parts=[UserPromptPart('hi')])])
            async with SqliteStore(path) as store:  # resumed, e.g. after a restart
                assert len(await store.load('chat-1')) == 1


        asyncio.run(main())
        ```
    """

    # --- the protocol ---

    async def append(self, session_id: str, messages: Sequence[ModelMessage]) -> int:
        check_id(session_id, 'session id')
        rows = encode_messages(
            session_id, messages
        )  # now, on the caller's side: the store keeps this snapshot
        return await self._run(self._append_sync, session_id, rows)

    def _append_sync(self, session_id: str, rows: list[bytes]) -> int:
        if not rows:
            row = self._conn.execute(
                'SELECT message_count FROM sessions WHERE session_id = ?', (session_id,)
            ).fetchone()
            return 0 if row is None else int(row[0])

        def body(conn: sqlite3.Connection) -> int:
            now = time.time()
            row = conn.execute(
                'SELECT message_count FROM sessions WHERE session_id = ?', (session_id,)
            ).fetchone()
            if row is None:
                count = 0
                conn.execute(
                    'INSERT INTO sessions (session_id, message_count, created_at, updated_at) '
                    'VALUES (?, 0, ?, ?)',
                    (session_id, now, now),
                )
            else:
                count = int(row[0])
            conn.executemany(
                'INSERT INTO messages (session_id, seq, message) VALUES (?, ?, ?)',
                ((session_id, count + i, data) for i, data in enumerate(rows)),
            )
            conn.execute(
                'UPDATE sessions SET message_count = ?, updated_at = ? WHERE session_id = ?',
                (count + len(rows), now, session_id),
            )
            return count + len(rows)

        return self._write(body)

    async def load(self, session_id: str) -> list[ModelMessage]:
        check_id(session_id, 'session id')
        return await self._run(self._load_sync, session_id)

    def _load_sync(self, session_id: str) -> list[ModelMessage]:
        conn = self._conn
        # One read transaction: the count and the rows come from the same snapshot even while
        # another process appends.
        conn.execute('BEGIN')
        try:
            row = conn.execute(
                'SELECT message_count FROM sessions WHERE session_id = ?', (session_id,)
            ).fetchone()
            rows = conn.execute(
                'SELECT seq, message FROM messages WHERE session_id = ? ORDER BY seq', (session_id,)
            ).fetchall()
        finally:
            conn.execute('COMMIT')
        expected = 0 if row is None else int(row[0])
        if len(rows) != expected:
            raise StoreError(
                f'{self._where}: session {session_id!r} should have {expected} messages but has '
                f'{len(rows)} rows (the file was edited outside the store)',
                path=self._where,
                session_id=session_id,
            )
        return decode_messages(session_id, rows, path=self._where)

    async def replace(self, session_id: str, messages: Sequence[ModelMessage]) -> None:
        check_id(session_id, 'session id')
        rows = encode_messages(session_id, messages)
        await self._run(self._replace_sync, session_id, rows)

    def _replace_sync(self, session_id: str, rows: list[bytes]) -> None:
        def body(conn: sqlite3.Connection) -> None:
            now = time.time()
            conn.execute('DELETE FROM messages WHERE session_id = ?', (session_id,))
            conn.execute(
                'INSERT INTO sessions (session_id, message_count, created_at, updated_at) '
                'VALUES (?, ?, ?, ?) '
                'ON CONFLICT (session_id) DO UPDATE SET message_count = excluded.message_count, '
                'updated_at = excluded.updated_at',
                (session_id, len(rows), now, now),
            )
            conn.executemany(
                'INSERT INTO messages (session_id, seq, message) VALUES (?, ?, ?)',
                ((session_id, i, data) for i, data in enumerate(rows)),
            )

        self._write(body)

    async def clear(self, session_id: str) -> None:
        check_id(session_id, 'session id')
        await self._run(self._clear_sync, session_id)

    def _clear_sync(self, session_id: str) -> None:
        def body(conn: sqlite3.Connection) -> None:
            conn.execute('DELETE FROM messages WHERE session_id = ?', (session_id,))
            conn.execute(
                'UPDATE sessions SET message_count = 0, updated_at = ? WHERE session_id = ?',
                (time.time(), session_id),
            )

        self._write(body)

    async def delete(self, session_id: str) -> None:
        check_id(session_id, 'session id')
        await self._run(self._delete_sync, session_id)

    def _delete_sync(self, session_id: str) -> None:
        def body(conn: sqlite3.Connection) -> None:
            conn.execute('DELETE FROM messages WHERE session_id = ?', (session_id,))
            conn.execute('DELETE FROM sessions WHERE session_id = ?', (session_id,))
            conn.execute('DELETE FROM artifacts WHERE conversation_id = ?', (session_id,))

        self._write(body)

    async def sessions(self) -> list[SessionInfo]:
        return await self._run(self._sessions_sync)

    def _sessions_sync(self) -> list[SessionInfo]:
        rows = self._conn.execute(
            'SELECT session_id, message_count, created_at, updated_at FROM sessions '
            'ORDER BY updated_at DESC, session_id'
        ).fetchall()
        return [
            SessionInfo(sid, int(count), utc(created), utc(updated)) for sid, count, created, updated in rows
        ]

    async def get_summary(self, key: str) -> str | None:
        record = await self.get_summary_record(key)
        return None if record is None else record.summary

    async def get_summary_record(self, key: str) -> SummaryRecord | None:
        check_id(key, 'summary key')
        return await self._run(self._get_summary_sync, key)

    def _get_summary_sync(self, key: str) -> SummaryRecord | None:
        row = self._conn.execute(
            'SELECT summary, meta, created_at FROM summaries WHERE key = ?', (key,)
        ).fetchone()
        if row is None:
            return None
        summary, meta, created_at = row
        try:
            decoded = decode_meta(meta)
        except (ValueError, TypeError) as e:
            raise StoreError(f'{self._where}: summary {key!r} has corrupt meta: {e}', path=self._where) from e
        return SummaryRecord(key, str(summary), decoded, utc(created_at))

    async def put_summary(self, key: str, summary: str, *, meta: dict[str, Any] | None = None) -> None:
        check_id(key, 'summary key')
        if not isinstance(summary, str):
            raise StoreError(f'summary {key!r} must be a str, got {type(summary).__name__}')
        meta_text = encode_meta(f'summary {key!r}', meta)
        await self._run(self._put_summary_sync, key, summary, meta_text)

    def _put_summary_sync(self, key: str, summary: str, meta_text: str | None) -> None:
        def body(conn: sqlite3.Connection) -> None:
            conn.execute(
                'INSERT OR REPLACE INTO summaries (key, summary, meta, created_at) VALUES (?, ?, ?, ?)',
                (key, summary, meta_text, time.time()),
            )

        self._write(body)
