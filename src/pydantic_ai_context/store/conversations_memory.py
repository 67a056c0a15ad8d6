"""`MemoryConversationStore`: pydantic-ai's in-memory conversation store, with artifacts, for tests and one-off runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord, InMemoryConversationStore

from ..errors import StoreError
from ._codec import check_id
from ._conversations import encode_entries, encode_record
from .artifacts import Artifact, ArtifactStore, MemoryArtifacts

__all__ = ('MemoryConversationStore',)


class MemoryConversationStore(InMemoryConversationStore, ArtifactStore):
    """pydantic-ai's `InMemoryConversationStore` plus this package's artifacts: gone when the process ends.

    What `open_store('memory://')` returns. It behaves as pydantic-ai's own in-memory store (that
    is the reference the SQLite and PostgreSQL stores are tested against), and refuses what they
    cannot store (ids that are not UTF-8 text, messages that do not serialize) with the same
    `StoreError`, so a test on memory fails where production would. Artifacts owned by a
    conversation are deleted with it. `aclose` forgets everything, and later calls raise
    `StoreError`, as on the database stores. Needs pydantic-ai 2.66 or later.

    Example:
        ```python {requires="2.66"}
        import asyncio

        from pydantic_ai import Agent
        from pydantic_ai.conversation import Conversation
        from pydantic_ai.models.test import TestModel
        from pydantic_ai_context.store import MemoryConversationStore


        async def main() -> None:
            store = MemoryConversationStore()
            agent = Agent(TestModel(custom_output_text='Hello!'))
            conversation = await store.load('chat-1') or Conversation(conversation_id='chat-1')
            await store.save(await agent.run('Hi', conversation=conversation))
            await store.put_artifacts('notes', {'greeting': 'said hello'}, conversation_id='chat-1')
            await store.delete('chat-1')
            assert await store.load('chat-1') is None
            assert await store.get_artifact('notes', 'greeting') is None  # owned, so deleted with it


        asyncio.run(main())
        ```
    """

    def __init__(self) -> None:
        super().__init__()
        self._artifacts = MemoryArtifacts()
        self._closed = False

    def _check_open(self) -> None:
        # Like the database stores: a closed store is an error, not a fresh empty one.
        if self._closed:
            raise StoreError('MemoryConversationStore is closed')

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        self._check_open()
        return await super().read_records(scope=scope, limit=limit)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        self._check_open()
        return await super().read_entry(entry_id)

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        self._check_open()
        # The same checks as the database stores, so memory fails where they would.
        encode_record(record)
        encode_entries(record.conversation_id, new_entries)
        await super().write_record(record, new_entries=new_entries, expected_revision=expected_revision)

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        self._check_open()
        check_id(conversation_id, 'conversation id')
        return await super().read_record(conversation_id)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        self._check_open()
        await super().delete_record(conversation_id, expected_revision=expected_revision)
        self._artifacts.delete_owned(conversation_id)

    async def aclose(self) -> None:
        """Forget everything; later calls raise `StoreError`. Closing twice is harmless."""
        self._closed = True
        self._records.clear()
        self._entries.clear()
        self._artifacts.clear()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- artifacts ---

    async def get_artifact(self, namespace: str, key: str) -> Artifact | None:
        return (await self.get_artifacts(namespace, [key])).get(key)

    async def get_artifacts(self, namespace: str, keys: Sequence[str]) -> dict[str, Artifact]:
        self._check_open()
        return self._artifacts.get(namespace, keys)

    async def put_artifacts(
        self,
        namespace: str,
        values: Mapping[str, str],
        *,
        meta: dict[str, Any] | None = None,
        conversation_id: str | None = None,
    ) -> None:
        self._check_open()
        self._artifacts.put(namespace, values, meta, conversation_id)

    async def delete_artifacts(
        self, namespace: str, keys: Sequence[str] | None = None, *, conversation_id: str | None = None
    ) -> int:
        self._check_open()
        return self._artifacts.delete(namespace, keys, conversation_id)

    async def artifact_keys(
        self, namespace: str, *, conversation_id: str | None = None, prefix: str = ''
    ) -> list[str]:
        self._check_open()
        return self._artifacts.keys(namespace, conversation_id, prefix)
