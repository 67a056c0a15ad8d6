"""Where a session's canonical message log and the summary cache live between runs.

Two stores share the `SessionStore` protocol: `MemoryStore` (the default, gone with the process)
and `SqliteStore` (a file that survives restarts and crashes). Both keep every message as
pydantic-ai JSON, so a log reads back the same from either store, and a caller's later changes to
the objects it appended never reach the store.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Protocol, Self, TypeVar, runtime_checkable

import pydantic
import pydantic_core
from pydantic_ai import __version__ as _pydantic_ai_version
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from .errors import StoreError

__all__ = (
    'MIGRATIONS',
    'SCHEMA_VERSION',
    'MemoryStore',
    'Migration',
    'SessionInfo',
    'SessionStore',
    'SqliteStore',
    'StoreError',
    'SummaryRecord',
)

_T = TypeVar('_T')


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One stored session as `SessionStore.sessions()` lists it.

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelRequest, UserPromptPart
        from pydantic_ai_context.store import MemoryStore


        async def main() -> None:
            store = MemoryStore()
            await store.append('chat-1', [ModelRequest(parts=[UserPromptPart('hi')])])
            [info] = await store.sessions()
            assert info.session_id == 'chat-1' and info.message_count == 1
            assert info.created_at <= info.updated_at


        asyncio.run(main())
        ```
    """

    session_id: str
    message_count: int
    created_at: datetime
    """When the session's first message (or first `replace`) was stored, in UTC."""
    updated_at: datetime
    """When the session's log last changed, in UTC."""


@dataclass(frozen=True, slots=True)
class SummaryRecord:
    """A cached summary with the metadata it was stored with.

    Example:
        ```python
        import asyncio

        from pydantic_ai_context.store import MemoryStore


        async def main() -> None:
            store = MemoryStore()
            await store.put_summary('sha256:ab12', 'The user wants a CSV export.', meta={'model': 'small'})
            record = await store.get_summary_record('sha256:ab12')
            assert record is not None and record.meta == {'model': 'small'}


        asyncio.run(main())
        ```
    """

    key: str
    """The content digest of the span the summary covers."""
    summary: str
    meta: dict[str, Any] | None
    """JSON-compatible metadata given to `put_summary` (e.g. the covered range, the summariser model)."""
    created_at: datetime
    """When this summary was last put, in UTC."""


@runtime_checkable
class SessionStore(Protocol):
    """The storage a session needs: per-session message logs plus a summary cache.

    A session exists from its first non-empty `append` (or any `replace`) until `delete`; `clear`
    empties its log but keeps it listed. The summary cache is global, keyed by the content digest
    of the span a summary covers, so identical spans in different sessions share one summary;
    deleting a session leaves the cache alone. Every failure is a `StoreError`. A store is an async
    context manager that closes on exit.

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelRequest, UserPromptPart
        from pydantic_ai_context.store import MemoryStore, SessionStore


        async def remember(store: SessionStore, session_id: str, text: str) -> int:
            return await store.append(session_id, [ModelRequest(parts=[UserPromptPart(text)])])


        async def main() -> None:
            async with MemoryStore() as store:
                assert isinstance(store, SessionStore)
                assert await remember(store, 'chat-1', 'hello') == 1


        asyncio.run(main())
        ```
    """

    async def append(self, session_id: str, messages: Sequence[ModelMessage]) -> int:
        """Add `messages` to the end of the session's log, atomically; return the new message count.

        The messages are captured when this is called: changing them afterwards changes nothing
        stored. Appending nothing is a no-op (it does not create the session).
        """
        ...

    async def load(self, session_id: str) -> list[ModelMessage]:
        """The session's whole log, oldest first, as new objects; `[]` for an unknown session."""
        ...

    async def replace(self, session_id: str, messages: Sequence[ModelMessage]) -> None:
        """Set the session's log to `messages`, atomically, creating the session if needed."""
        ...

    async def clear(self, session_id: str) -> None:
        """Empty the session's log but keep the session; an unknown session stays unknown."""
        ...

    async def delete(self, session_id: str) -> None:
        """Forget the session and its log; cached summaries are shared and stay."""
        ...

    async def sessions(self) -> list[SessionInfo]:
        """Every stored session, most recently updated first (ties by session id)."""
        ...

    async def get_summary(self, key: str) -> str | None:
        """The cached summary for the span whose digest is `key`, or `None`."""
        ...

    async def get_summary_record(self, key: str) -> SummaryRecord | None:
        """Like `get_summary`, with the metadata and time it was stored."""
        ...

    async def put_summary(self, key: str, summary: str, *, meta: dict[str, Any] | None = None) -> None:
        """Cache `summary` under `key`, replacing any earlier one; `meta` must be JSON-compatible."""
        ...

    async def close(self) -> None:
        """Release the store; later calls raise `StoreError`. Closing twice is harmless."""
        ...

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


