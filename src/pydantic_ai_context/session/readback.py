"""A session's read-back side store in its own database: the originals its markers name.

Where the log a run's tools read is not whole (pydantic-ai 1.x, where the view replaces the
run's history) the profile keeps the originals its markers stand for in a side store; spans a
view folds into one marker (a finished run's digest, dropped steps, a summary) are kept there on
every version. On a `ContextSession` that side store is the session's own store, under the
artifact namespace `'readback'`, owned by the session (deleted with it): a session resumed by
another process or machine reads back what an earlier one compacted.
"""

from __future__ import annotations

import logging
from typing import Final

from ..errors import StoreError
from ..store import ArtifactStore

__all__ = ('READBACK_NAMESPACE', 'StoreReadbackStore')

logger = logging.getLogger('pydantic_ai_context.session')

READBACK_NAMESPACE: Final = 'readback'
"""The artifact namespace of a session's read-back originals (keyed as `ContextArchive` keys them)."""


class StoreReadbackStore:
    """A `ReadbackStore` backed by a session's store: sync reads from memory, writes persisted after each compile.

    The archive reads and writes synchronously while a store is async, so this adapter keeps what
    it knows in a dict: `preload` fills it with the session's originals, `put` records new ones
    there and queues them, and `flush` writes the queue in one transaction. `ContextSession`
    does all three for you.

    Example:
        ```python
        import asyncio

        from pydantic_ai_context.session_readback import StoreReadbackStore
        from pydantic_ai_context.store import MemoryStore


        async def main() -> None:
            store = MemoryStore()
            side = StoreReadbackStore(store, 'chat-1')
            side.put('result/c1', '{"tool": "read_file", "text": "line 1"}')
            assert await side.flush() == 1
            resumed = StoreReadbackStore(store, 'chat-1')
            await resumed.preload()
            assert resumed.get('result/c1') == '{"tool": "read_file", "text": "line 1"}'


        asyncio.run(main())
        ```
    """

    def __init__(self, store: ArtifactStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self._entries: dict[str, str] = {}
        self._pending: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        return self._entries.get(key)

    def put(self, key: str, value: str) -> None:
        if self._entries.get(key) == value:
            return
        self._entries[key] = value
        self._pending[key] = value

    async def preload(self) -> int:
        """Read the session's originals from the store; returns how many. A store error is logged."""
        try:
            keys = await self.store.artifact_keys(READBACK_NAMESPACE, conversation_id=self.session_id)
            found = await self.store.get_artifacts(READBACK_NAMESPACE, keys) if keys else {}
        except StoreError:
            logger.warning(
                'session %r: could not read its read-back originals', self.session_id, exc_info=True
            )
            return 0
        for key, artifact in found.items():
            self._entries.setdefault(key, artifact.value)
        return len(found)

    async def flush(self) -> int:
        """Write the originals kept since the last flush, in one transaction; returns how many."""
        if not self._pending:
            return 0
        pending, self._pending = self._pending, {}
        try:
            await self.store.put_artifacts(READBACK_NAMESPACE, pending, conversation_id=self.session_id)
        except StoreError:
            self._pending = {**pending, **self._pending}
            logger.warning(
                'session %r: could not store %d read-back originals', self.session_id, len(pending)
            )
            return 0
        return len(pending)
