"""`MemoryStore`: the default `SessionStore`, a dict that is gone with the process."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage

from ..errors import StoreError
from ._codec import check_id, decode_messages, decode_meta, encode_messages, encode_meta, utc
from .artifacts import Artifact, ArtifactStore, MemoryArtifacts
from .sessions import SessionInfo, SessionStore, SummaryRecord

__all__ = ('MemoryStore',)


@dataclass
class _MemorySession:
    created_at: float
    updated_at: float
    rows: list[bytes] = field(default_factory=list)


@dataclass(eq=False)
class MemoryStore(SessionStore, ArtifactStore):
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
    _artifacts: MemoryArtifacts = field(default_factory=MemoryArtifacts, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError('MemoryStore is closed')

    async def append(self, session_id: str, messages: Sequence[ModelMessage]) -> int:
        check_id(session_id, 'session id')
        rows = encode_messages(session_id, messages)
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
        check_id(session_id, 'session id')
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            rows = [] if session is None else list(session.rows)
        return decode_messages(session_id, enumerate(rows))

    async def replace(self, session_id: str, messages: Sequence[ModelMessage]) -> None:
        check_id(session_id, 'session id')
        rows = encode_messages(session_id, messages)
        with self._lock:
            self._check_open()
            now = time.time()
            session = self._sessions.setdefault(session_id, _MemorySession(now, now))
            session.rows = rows
            session.updated_at = now

    async def clear(self, session_id: str) -> None:
        check_id(session_id, 'session id')
        with self._lock:
            self._check_open()
            session = self._sessions.get(session_id)
            if session is not None:
                session.rows = []
                session.updated_at = time.time()

    async def delete(self, session_id: str) -> None:
        check_id(session_id, 'session id')
        with self._lock:
            self._check_open()
            self._sessions.pop(session_id, None)
            self._artifacts.delete_owned(session_id)

    async def sessions(self) -> list[SessionInfo]:
        with self._lock:
            self._check_open()
            infos = [
                SessionInfo(sid, len(s.rows), utc(s.created_at), utc(s.updated_at))
                for sid, s in self._sessions.items()
            ]
        return sorted(infos, key=_listing_order)

    async def get_summary(self, key: str) -> str | None:
        record = await self.get_summary_record(key)
        return None if record is None else record.summary

    async def get_summary_record(self, key: str) -> SummaryRecord | None:
        check_id(key, 'summary key')
        with self._lock:
            self._check_open()
            entry = self._summaries.get(key)
        if entry is None:
            return None
        summary, meta, created_at = entry
        return SummaryRecord(key, summary, decode_meta(meta), utc(created_at))

    async def put_summary(self, key: str, summary: str, *, meta: dict[str, Any] | None = None) -> None:
        check_id(key, 'summary key')
        if not isinstance(summary, str):
            raise StoreError(f'summary {key!r} must be a str, got {type(summary).__name__}')
        meta_text = encode_meta(f'summary {key!r}', meta)
        with self._lock:
            self._check_open()
            self._summaries[key] = (summary, meta_text, time.time())

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            self._sessions.clear()
            self._summaries.clear()
            self._artifacts.clear()

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


def _listing_order(info: SessionInfo) -> tuple[float, str]:
    return (-info.updated_at.timestamp(), info.session_id)