# --- the shared codec --------------------------------------------------------------------------

# Same config as `ModelMessagesTypeAdapter`, so one stored row is byte for byte an item of the list
# pydantic-ai itself would dump: logs stay readable by plain `ModelMessagesTypeAdapter` code.
_MESSAGE_ADAPTER: Final[pydantic.TypeAdapter[ModelMessage]] = pydantic.TypeAdapter(
    ModelMessage,
    config=pydantic.ConfigDict(defer_build=True, ser_json_bytes='base64', val_json_bytes='base64'),
)


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise StoreError(f'{what} must be a non-empty str, got {value!r}')
    return value


def _encode(session_id: str, messages: Sequence[ModelMessage]) -> list[bytes]:
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
            rows.append(_MESSAGE_ADAPTER.dump_json(message))
        except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as e:
            raise StoreError(
                f'session {session_id!r}: message {index} cannot be serialized as pydantic-ai JSON: {e}',
                session_id=session_id,
            ) from e
    return rows


def _decode(
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
            messages.append(_MESSAGE_ADAPTER.validate_json(raw))
        except pydantic.ValidationError as e:
            first = e.errors()[0]
            loc = '.'.join(str(part) for part in first['loc']) or '<root>'
            raise StoreError(
                f'{where}session {session_id!r}: message {index} (row seq {seq}) is not a valid '
                f'pydantic-ai message ({e.error_count()} error(s), first at {loc}: {first["msg"]}); '
                f'the row is corrupt or was written by an incompatible pydantic-ai '
                f'(this process runs {_pydantic_ai_version})',
                path=path,
                session_id=session_id,
                seq=seq,
            ) from e
    return messages


def _encode_meta(key: str, meta: dict[str, Any] | None) -> str | None:
    if meta is None:
        return None
    try:
        # sort_keys: the same meta always stores the same text
        return json.dumps(meta, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise StoreError(f'summary {key!r}: meta is not JSON-serializable: {e}') from e


def _decode_meta(text: str | None) -> dict[str, Any] | None:
    return None if text is None else dict(json.loads(text))


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


# --- MemoryStore -------------------------------------------------------------------------------


@dataclass
class _MemorySession:
    created_at: float
    updated_at: float
    rows: list[bytes] = field(default_factory=list)


@dataclass(eq=False)
class MemoryStore(SessionStore):
    """A `SessionStore` in a dict: the default, fast, and gone when the process ends.

    It keeps the same pydantic-ai JSON rows as `SqliteStore`, so the two behave alike: loads
    return new objects, and a message that could not be saved to a file fails here too.

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
        from pydantic_ai_context.store import MemoryStore


        async def main() -> None:
            async with MemoryStore() as store:
                log = [ModelRequest(parts=[UserPromptPart('hi')]), ModelResponse(parts=[TextPart('hello!')])]
                assert await store.append('chat-1', log) == 2
                log.clear()  # the store kept its own copy
                assert [m.kind for m in await store.load('chat-1')] == ['request', 'response']


        asyncio.run(main())
        ```
    """

    _sessions: dict[str, _MemorySession] = field(default_factory=dict, init=False, repr=False)
    _summaries: dict[str, tuple[str, str | None, float]] = field(default_factory=dict, init=False, repr=False)
    # The async methods never await, so they are atomic on one loop; the lock covers several loops.
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError('MemoryStore is closed')

    async def append(self, session_id: str, messages: Sequence[ModelMessage]) -> int:
        _check_id(session_id, 'session id')
        rows = _encode(session_id, messages)
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            if not rows:
                return 0 if session is None else len(session.rows)
            now = time.time()
            if session is None:
                session = self._sessions[session_id] = _MemorySession(now, now)
            session.rows.extend(rows)
            session.updated_at = now
            return len(session.rows)

    async def load(self, session_id: str) -> list[ModelMessage]:
        _check_id(session_id, 'session id')
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            rows = [] if session is None else list(session.rows)
        return _decode(session_id, enumerate(rows))

    async def replace(self, session_id: str, messages: Sequence[ModelMessage]) -> None:
        _check_id(session_id, 'session id')
        rows = _encode(session_id, messages)
        with self._lock:
            self._check_open()
            now = time.time()
            session = self._sessions.setdefault(session_id, _MemorySession(now, now))
            session.rows = rows
            session.updated_at = now

    async def clear(self, session_id: str) -> None:
        _check_id(session_id, 'session id')
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            if session is not None:
                session.rows = []
                session.updated_at = time.time()

    async def delete(self, session_id: str) -> None:
        _check_id(session_id, 'session id')
        with self._lock:
            self._check_open()
            self._sessions.pop(session_id, None)

    async def sessions(self) -> list[SessionInfo]:
        with self._lock:
            self._check_open()
            infos = [
                SessionInfo(sid, len(s.rows), _utc(s.created_at), _utc(s.updated_at))
                for sid, s in self._sessions.items()
            ]
        return sorted(infos, key=_listing_order)

    async def get_summary(self, key: str) -> str | None:
        record = await self.get_summary_record(key)
        return None if record is None else record.summary

    async def get_summary_record(self, key: str) -> SummaryRecord | None:
        _check_id(key, 'summary key')
        with self._lock:
            self._check_open()
            entry = self._summaries.get(key)
        if entry is None:
            return None
        summary, meta, created_at = entry
        return SummaryRecord(key, summary, _decode_meta(meta), _utc(created_at))

    async def put_summary(self, key: str, summary: str, *, meta: dict[str, Any] | None = None) -> None:
        _check_id(key, 'summary key')
        if not isinstance(summary, str):
            raise StoreError(f'summary {key!r} must be a str, got {type(summary).__name__}')
        meta_text = _encode_meta(key, meta)
        with self._lock:
            self._check_open()
            self._summaries[key] = (summary, meta_text, time.time())

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            self._sessions.clear()
            self._summaries.clear()


def _listing_order(info: SessionInfo) -> tuple[float, str]:
    return (-info.updated_at.timestamp(), info.session_id)


# --- SqliteStore: schema and migrations --------------------------------------------------------

Migration = Callable[[sqlite3.Connection], None]
"""Upgrades an open store file by one schema version.

It runs inside the store's open transaction (all pending migrations commit together, or none
does), so it must not commit or roll back itself.
"""


def _create_schema_v1(conn: sqlite3.Connection) -> None:
    # message_count lives on the session row so sessions() is one small query; append keeps it
    # equal to the number of message rows inside the same transaction.
    conn.execute(
        """
        CREATE TABLE sessions (
            session_id TEXT PRIMARY KEY,
            message_count INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )
        """
    )
    # One row per message; seq is the message's index in the log (0, 1, 2, ... with no gaps).
    conn.execute(
        """
        CREATE TABLE messages (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            message BLOB NOT NULL,
            PRIMARY KEY (session_id, seq)
        )
        """
    )
    conn.execute(
        """
        CREATE TABLE summaries (
            key TEXT PRIMARY KEY,
            summary TEXT NOT NULL,
            meta TEXT,
            created_at REAL NOT NULL
        )
        """
    )


MIGRATIONS: Final[tuple[Migration, ...]] = (_create_schema_v1,)
"""`MIGRATIONS[n]` upgrades a store file from schema version `n` to `n + 1`; version 0 is an empty file."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this code writes, kept in the file as `PRAGMA user_version`."""


def _create_private_file(path: Path) -> None:
    # sqlite would create the file with the umask's permissions (often world-readable); creating
    # it first with 0o600 keeps conversations private, and sqlite gives the -wal and -shm files
    # the same permissions as the database file. An existing file keeps its permissions.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)


# --- SqliteStore -------------------------------------------------------------------------------


@dataclass(eq=False)
class SqliteStore(SessionStore):
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

    path: str | os.PathLike[str]
    """The database file; created if missing. Its directory must exist."""
    _: KW_ONLY
    synchronous: Literal['full', 'normal'] = 'full'
    """SQLite's `synchronous` setting. `'full'` (default) syncs the WAL to disk on every commit, so
    a returned append survives a process crash *and* an OS crash or power loss, for roughly one
    fsync per append (small next to a model call). `'normal'` skips that fsync: a returned append
    still survives the process being killed (the OS has the data), but the last appends may be
    lost on power loss; the file is never corrupted either way."""
    timeout: float = 5.0
    """Seconds to wait for another connection's write lock before failing with `StoreError`."""
    migrations: Sequence[Migration] = field(default=MIGRATIONS, repr=False)
    """The upgrade chain, applied at open: `migrations[n]` goes from version `n` to `n + 1`, and
    `len(migrations)` is the version this store expects. Extend it only to evolve the schema."""

    _conn: sqlite3.Connection = field(init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _executor: ThreadPoolExecutor = field(init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if str(self.path) == ':memory:' or str(self.path).startswith('file:'):
            raise StoreError(
                f'SqliteStore needs a file path, got {str(self.path)!r}; use MemoryStore instead'
            )
        if self.synchronous not in ('full', 'normal'):
            raise StoreError(f"synchronous must be 'full' or 'normal', got {self.synchronous!r}")
        self._conn = self._open()
        # One worker thread owns the connection's work: calls queue up in the order they were made,
        # and the single connection needs no pool.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix='pydantic-ai-context-store')

    @property
    def _where(self) -> str:
        return os.fspath(self.path)

    def _open(self) -> sqlite3.Connection:
        path = Path(self.path)
        try:
            _create_private_file(path)
            # isolation_level=None: this class writes BEGIN/COMMIT itself.
            conn = sqlite3.connect(path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f'cannot open session store {self._where}: {e}', path=self._where) from e
        try:
            mode = conn.execute('PRAGMA journal_mode=WAL').fetchone()[0]
            if str(mode).lower() != 'wal':
                raise StoreError(
                    f'{self._where}: SQLite refused WAL mode (journal_mode is {mode!r}); '
                    'the store needs a local filesystem',
                    path=self._where,
                )
            conn.execute(f'PRAGMA synchronous={self.synchronous.upper()}')
            self._migrate(conn)
        except BaseException as e:
            conn.close()
            if isinstance(e, sqlite3.Error):
                raise StoreError(f'cannot open session store {self._where}: {e}', path=self._where) from e
            raise
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        target = len(self.migrations)
        # IMMEDIATE: two processes opening a fresh file at once must not both create the schema.
        conn.execute('BEGIN IMMEDIATE')
        try:
            version = int(conn.execute('PRAGMA user_version').fetchone()[0])
            if version > target:
                raise StoreError(
                    f'{self._where} has store schema version {version}, newer than version {target} '
                    'that this pydantic-ai-context understands; upgrade pydantic-ai-context to open it',
                    path=self._where,
                )
            while version < target:
                try:
                    self.migrations[version](conn)
                except Exception as e:
                    raise StoreError(
                        f'{self._where}: migrating the store schema from version {version} to '
                        f'{version + 1} failed: {e}',
                        path=self._where,
                    ) from e
                version += 1
                conn.execute(f'PRAGMA user_version={version:d}')
        except BaseException:
            conn.execute('ROLLBACK')
            raise
        conn.execute('COMMIT')

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise StoreError(f'SqliteStore({self._where!r}) is closed', path=self._where)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(self._locked, fn, *args))

    def _locked(self, fn: Callable[..., _T], *args: Any) -> _T:
        with self._lock:
            if self._closed:
                raise StoreError(f'SqliteStore({self._where!r}) is closed', path=self._where)
            try:
                return fn(*args)
            except sqlite3.Error as e:
                raise StoreError(f'{self._where}: {e}', path=self._where) from e

    def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
        conn = self._conn
        # IMMEDIATE takes the write lock up front, so the session's count cannot change between
        # reading it and writing the rows, even from another process.
        conn.execute('BEGIN IMMEDIATE')
        try:
            result = body(conn)
        except BaseException:
            conn.execute('ROLLBACK')
            raise
        conn.execute('COMMIT')
        return result

    # --- the protocol ---

    async def append(self, session_id: str, messages: Sequence[ModelMessage]) -> int:
        _check_id(session_id, 'session id')
        rows = _encode(session_id, messages)  # now, on the caller's side: the store keeps this snapshot
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
        _check_id(session_id, 'session id')
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
        return _decode(session_id, rows, path=self._where)

    async def replace(self, session_id: str, messages: Sequence[ModelMessage]) -> None:
        _check_id(session_id, 'session id')
        rows = _encode(session_id, messages)
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
        _check_id(session_id, 'session id')
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
        _check_id(session_id, 'session id')
        await self._run(self._delete_sync, session_id)

    def _delete_sync(self, session_id: str) -> None:
        def body(conn: sqlite3.Connection) -> None:
            conn.execute('DELETE FROM messages WHERE session_id = ?', (session_id,))
            conn.execute('DELETE FROM sessions WHERE session_id = ?', (session_id,))

        self._write(body)

    async def sessions(self) -> list[SessionInfo]:
        return await self._run(self._sessions_sync)

    def _sessions_sync(self) -> list[SessionInfo]:
        rows = self._conn.execute(
            'SELECT session_id, message_count, created_at, updated_at FROM sessions '
            'ORDER BY updated_at DESC, session_id'
        ).fetchall()
        return [
            SessionInfo(sid, int(count), _utc(created), _utc(updated))
            for sid, count, created, updated in rows
        ]

    async def get_summary(self, key: str) -> str | None:
        record = await self.get_summary_record(key)
        return None if record is None else record.summary

    async def get_summary_record(self, key: str) -> SummaryRecord | None:
        _check_id(key, 'summary key')
        return await self._run(self._get_summary_sync, key)

    def _get_summary_sync(self, key: str) -> SummaryRecord | None:
        row = self._conn.execute(
            'SELECT summary, meta, created_at FROM summaries WHERE key = ?', (key,)
        ).fetchone()
        if row is None:
            return None
        summary, meta, created_at = row
        try:
            decoded = _decode_meta(meta)
        except (ValueError, TypeError) as e:
            raise StoreError(f'{self._where}: summary {key!r} has corrupt meta: {e}', path=self._where) from e
        return SummaryRecord(key, str(summary), decoded, _utc(created_at))

    async def put_summary(self, key: str, summary: str, *, meta: dict[str, Any] | None = None) -> None:
        _check_id(key, 'summary key')
        if not isinstance(summary, str):
            raise StoreError(f'summary {key!r} must be a str, got {type(summary).__name__}')
        meta_text = _encode_meta(key, meta)
        await self._run(self._put_summary_sync, key, summary, meta_text)

    def _put_summary_sync(self, key: str, summary: str, meta_text: str | None) -> None:
        def body(conn: sqlite3.Connection) -> None:
            conn.execute(
                'INSERT OR REPLACE INTO summaries (key, summary, meta, created_at) VALUES (?, ?, ?, ?)',
                (key, summary, meta_text, time.time()),
            )

        self._write(body)

    async def close(self) -> None:
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        # Queued behind every call already made, so those finish before the connection closes.
        await loop.run_in_executor(self._executor, self._close_sync)
        self._executor.shutdown(wait=False)

    def _close_sync(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
