"""`PostgresConversationStore`: pydantic-ai's `ConversationStore` in PostgreSQL, shared by workers and machines.

The driver is psycopg 3 with psycopg_pool (the `postgres` extra): typed, it takes the connection
URLs and settings libpq takes (`PG*` variables, `sslmode`, Unix sockets), and its pool checks a
connection before lending it, so a database restart costs the calls in flight, not the next ones.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)

from ..errors import StoreError
from ._codec import check_id, decode_meta, encode_meta
from ._conversations import MAX_HISTORY, Row, chain, decode_record, encode_entries, encode_record, tips
from ._postgres_connect import first_connection, import_driver, migrate
from ._postgres_sql import COLLECT_ENTRIES, ENTRIES_LOCK, ENTRY_COLUMNS, POSTGRES_MIGRATIONS
from ._redact import redact_url, scrub
from .artifacts import Artifact, ArtifactStore, check_keys, check_values

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

__all__ = ('POSTGRES_MIGRATIONS', 'PostgresConversationStore')


def describe_url(url: str) -> str:
    """The database a URL names, without its password: what errors may show."""
    try:
        return _describe(parse_url(url)[1])
    except StoreError:
        return 'PostgreSQL (unparsable URL)'


def _describe(params: Mapping[str, Any]) -> str:
    where = str(params.get('host') or 'localhost')
    if params.get('port'):
        where += f':{params["port"]}'
    user = f'{params["user"]}@' if params.get('user') else ''
    return f'PostgreSQL {user}{where}/{params.get("dbname", "")}'


_HOW: Final = (
    "write postgresql://user:password@host:port/db (percent-encode '/', '?', '#', '@' and ':' in a "
    'user or password: %2F, %3F, %23, %40, %3A) or libpq key=value pairs'
)


def parse_url(url: str) -> tuple[str, dict[str, Any]]:
    """(the libpq connection string the pool gets, its parameters) for a PostgreSQL URL or conninfo
    string, normalised (the scheme lower-case) and checked the way libpq reads it. `StoreError`
    for one it cannot read, at once, naming it without its secrets (`_redact.redact_url`)."""
    psycopg, _ = import_driver()
    if not isinstance(url, str):
        raise StoreError(f'a PostgreSQL URL must be a str, got {type(url).__name__}')
    text = url.strip()
    scheme, sep, rest = text.partition('://')
    if sep and scheme.isascii() and scheme.replace('+', '').isalnum():
        if scheme.lower() not in ('postgresql', 'postgres'):
            raise StoreError(f'{redact_url(url)!r} is not a PostgreSQL URL: {_HOW}')
        userinfo = rest.rpartition('@')[0] if '@' in rest else ''
        if any(c in userinfo for c in '/?#@'):  # libpq would read a password's tail as the host
            raise StoreError(
                f'PostgreSQL URL {redact_url(url)!r}: its user or password holds a character that ends '
                f'that part of a URL; {_HOW}'
            )
        text = f'{scheme.lower()}://{rest}'
    elif text and '=' not in text:
        raise StoreError(f'unparsable PostgreSQL URL {redact_url(url)!r}: {_HOW}')
    params: dict[str, Any] | None
    try:
        params = psycopg.conninfo.conninfo_to_dict(text)
    except psycopg.Error:  # its message quotes the string, password and all: raised outside the handler
        params = None
    if params is None:
        raise StoreError(f'unparsable PostgreSQL URL {redact_url(url)!r}: {_HOW}')
    for port in str(params.get('port') or '').split(','):
        if port and not port.isdigit():
            raise StoreError(f'PostgreSQL URL {redact_url(url)!r}: the port must be a number; {_HOW}')
    return psycopg.conninfo.make_conninfo(**params), params


@dataclass(eq=False)
class PostgresConversationStore(ConversationStore, ArtifactStore):
    """pydantic-ai's `ConversationStore` in PostgreSQL: one store several workers or machines share.

    Use it as pydantic-ai documents (`load`, `save`, `branch`, `fork`, `list_conversations`,
    `delete`). Each `save` is one transaction, and the revision check is in the database (an
    `UPDATE … WHERE revision = …`, or an insert that must not find the conversation), so of two
    writers that loaded the same revision exactly one wins and the other gets pydantic-ai's
    `ConversationConflict` (load again and retry). `read_history` is one recursive query. A
    committed save is as durable as your server makes it.

    Constructing it connects to nothing: the connection pool opens, and the tables are created
    or migrated (schema version in `pydantic_ai_context_schema`; a newer schema is refused), on
    the first call. `await store.aclose()` closes the pool. A lost connection or an unreachable
    server raises `StoreError` naming the database (never its password); the pool checks each
    connection before use, so after a server restart the next call works. A save whose commit
    was cut off says so: it may or may not be stored, and saving again reports
    `ConversationConflict` if it was. `delete` removes the record, the artifacts it owns, and the
    messages no other conversation reaches. It is also an `ArtifactStore`. Needs pydantic-ai 2.66
    or later and the `postgres` extra (`pip install "pydantic-ai-context[postgres]"`).

    Example:
        ```python {requires="2.66"}
        from pydantic_ai_context import open_store
        from pydantic_ai_context.store import PostgresConversationStore

        # Connects lazily: nothing happens until the first await on the store.
        store = open_store('postgresql://app@db.internal/chat')
        assert isinstance(store, PostgresConversationStore)
        assert 'app@db.internal' in store.where
        ```
    """

    url: str = field(repr=False)
    """A libpq connection URL or string (`postgresql://user:password@host:port/db?sslmode=require`);
    never shown: messages and `repr` name the database by `where`."""
    _: KW_ONLY
    min_size: int = 1
    """Connections the pool keeps open."""
    max_size: int = 10
    """Connections the pool opens at most; more concurrent calls wait for one."""
    timeout: float = 10.0
    """Seconds a call waits for a connection (the server down, the pool exhausted) before `StoreError`."""
    migrations: Sequence[str] = field(default=POSTGRES_MIGRATIONS, repr=False)
    """The upgrade chain, applied on first use; `len(migrations)` is the version this store expects."""

    _pool: AsyncConnectionPool[Any] | None = field(default=None, init=False, repr=False)
    _opening: asyncio.Lock | None = field(default=None, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self._conninfo: str
        self._conninfo, params = parse_url(self.url)
        self.where: str = _describe(params)
        """The database, for messages: user, host, port and name, never the password."""

    def __repr__(self) -> str:
        return (
            f'{type(self).__name__}(where={self.where!r}, min_size={self.min_size!r}, '
            f'max_size={self.max_size!r}, timeout={self.timeout!r})'
        )

    # --- connections ---

    async def _ready_pool(self) -> AsyncConnectionPool[Any]:
        if self._closed:
            raise StoreError(f'{self.where}: the store is closed', path=self.where)
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                pool = await self._open_pool()
                if self._closed:  # `aclose` ran while the pool opened: it must not outlive the store
                    await pool.close()
                    raise StoreError(f'{self.where}: the store is closed', path=self.where)
                self._pool = pool
        return self._pool

    async def _open_pool(self) -> AsyncConnectionPool[Any]:
        psycopg, psycopg_pool = import_driver()
        await first_connection(self._conninfo, url=self.url, where=self.where, timeout=self.timeout)
        pool: AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
            self._conninfo,
            min_size=self.min_size,
            max_size=self.max_size,
            timeout=self.timeout,
            open=False,
            kwargs={'autocommit': True},
            check=psycopg_pool.AsyncConnectionPool.check_connection,
            name='pydantic-ai-context',
        )
        try:
            await pool.open(wait=True, timeout=self.timeout)
            async with pool.connection() as conn:
                await migrate(conn, self.migrations, where=self.where)
        except BaseException as e:
            await pool.close()
            if isinstance(e, psycopg.Error | psycopg_pool.PoolTimeout):
                reason = scrub(str(e), self.url)
                raise StoreError(f'{self.where}: cannot connect: {reason}', path=self.where) from None
            raise
        return pool

    @contextlib.asynccontextmanager
    async def _connection(self, doing: str) -> AsyncIterator[AsyncConnection[Any]]:
        psycopg, psycopg_pool = import_driver()
        pool = await self._ready_pool()
        try:
            async with pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as e:
            raise StoreError(
                f'{self.where}: {doing}: no connection within {self.timeout:g}s ({scrub(str(e), self.url)})',
                path=self.where,
            ) from None
        except psycopg.Error as e:
            raise StoreError(
                f'{self.where}: {doing} failed: {type(e).__name__}: {scrub(str(e), self.url)}',
                path=self.where,
            ) from e

    async def aclose(self) -> None:
        """Close the connection pool; later calls raise `StoreError`. Closing twice is harmless."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- reading ---

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        check_id(conversation_id, 'conversation id')
        async with self._connection(f'reading conversation {conversation_id!r}') as conn:
            cursor = await conn.execute(
                'SELECT record FROM pydantic_ai_conversations WHERE conversation_id = %s', (conversation_id,)
            )
            row = await cursor.fetchone()
        return None if row is None else decode_record(conversation_id, row[0], where=self.where)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        async with self._connection('listing conversations') as conn:
            if scope is None:
                cursor = await conn.execute(
                    'SELECT conversation_id, record FROM pydantic_ai_conversations '
                    'ORDER BY updated_at DESC, conversation_id LIMIT %s',
                    (limit,),
                )
            else:
                cursor = await conn.execute(
                    'SELECT conversation_id, record FROM pydantic_ai_conversations WHERE scope = %s '
                    'ORDER BY updated_at DESC, conversation_id LIMIT %s',
                    (scope, limit),
                )
            rows = await cursor.fetchall()
        return [decode_record(cid, raw, where=self.where) for cid, raw in rows]

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        check_id(entry_id, 'entry id')
        return (await self.read_history(entry_id, limit=1))[0]

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The entries from the first up to `head_id` (or its last `limit`), oldest first, in one query."""
        if head_id is None or limit == 0:
            return []
        check_id(head_id, 'entry id')
        depth = MAX_HISTORY if limit is None else min(limit, MAX_HISTORY)
        async with self._connection(f'reading the history of entry {head_id!r}') as conn:
            cursor = await conn.execute(
                f"""
                WITH RECURSIVE walk(entry_id, parent_id, depth) AS (
                    SELECT entry_id, parent_id, 1 FROM pydantic_ai_conversation_entries WHERE entry_id = %s
                    UNION ALL
                    SELECT e.entry_id, e.parent_id, w.depth + 1
                    FROM pydantic_ai_conversation_entries e JOIN walk w ON e.entry_id = w.parent_id
                    WHERE w.depth < %s
                )
                SELECT {', '.join(f'e.{c}' for c in ENTRY_COLUMNS.split(', '))}
                FROM walk w JOIN pydantic_ai_conversation_entries e ON e.entry_id = w.entry_id
                ORDER BY w.depth
                """,
                (head_id, depth),
            )
            rows: list[Row] = await cursor.fetchall()
        return chain(head_id, rows, limit, where=self.where)

    # --- writing ---

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        cid = record.conversation_id
        data = encode_record(record).decode()
        rows = [(*row[:4], row[4].decode()) for row in encode_entries(cid, new_entries)]
        values = (record.revision, record.head_id, record.scope, record.updated_at, data)
        committing = False
        try:
            async with self._connection(f'saving conversation {cid!r}') as conn, conn.transaction():
                new_ids = {row[0] for row in rows}
                new_tips = tips(record)
                # One pipeline: every statement goes out at once and the checks are read at the end
                # (a failed check rolls the whole transaction back), so a save costs two round trips.
                async with conn.pipeline():
                    await conn.execute('SELECT pg_advisory_xact_lock_shared(%s)', (ENTRIES_LOCK,))
                    # The revision check is the write itself: the row lock makes a concurrent writer
                    # wait, then find the revision changed and update nothing.
                    if expected_revision is None:
                        written = await conn.execute(
                            'INSERT INTO pydantic_ai_conversations '
                            '(revision, head_id, scope, updated_at, record, conversation_id) '
                            'VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (conversation_id) DO NOTHING',
                            (*values, cid),
                        )
                    else:
                        written = await conn.execute(
                            'UPDATE pydantic_ai_conversations SET revision = %s, head_id = %s, scope = %s, '
                            'updated_at = %s, record = %s WHERE conversation_id = %s AND revision = %s',
                            (*values, cid, expected_revision),
                        )
                    head = None
                    if record.head_id is not None and record.head_id not in new_ids:
                        head = await conn.execute(
                            'SELECT 1 FROM pydantic_ai_conversation_entries WHERE entry_id = %s',
                            (record.head_id,),
                        )
                    if rows:
                        async with conn.cursor() as many:
                            await many.executemany(
                                f'INSERT INTO pydantic_ai_conversation_entries ({ENTRY_COLUMNS}) '
                                'VALUES (%s, %s, %s, %s, %s)',
                                rows,
                            )
                    await conn.execute(
                        'DELETE FROM pydantic_ai_conversation_tips WHERE conversation_id = %s '
                        'AND NOT (entry_id = ANY(%s))',
                        (cid, new_tips),
                    )
                    await conn.execute(
                        'INSERT INTO pydantic_ai_conversation_tips (conversation_id, entry_id) '
                        'SELECT %s, unnest(%s::text[]) ON CONFLICT DO NOTHING',
                        (cid, new_tips),
                    )
                if written.rowcount != 1:
                    raise ConversationConflict(cid)
                # A concurrent delete released the entry a fork points at.
                if head is not None and await head.fetchone() is None:
                    raise ConversationConflict(cid)
                committing = True
        except StoreError as e:
            if committing:
                raise StoreError(
                    f'{self.where}: saving conversation {cid!r}: the connection failed while committing, so '
                    'the save may or may not be stored; load the conversation to see (saving it again '
                    f'raises ConversationConflict if it was stored): {e.__cause__ or e}',
                    path=self.where,
                    conversation_id=cid,
                ) from e
            raise StoreError(
                f'{e} (nothing was saved)', path=self.where, conversation_id=cid
            ) from e.__cause__

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Delete the record, the artifacts it owns, and the entries no remaining conversation reaches."""
        check_id(conversation_id, 'conversation id')
        async with self._connection(f'deleting conversation {conversation_id!r}') as conn, conn.transaction():
            # Exclusive: no save may point a fork at an entry while this decides it is unreachable.
            await conn.execute('SELECT pg_advisory_xact_lock(%s)', (ENTRIES_LOCK,))
            cursor = await conn.execute(
                'DELETE FROM pydantic_ai_conversations WHERE conversation_id = %s AND revision = %s',
                (conversation_id, expected_revision),
            )
            if cursor.rowcount != 1:
                raise ConversationConflict(conversation_id)
            await conn.execute(COLLECT_ENTRIES, {'c': conversation_id})
            await conn.execute(
                'DELETE FROM pydantic_ai_conversation_tips WHERE conversation_id = %s', (conversation_id,)
            )
            await conn.execute(
                'DELETE FROM pydantic_ai_artifacts WHERE conversation_id = %s', (conversation_id,)
            )

    # --- artifacts ---

    async def get_artifact(self, namespace: str, key: str) -> Artifact | None:
        return (await self.get_artifacts(namespace, [key])).get(key)

    async def get_artifacts(self, namespace: str, keys: Sequence[str]) -> dict[str, Artifact]:
        check_id(namespace, 'artifact namespace')
        wanted = check_keys(namespace, keys)
        if not wanted:
            return {}
        async with self._connection(f'reading artifacts {namespace!r}') as conn:
            cursor = await conn.execute(
                'SELECT key, value, meta, conversation_id, updated_at FROM pydantic_ai_artifacts '
                'WHERE namespace = %s AND key = ANY(%s)',
                (namespace, wanted),
            )
            rows = await cursor.fetchall()
        found = {row[0]: self._artifact(namespace, *row) for row in rows}
        return {key: found[key] for key in wanted if key in found}

    def _artifact(
        self, namespace: str, key: str, value: bytes, meta: str | None, owner: str | None, at: datetime
    ) -> Artifact:
        try:
            text = bytes(value).decode('utf-8')
            decoded = decode_meta(meta)
        except (ValueError, TypeError) as e:
            raise StoreError(
                f'{self.where}: artifact {namespace!r}/{key!r} is corrupt: {e}', path=self.where
            ) from e
        return Artifact(namespace, key, text, decoded, owner, at.astimezone(UTC))

    async def put_artifacts(
        self,
        namespace: str,
        values: Mapping[str, str],
        *,
        meta: dict[str, Any] | None = None,
        conversation_id: str | None = None,
    ) -> None:
        check_id(namespace, 'artifact namespace')
        check_values(namespace, values)
        if conversation_id is not None:
            check_id(conversation_id, 'conversation id')
        meta_text = encode_meta(f'artifacts {namespace!r}', meta)
        rows = [(namespace, key, value.encode(), meta_text, conversation_id) for key, value in values.items()]
        if not rows:
            return
        async with (
            self._connection(f'writing artifacts {namespace!r}') as conn,
            conn.transaction(),
            conn.cursor() as cursor,
        ):
            await cursor.executemany(
                'INSERT INTO pydantic_ai_artifacts (namespace, key, value, meta, conversation_id, updated_at) '
                'VALUES (%s, %s, %s, %s, %s, now()) ON CONFLICT (namespace, key) DO UPDATE SET '
                'value = excluded.value, meta = excluded.meta, conversation_id = excluded.conversation_id, '
                'updated_at = excluded.updated_at',
                rows,
            )

    async def delete_artifacts(
        self, namespace: str, keys: Sequence[str] | None = None, *, conversation_id: str | None = None
    ) -> int:
        check_id(namespace, 'artifact namespace')
        wanted = None if keys is None else check_keys(namespace, keys)
        async with self._connection(f'deleting artifacts {namespace!r}') as conn:
            cursor = await conn.execute(
                'DELETE FROM pydantic_ai_artifacts WHERE namespace = %s '
                'AND (%s::text[] IS NULL OR key = ANY(%s::text[])) '
                'AND (%s::text IS NULL OR conversation_id = %s::text)',
                (namespace, wanted, wanted, conversation_id, conversation_id),
            )
            return cursor.rowcount

    async def artifact_keys(
        self, namespace: str, *, conversation_id: str | None = None, prefix: str = ''
    ) -> list[str]:
        check_id(namespace, 'artifact namespace')
        async with self._connection(f'listing artifacts {namespace!r}') as conn:
            cursor = await conn.execute(
                'SELECT key FROM pydantic_ai_artifacts WHERE namespace = %s '
                'AND (%s::text IS NULL OR conversation_id = %s::text) AND left(key, %s) = %s '
                'ORDER BY key COLLATE "C"',
                (namespace, conversation_id, conversation_id, len(prefix), prefix),
            )
            return [str(key) for (key,) in await cursor.fetchall()]
