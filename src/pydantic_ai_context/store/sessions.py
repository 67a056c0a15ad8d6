"""The `SessionStore` protocol: per-session message logs plus a summary cache, and what it lists.

`MemoryStore` and `SqliteStore` implement it. It predates pydantic-ai's `ConversationStore`
(2.66+) and works on every supported pydantic-ai, 1.x included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from pydantic_ai.messages import ModelMessage

__all__ = ('SessionInfo', 'SessionStore', 'SummaryRecord')


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
