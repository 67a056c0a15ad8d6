"""One SQLite store file: opening it durably, its schema and migrations, the worker thread, artifacts.

`SqliteStore` (sessions) and `SqliteConversationStore` (pydantic-ai conversations) are two views of
the same kind of file: one schema holds both, so one file may serve both, and both keep their
artifacts (summaries, read-back originals) in it.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Final, Literal, Self, TypeVar

from ..errors import StoreError
from ._codec import check_id, decode_meta, encode_meta, utc
from .artifacts import Artifact, check_keys, check_values

__all__ = ('MIGRATIONS', 'SCHEMA_VERSION', 'Migration', 'SqliteFile')

_T = TypeVar('_T')

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


def _add_conversations_v2(conn: sqlite3.Connection) -> None:
    # pydantic-ai's ConversationStore: a record per conversation (its JSON, plus the columns the
    # queries filter and sort on) and an append-only tree of entries linked by parent_id.
    conn.execute(
        """
        CREATE TABLE conversations (
            conversation_id TEXT PRIMARY KEY,
            revision TEXT NOT NULL,
            head_id TEXT,
            scope TEXT,
            updated_at REAL NOT NULL,
            record BLOB NOT NULL
        )
        """
    )
    conn.execute('CREATE INDEX conversations_by_time ON conversations (updated_at)')
    conn.execute('CREATE INDEX conversations_by_scope ON conversations (scope, updated_at)')
    # conversation_id is the conversation that stored the entry: delete finds its entries by it.
    conn.execute(
        """
        CREATE TABLE conversation_entries (
            entry_id TEXT PRIMARY KEY,
            parent_id TEXT,
            conversation_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            message BLOB NOT NULL
        )
        """
    )
    conn.execute('CREATE INDEX conversation_entries_by_parent ON conversation_entries (parent_id)')
    conn.execute('CREATE INDEX conversation_entries_by_owner ON conversation_entries (conversation_id)')
    # Every history a record keeps (its head and the branches it left), so delete can tell which
    # entries another conversation still reaches without walking every conversation.
    conn.execute(
        """
        CREATE TABLE conversation_tips (
            conversation_id TEXT NOT NULL,
            entry_id TEXT NOT NULL,
            PRIMARY KEY (conversation_id, entry_id)
        )
        """
    )
    conn.execute('CREATE INDEX conversation_tips_by_entry ON conversation_tips (entry_id)')
    conn.execute(
        """
        CREATE TABLE artifacts (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            meta TEXT,
            conversation_id TEXT,
            updated_at REAL NOT NULL,
            PRIMARY KEY (namespace, key)
        )
        """
    )
    conn.execute('CREATE INDEX artifacts_by_owner ON artifacts (conversation_id)')


MIGRATIONS: Final[tuple[Migration, ...]] = (_create_schema_v1, _add_conversations_v2)
"""`MIGRATIONS[n]` upgrades a store file from schema version `n` to `n + 1`; version 0 is an empty file."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this code writes, kept in the file as `PRAGMA user_version`."""


def _create_private_file(path: Path) -> None:
    # sqlite would create the file with the umask's permissions (often world-readable); creating
    # it first with 0o600 keeps conversations private, and sqlite gives the -wal and -shm files
    # the same permissions as the database file. An existing file keeps its permissions.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)


