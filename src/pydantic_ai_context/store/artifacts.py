"""Artifacts: small named texts kept beside the conversations, in the same database.

A summary cache, a session's index of the summaries it uses, the originals a read-back tool serves:
each is a namespace of `key -> text` with optional JSON metadata. An artifact may belong to a
conversation (`conversation_id=`): deleting that conversation (or session) deletes it, in the same
transaction. Every store in this package implements `ArtifactStore`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ..errors import StoreError
from ._codec import check_id, decode_meta, encode_meta, utc

__all__ = ('Artifact', 'ArtifactStore', 'MemoryArtifacts')


@dataclass(frozen=True, slots=True)
class Artifact:
    """One stored artifact: a text under `(namespace, key)`, with its metadata and owner.

    Example:
        ```python
        import asyncio

        from pydantic_ai_context.store import MemoryStore


        async def main() -> None:
            store = MemoryStore()
            await store.put_artifacts('originals', {'call_7': 'full tool output'}, conversation_id='chat-1')
            artifact = await store.get_artifact('originals', 'call_7')
            assert artifact is not None and artifact.value == 'full tool output'
            assert artifact.conversation_id == 'chat-1'


        asyncio.run(main())
        ```
    """

    namespace: str
    key: str
    value: str
    meta: dict[str, Any] | None
    """JSON-compatible metadata given to `put_artifacts`."""
    conversation_id: str | None
    """The conversation (or session) it belongs to and is deleted with, or `None` for a shared artifact."""
    updated_at: datetime
    """When it was last put, in UTC."""


@runtime_checkable
class ArtifactStore(Protocol):
    """A `key -> text` side store in namespaces, kept in the same database as the conversations.

    Namespaces keep uses apart: `ContextSession` keeps summaries under `'summaries'` (shared,
    keyed by the content digest of the span they cover) and each session's list of the summaries
    it uses under `'session-summaries'` (owned by the session). A read-back tool can keep the
    originals a compacted view replaced under its own namespace, owned by their conversation.
    Values are text: encode binary data (base64) and structured data (JSON) yourself. `put_artifacts`
    is one transaction; every failure is a `StoreError`.

    Example:
        ```python
        import asyncio

        from pydantic_ai_context.store import ArtifactStore, MemoryStore


        async def main() -> None:
            store: ArtifactStore = MemoryStore()
            await store.put_artifacts('originals', {'a': '1', 'b': '2'}, conversation_id='chat-1')
            assert await store.artifact_keys('originals', conversation_id='chat-1') == ['a', 'b']
            found = await store.get_artifacts('originals', ['a', 'missing'])
            assert list(found) == ['a']
            assert await store.delete_artifacts('originals', conversation_id='chat-1') == 2


        asyncio.run(main())
        ```
    """

    async def get_artifact(self, namespace: str, key: str) -> Artifact | None:
        """The artifact under `key`, or `None`."""
        ...

    async def get_artifacts(self, namespace: str, keys: Sequence[str]) -> dict[str, Artifact]:
        """The artifacts under `keys` that exist, by key, read in one query."""
        ...

    async def put_artifacts(
        self,
        namespace: str,
        values: Mapping[str, str],
        *,
        meta: dict[str, Any] | None = None,
        conversation_id: str | None = None,
    ) -> None:
        """Store every `key -> value` in one transaction, replacing earlier values (and their meta and owner)."""
        ...

    async def delete_artifacts(
        self, namespace: str, keys: Sequence[str] | None = None, *, conversation_id: str | None = None
    ) -> int:
        """Delete `keys` (default: every key) of the namespace, only those of `conversation_id` if given; return how many."""
        ...

    async def artifact_keys(
        self, namespace: str, *, conversation_id: str | None = None, prefix: str = ''
    ) -> list[str]:
        """The keys of the namespace (those of `conversation_id`, those starting with `prefix`), sorted."""
        ...


def check_values(namespace: str, values: Mapping[str, str]) -> None:
    """Refuse keys and values no store can keep, before anything is written."""
    if not isinstance(values, Mapping):
        raise StoreError(f'artifacts {namespace!r}: values must be a mapping of key -> str')
    for key, value in values.items():
        check_id(key, f'artifact key in {namespace!r}')
        if not isinstance(value, str):
            raise StoreError(
                f'artifact {namespace!r}/{key!r}: value must be a str, got {type(value).__name__}'
            )
        try:
            value.encode('utf-8')
        except UnicodeEncodeError as e:
            raise StoreError(
                f'artifact {namespace!r}/{key!r}: value holds a lone surrogate at position {e.start}'
            ) from None


def check_keys(namespace: str, keys: Sequence[str]) -> list[str]:
    if isinstance(keys, str):
        raise StoreError(f'artifacts {namespace!r}: keys must be a sequence of str, not one str')
    return [check_id(key, f'artifact key in {namespace!r}') for key in keys]


@dataclass
class MemoryArtifacts:
    """The artifacts of an in-memory store: a dict behind a lock (the store's async methods call these)."""

    _rows: dict[tuple[str, str], tuple[str, str | None, str | None, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, namespace: str, keys: Sequence[str]) -> dict[str, Artifact]:
        check_id(namespace, 'artifact namespace')
        keys = check_keys(namespace, keys)
        with self._lock:
            rows = {key: self._rows[(namespace, key)] for key in keys if (namespace, key) in self._rows}
        return {
            key: Artifact(namespace, key, value, decode_meta(meta), owner, utc(at))
            for key, (value, meta, owner, at) in rows.items()
        }

    def put(
        self,
        namespace: str,
        values: Mapping[str, str],
        meta: dict[str, Any] | None,
        conversation_id: str | None,
    ) -> None:
        check_id(namespace, 'artifact namespace')
        check_values(namespace, values)
        if conversation_id is not None:
            check_id(conversation_id, 'conversation id')
        meta_text = encode_meta(f'artifacts {namespace!r}', meta)
        now = time.time()
        with self._lock:
            for key, value in values.items():
                self._rows[(namespace, key)] = (value, meta_text, conversation_id, now)

    def delete(self, namespace: str, keys: Sequence[str] | None, conversation_id: str | None) -> int:
        check_id(namespace, 'artifact namespace')
        wanted = None if keys is None else set(check_keys(namespace, keys))
        with self._lock:
            doomed = [
                (ns, key)
                for (ns, key), (_, _, owner, _) in self._rows.items()
                if ns == namespace
                and (wanted is None or key in wanted)
                and (conversation_id is None or owner == conversation_id)
            ]
            for row in doomed:
                del self._rows[row]
        return len(doomed)

    def keys(self, namespace: str, conversation_id: str | None, prefix: str) -> list[str]:
        check_id(namespace, 'artifact namespace')
        with self._lock:
            return sorted(
                key
                for (ns, key), (_, _, owner, _) in self._rows.items()
                if ns == namespace
                and key.startswith(prefix)
                and (conversation_id is None or owner == conversation_id)
            )

    def delete_owned(self, conversation_id: str) -> None:
        """Forget every artifact of a conversation (called when it is deleted)."""
        with self._lock:
            for row in [row for row, (_, _, owner, _) in self._rows.items() if owner == conversation_id]:
                del self._rows[row]

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
