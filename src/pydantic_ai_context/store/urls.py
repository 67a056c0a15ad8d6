"""`open_store(url)`: a ready conversation store from a URL (`sqlite:///…`, `postgresql://…`, `memory://`)."""

from __future__ import annotations

import os
import urllib.parse
from typing import TYPE_CHECKING, Any, Final

from ..errors import StoreError
from ._compat import require_conversation_store
from ._redact import redact_url

if TYPE_CHECKING:
    from .conversations_memory import MemoryConversationStore
    from .conversations_postgres import PostgresConversationStore
    from .conversations_sqlite import SqliteConversationStore

__all__ = ('DEFAULT_STORE_URL', 'open_store')

DEFAULT_STORE_URL: Final = 'sqlite:///conversations.db'
"""What `open_store()` opens when neither an argument nor `PYDANTIC_AI_CONTEXT_STORE_URL` names a store:
`conversations.db` in the current directory."""

_SQLITE_OPTIONS: Final = {'synchronous': str, 'timeout': float}


def open_store(
    url: str | None = None, **options: Any
) -> SqliteConversationStore | PostgresConversationStore | MemoryConversationStore:
    """The conversation store a URL names, ready to use; it connects on its first call, not here.

    - `sqlite:///relative/path.db`, `sqlite:////absolute/path.db`, `sqlite:///~/path.db` (in the
      home directory): `SqliteConversationStore`, the default for one process (query options
      `?synchronous=normal`, `?timeout=10`).
    - `postgresql://user:password@host:port/db?sslmode=…` (or `postgres://`): `PostgresConversationStore`,
      for several workers or machines; any libpq URL works, a Unix socket too (`?host=/run/postgresql`).
    - `memory://`: `MemoryConversationStore`, gone with the process.

    Without `url`, `PYDANTIC_AI_CONTEXT_STORE_URL` is used, else `DEFAULT_STORE_URL`. Keyword
    `options` go to the store's constructor (e.g. `max_size=20` for PostgreSQL). Release the store
    with `await store.aclose()` (or `async with open_store(...) as store:`). Raises `StoreError` at
    once for a URL it does not understand (the way SQLite, or libpq for PostgreSQL, reads it), and
    `ImportError` on a pydantic-ai older than 2.66. No message, `repr` or log line shows the URL's
    password or other secrets (`store._redact.redact_url`).

    Example:
        ```python {requires="2.66"}
        import asyncio
        import tempfile

        from pydantic_ai import Agent
        from pydantic_ai.conversation import Conversation
        from pydantic_ai.models.test import TestModel
        from pydantic_ai_context import open_store


        async def main() -> None:
            url = f'sqlite:///{tempfile.mkdtemp()}/chat.db'  # or 'postgresql://app@db/chat', or 'memory://'
            agent = Agent(TestModel(custom_output_text='Hi there'))
            async with open_store(url) as store:
                conversation = await store.load('chat-1') or Conversation(conversation_id='chat-1')
                await store.save(await agent.run('Hello', conversation=conversation))
                assert [r.conversation_id for r in await store.list_conversations()] == ['chat-1']


        asyncio.run(main())
        ```
    """
    require_conversation_store('open_store')
    if url is None:
        from ..settings import ContextSettings

        stored = ContextSettings.load().store_url
        url = (stored.get_secret_value() if stored is not None else '') or DEFAULT_STORE_URL
    if not isinstance(url, str):
        raise StoreError(f'a store URL must be a str, got {type(url).__name__}')
    scheme = url.partition(':')[0].lower()
    if scheme == 'memory':
        from .conversations_memory import MemoryConversationStore

        if url.rstrip('/') != 'memory:' or options:
            raise StoreError("a memory store takes no user, host, path or options: use 'memory://'")
        return MemoryConversationStore()
    if scheme == 'sqlite':
        from .conversations_sqlite import SqliteConversationStore

        path, sqlite_options = _sqlite_url(url)
        return SqliteConversationStore(path, **{**sqlite_options, **options})
    if scheme in ('postgresql', 'postgres'):
        from .conversations_postgres import PostgresConversationStore

        return PostgresConversationStore(url, **options)
    raise StoreError(
        f"unknown store URL {redact_url(url)!r}: use 'sqlite:///path.db', 'postgresql://user@host/db' or 'memory://'"
    )


def _sqlite_url(url: str) -> tuple[str, dict[str, Any]]:
    shown = redact_url(url)
    parts: urllib.parse.SplitResult | None
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # raised below, outside the handler: no context quoting the URL
        parts = None
    if parts is None:
        raise StoreError(
            f'unparsable SQLite URL {shown!r}: write sqlite:///relative.db or sqlite:////abs/path.db'
        )
    if parts.netloc:
        raise StoreError(
            f'SQLite URL {shown!r} names a host; write sqlite:///relative.db or sqlite:////abs/path.db'
        )
    if parts.fragment or url.endswith('#'):
        raise StoreError(f"SQLite URL {shown!r} holds a '#': write it as %23 if it is part of the file name")
    path = urllib.parse.unquote(parts.path)
    # sqlite:///x.db is relative (path '/x.db' after the empty host); sqlite:////x.db is absolute.
    path = path[1:] if path.startswith('/') else path
    # sqlite:///~/x.db is in the home directory, as a shell would read it (not a directory named '~').
    path = os.path.expanduser(path) if path.startswith('~') else path
    if not path or path == ':memory:':
        raise StoreError(f"SQLite URL {shown!r} names no file; for an in-memory store use 'memory://'")
    options: dict[str, Any] = {}
    for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        # Neither an unknown name nor a bad value is repeated: either may be a misplaced secret.
        if name not in _SQLITE_OPTIONS:
            raise StoreError(f'SQLite URL {shown!r}: an unknown option (known: {", ".join(_SQLITE_OPTIONS)})')
        try:
            options[name] = _SQLITE_OPTIONS[name](value)
        except ValueError:  # raised below, outside the handler: its context would quote the value
            options[name] = None
        if options[name] is None:
            raise StoreError(f'SQLite URL {shown!r}: the value of option {name} is invalid')
    return path, options
