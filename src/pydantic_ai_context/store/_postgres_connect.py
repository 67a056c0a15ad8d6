"""Connecting `PostgresConversationStore` to its database: the driver, the first connection, the schema migration.

The store holds the pool and calls these once, when it opens: `first_connection` fails at once
on a server that refuses (and waits, until the timeout, for one that is not up yet), and
`migrate` brings the schema to the version the store expects under an advisory lock.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..errors import StoreError
from ._postgres_sql import MIGRATION_LOCK
from ._redact import scrub

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ('first_connection', 'import_driver', 'migrate')


def import_driver() -> tuple[Any, Any]:
    """(psycopg, psycopg_pool), or an `ImportError` naming the extra that installs them."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as e:  # pragma: no cover - the dev extra installs it
        raise ImportError(
            'PostgresConversationStore needs psycopg 3 and psycopg_pool: '
            'pip install "pydantic-ai-context[postgres]"'
        ) from e
    return psycopg, psycopg_pool


# A server that answered and refused (a role or database that does not exist, a wrong password, no
# pg_hba.conf entry) will refuse again: say so at once. These pass with time: wait for them.
_TRANSIENT: Final = ('too many', 'starting up', 'shutting down', 'in recovery', 'not yet accepting')


async def first_connection(conninfo: str, *, url: str, where: str, timeout: float) -> None:
    """Connect once before the pool does: a server that refuses (a wrong role, database or
    password) fails at once naming why, instead of the pool retrying until `timeout` and logging
    each failure; a server that is not up yet is waited for until `timeout`."""
    psycopg, _ = import_driver()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        remaining = deadline - loop.time()
        try:
            conn = await psycopg.AsyncConnection.connect(
                conninfo, connect_timeout=max(2, math.ceil(remaining))
            )
        except psycopg.Error as e:
            reason = scrub(str(e), url).strip() or type(e).__name__
            refused = 'FATAL' in reason and not any(t in reason for t in _TRANSIENT)
            if refused or 'invalid' in reason or deadline - loop.time() <= 0:
                raise StoreError(f'{where}: cannot connect: {reason}', path=where) from None
            await asyncio.sleep(min(0.2, max(0.0, deadline - loop.time())))
            continue
        await conn.close()
        return


async def migrate(conn: AsyncConnection[Any], migrations: Sequence[str], *, where: str) -> None:
    """Bring the schema to version `len(migrations)`, in one transaction under an advisory lock
    (concurrent openers wait); a database at a newer version is refused."""
    target = len(migrations)
    async with conn.transaction():
        await conn.execute('SELECT pg_advisory_xact_lock(%s)', (MIGRATION_LOCK,))
        await conn.execute('CREATE TABLE IF NOT EXISTS pydantic_ai_context_schema (version integer NOT NULL)')
        row = await (await conn.execute('SELECT version FROM pydantic_ai_context_schema')).fetchone()
        if row is None:
            await conn.execute('INSERT INTO pydantic_ai_context_schema (version) VALUES (0)')
        version = 0 if row is None else int(row[0])
        if version > target:
            raise StoreError(
                f'{where} has store schema version {version}, newer than version {target} that this '
                'pydantic-ai-context understands; upgrade pydantic-ai-context to use it',
                path=where,
            )
        while version < target:
            try:
                await conn.execute(migrations[version])
            except Exception as e:
                raise StoreError(
                    f'{where}: migrating the store schema from version {version} to {version + 1} failed: {e}',
                    path=where,
                ) from e
            version += 1
        await conn.execute('UPDATE pydantic_ai_context_schema SET version = %s', (version,))