@dataclass(eq=False)
class SqliteFile:
    """The durable SQLite file under a store: WAL, one transaction per write, a worker thread."""

    path: str | os.PathLike[str]
    """The database file; created if missing. Its directory must exist."""
    _: KW_ONLY
    synchronous: Literal['full', 'normal'] = 'full'
    """SQLite's `synchronous` setting. `'full'` (default) syncs the WAL to disk on every commit, so
    a returned write survives a process crash *and* an OS crash or power loss, for roughly one
    fsync per write (small next to a model call). `'normal'` skips that fsync: a returned write
    still survives the process being killed (the OS has the data), but the last writes may be
    lost on power loss; the file is never corrupted either way."""
    timeout: float = 5.0
    """Seconds to wait for another connection's write lock before failing with `StoreError`."""
    migrations: Sequence[Migration] = field(default=MIGRATIONS, repr=False)
    """The upgrade chain, applied at open: `migrations[n]` goes from version `n` to `n + 1`, and
    `len(migrations)` is the version this store expects. Extend it only to evolve the schema."""

    _conn: sqlite3.Connection = field(init=False, repr=False)
    _opened: bool = field(default=False, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _executor: ThreadPoolExecutor = field(init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    _open_lazily: ClassVar[bool] = False
    """Open the file on the first call (on the worker thread) rather than in the constructor."""
    _kind: ClassVar[str] = 'session store'
    """What the store is, in its errors."""

    def __post_init__(self) -> None:
        if str(self.path) == ':memory:' or str(self.path).startswith('file:'):
            raise StoreError(
                f'{type(self).__name__} needs a file path, got {str(self.path)!r}; '
                + (
                    'use MemoryStore instead'
                    if self._open_lazily is False
                    else "use open_store('memory://') instead"
                )
            )
        if self.synchronous not in ('full', 'normal'):
            # The value is not repeated: from a URL, it may be a misplaced secret.
            raise StoreError("synchronous must be 'full' or 'normal'")
        if not (isinstance(self.timeout, int | float) and 0 <= self.timeout < math.inf):
            raise StoreError(f'timeout must be a number of seconds, 0 or more, got {self.timeout!r}')
        if not self._open_lazily:
            self._conn = self._open()
            self._opened = True
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
            raise StoreError(f'cannot open {self._kind} {self._where}: {e}', path=self._where) from e
        try:
            mode = self._journal_mode_wal(conn)
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
                raise StoreError(f'cannot open {self._kind} {self._where}: {e}', path=self._where) from e
            raise
        return conn

    def _journal_mode_wal(self, conn: sqlite3.Connection) -> str:
        """Switch to WAL, waiting up to `timeout` while another connection holds the file.

        SQLite does not call its busy handler when switching journal modes: two workers opening a
        fresh file at once got 'database is locked' at once (about one time in seven), whatever the
        timeout.
        """
        deadline = time.monotonic() + self.timeout
        pause = 0.005
        while True:
            try:
                return str(conn.execute('PRAGMA journal_mode=WAL').fetchone()[0])
            except sqlite3.OperationalError as e:
                if 'locked' not in str(e) and 'busy' not in str(e):
                    raise
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.1)

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
            raise StoreError(f'{type(self).__name__}({self._where!r}) is closed', path=self._where)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(self._locked, fn, *args))

    def _locked(self, fn: Callable[..., _T], *args: Any) -> _T:
        with self._lock:
            if self._closed:
                raise StoreError(f'{type(self).__name__}({self._where!r}) is closed', path=self._where)
            if not self._opened:
                self._conn = self._open()
                self._opened = True
            try:
                return fn(*args)
            except sqlite3.Error as e:
                raise StoreError(f'{self._where}: {e}', path=self._where) from e

    def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
        conn = self._conn
        # IMMEDIATE takes the write lock up front, so what the body reads cannot change before it
        # writes, even from another process.
        conn.execute('BEGIN IMMEDIATE')
        try:
            result = body(conn)
        except BaseException:
            conn.execute('ROLLBACK')
            raise
        conn.execute('COMMIT')
        return result

    async def close(self) -> None:
        """Release the store; later calls raise `StoreError`. Closing twice is harmless."""
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
                if self._opened:
                    self._conn.close()

    async def aclose(self) -> None:
        """The same as `close`: release the store (the name pydantic-ai's and asyncio's resources use)."""
        await self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- artifacts (ArtifactStore) ---

    async def get_artifact(self, namespace: str, key: str) -> Artifact | None:
        """The artifact under `key`, or `None`."""
        return (await self.get_artifacts(namespace, [key])).get(key)

    async def get_artifacts(self, namespace: str, keys: Sequence[str]) -> dict[str, Artifact]:
        """The artifacts under `keys` that exist, by key, read in one query."""
        check_id(namespace, 'artifact namespace')
        wanted = check_keys(namespace, keys)
        if not wanted:
            return {}
        return await self._run(self._get_artifacts_sync, namespace, wanted)

    def _get_artifacts_sync(self, namespace: str, keys: list[str]) -> dict[str, Artifact]:
        found: dict[str, Artifact] = {}
        # In chunks: SQLite limits the number of parameters of one statement.
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            rows = self._conn.execute(
                'SELECT key, value, meta, conversation_id, updated_at FROM artifacts '
                f'WHERE namespace = ? AND key IN ({", ".join("?" * len(chunk))})',
                (namespace, *chunk),
            ).fetchall()
            for key, value, meta, owner, updated_at in rows:
                found[key] = self._artifact(namespace, key, value, meta, owner, updated_at)
        return {key: found[key] for key in keys if key in found}

    def _artifact(
        self, namespace: str, key: str, value: object, meta: object, owner: object, updated_at: float
    ) -> Artifact:
        try:
            if not isinstance(value, str) or not (meta is None or isinstance(meta, str)):
                raise TypeError('value and meta must be TEXT')
            decoded = decode_meta(meta)
        except (ValueError, TypeError) as e:
            raise StoreError(
                f'{self._where}: artifact {namespace!r}/{key!r} is corrupt: {e}', path=self._where
            ) from e
        return Artifact(
            namespace, key, value, decoded, None if owner is None else str(owner), utc(updated_at)
        )

    async def put_artifacts(
        self,
        namespace: str,
        values: Mapping[str, str],
        *,
        meta: dict[str, Any] | None = None,
        conversation_id: str | None = None,
    ) -> None:
        """Store every `key -> value` in one transaction, replacing earlier values (and their meta and owner)."""
        check_id(namespace, 'artifact namespace')
        check_values(namespace, values)
        if conversation_id is not None:
            check_id(conversation_id, 'conversation id')
        meta_text = encode_meta(f'artifacts {namespace!r}', meta)
        rows = [(namespace, key, value, meta_text, conversation_id) for key, value in values.items()]
        if rows:
            await self._run(self._put_artifacts_sync, rows)

    def _put_artifacts_sync(self, rows: list[tuple[str, str, str, str | None, str | None]]) -> None:
        def body(conn: sqlite3.Connection) -> None:
            now = time.time()
            conn.executemany(
                'INSERT OR REPLACE INTO artifacts (namespace, key, value, meta, conversation_id, updated_at) '
                'VALUES (?, ?, ?, ?, ?, ?)',
                [(*row, now) for row in rows],
            )

        self._write(body)

    async def delete_artifacts(
        self, namespace: str, keys: Sequence[str] | None = None, *, conversation_id: str | None = None
    ) -> int:
        """Delete `keys` (default: every key) of the namespace, only those of `conversation_id` if given; return how many."""
        check_id(namespace, 'artifact namespace')
        wanted = None if keys is None else check_keys(namespace, keys)
        return await self._run(self._delete_artifacts_sync, namespace, wanted, conversation_id)

    def _delete_artifacts_sync(self, namespace: str, keys: list[str] | None, owner: str | None) -> int:
        owner_clause = '' if owner is None else ' AND conversation_id = ?'
        owner_args: tuple[str, ...] = () if owner is None else (owner,)

        def body(conn: sqlite3.Connection) -> int:
            if keys is None:
                cursor = conn.execute(
                    f'DELETE FROM artifacts WHERE namespace = ?{owner_clause}', (namespace, *owner_args)
                )
                return cursor.rowcount
            deleted = 0
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                cursor = conn.execute(
                    f'DELETE FROM artifacts WHERE namespace = ? AND key IN ({", ".join("?" * len(chunk))})'
                    f'{owner_clause}',
                    (namespace, *chunk, *owner_args),
                )
                deleted += cursor.rowcount
            return deleted

        return self._write(body)

    async def artifact_keys(
        self, namespace: str, *, conversation_id: str | None = None, prefix: str = ''
    ) -> list[str]:
        """The keys of the namespace (those of `conversation_id`, those starting with `prefix`), sorted."""
        check_id(namespace, 'artifact namespace')
        return await self._run(self._artifact_keys_sync, namespace, conversation_id, prefix)

    def _artifact_keys_sync(self, namespace: str, owner: str | None, prefix: str) -> list[str]:
        rows = self._conn.execute(
            'SELECT key FROM artifacts WHERE namespace = ? AND (? IS NULL OR conversation_id = ?) '
            'AND substr(key, 1, ?) = ? ORDER BY key',
            (namespace, owner, owner, len(prefix), prefix),
        ).fetchall()
        return [str(key) for (key,) in rows]
