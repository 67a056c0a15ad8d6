"""A session's summaries in its store: the store-backed summary cache and the index of what a session uses.

On a `SessionStore` (`MemoryStore`, `SqliteStore`) summaries go through `get_summary` /
`put_summary`, and a session's index is the summary under `summary_index_key(session_id)`. On any
other `ArtifactStore` (the conversation stores) summaries are artifacts in namespace `'summaries'`
(shared, keyed by the digest of the span they cover) and the index is the artifact
`'session-summaries'/session_id`, owned by the conversation so it is deleted with it. A store
that is neither keeps no summaries: they live only in the profile's in-memory cache.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Final

from ..errors import StoreError
from ..policies.summarize import SummaryCache
from ..store import ArtifactStore, SessionStore

__all__ = (
    'SESSION_SUMMARIES_NAMESPACE',
    'SUMMARIES_NAMESPACE',
    'SUMMARY_INDEX_PREFIX',
    'StoreSummaryCache',
    'SummaryIndex',
    'summary_index_key',
)

logger = logging.getLogger('pydantic_ai_context.session')

SUMMARY_INDEX_PREFIX: Final = 'pydantic_ai_context/session-summaries/'
SUMMARIES_NAMESPACE: Final = 'summaries'
"""The artifact namespace of cached summaries, keyed by the content digest of the span they cover."""
SESSION_SUMMARIES_NAMESPACE: Final = 'session-summaries'
"""The artifact namespace of each session's index: key = session id, value = a JSON list of summary keys."""
_META: Final = {'source': 'pydantic_ai_context.session'}


def summary_index_key(session_id: str) -> str:
    """The summary-cache key under which a session lists the summary keys its views use (on a `SessionStore`)."""
    return f'{SUMMARY_INDEX_PREFIX}{session_id}'


class StoreSummaryCache:
    """A `SummaryCache` backed by a store: sync reads from memory, writes persisted after each compile.

    `SummarizeWindow` reads its cache synchronously while a store is async, so this adapter keeps
    the summaries it knows in a dict: `preload` fills it from the store before compiling, `put`
    records new summaries there and queues them, and `flush` writes the queue to the store (one
    transaction on an `ArtifactStore`). `ContextSession` does all three for you: it preloads the
    summaries its session used before (its `SummaryIndex`), and flushes after every compile and
    run, so a resumed session, on this worker or another, finds its summaries and pays for none of
    them again. An optional `inner` cache (the policy's own) is read on a miss and written
    through, so summaries shared in memory between profiles stay shared.

    Example:
        ```python
        import asyncio

        from pydantic_ai_context.session import StoreSummaryCache
        from pydantic_ai_context.store import MemoryStore


        async def main() -> None:
            store = MemoryStore()
            cache = StoreSummaryCache(store)
            cache.put('span-digest', 'The user wants a CSV export.')
            assert await cache.flush() == ['span-digest']
            resumed = StoreSummaryCache(store)
            await resumed.preload(['span-digest'])
            assert resumed.get('span-digest') == 'The user wants a CSV export.'


        asyncio.run(main())
        ```
    """

    def __init__(self, store: SessionStore | ArtifactStore, *, inner: SummaryCache | None = None) -> None:
        self.store = store
        self.inner = inner
        self._entries: dict[str, str] = {}
        self._pending: dict[str, str] = {}
        self._used: dict[str, None] = {}
        self._writes = 0

    @property
    def writes(self) -> int | None:
        """Puts and preloads so far, with the inner cache's writes: a `get` answers the same while
        this is unchanged (see `InMemorySummaryCache.writes`); `None` when the inner cache does not
        count its writes."""
        inner = 0
        if self.inner is not None:
            counted = getattr(self.inner, 'writes', None)
            if not isinstance(counted, int) or isinstance(counted, bool):
                return None
            inner = counted
        return self._writes + inner

    @property
    def used(self) -> list[str]:
        """Keys found or stored through this cache, in first-use order (what a resumed session needs)."""
        return list(self._used)

    def get(self, key: str) -> str | None:
        found = self._entries.get(key)
        if found is None and self.inner is not None:
            found = self.inner.get(key)
            if found is not None:
                # Known only in memory so far: persist it, so a resume finds it too.
                self._entries[key] = self._pending[key] = found
        if found is not None:
            self._used[key] = None
        return found

    def put(self, key: str, summary: str) -> None:
        self._writes += 1
        self._entries[key] = self._pending[key] = summary
        self._used[key] = None
        if self.inner is not None:
            self.inner.put(key, summary)

    async def preload(self, keys: Sequence[str]) -> int:
        """Read `keys` from the store into memory (those it has); return how many were found."""
        missing = [key for key in dict.fromkeys(keys) if key not in self._entries]
        found = len(keys) - len(missing)
        loaded: dict[str, str] = {}
        if isinstance(self.store, SessionStore):
            for key in missing:
                summary = await self.store.get_summary(key)
                if summary is not None:
                    loaded[key] = summary
        elif missing:
            artifacts = await self.store.get_artifacts(SUMMARIES_NAMESPACE, missing)
            loaded = {key: artifact.value for key, artifact in artifacts.items()}
        for key, summary in loaded.items():
            self._entries[key] = summary
            self._used[key] = None
        self._writes += len(loaded)
        return found + len(loaded)

    async def flush(self) -> list[str]:
        """Write the summaries stored since the last flush to the store; return their keys."""
        if not self._pending:
            return []
        batch = dict(self._pending)
        if isinstance(self.store, SessionStore):
            for key, summary in batch.items():
                await self.store.put_summary(key, summary, meta=_META)
                self._written(key, summary)
        else:
            await self.store.put_artifacts(SUMMARIES_NAMESPACE, batch, meta=_META)
            for key, summary in batch.items():
                self._written(key, summary)
        return list(batch)

    def _written(self, key: str, summary: str) -> None:
        # Removed only once written (and unchanged since): a failed write is retried by the next flush.
        if self._pending.get(key) == summary:
            del self._pending[key]


class SummaryIndex:
    """The list of summary keys a session's views use, kept in its store so a resume can preload them.

    The index is a cache of a cache: a corrupt one costs summariser calls, never data. So a row
    that does not hold a JSON list of keys is logged (naming the session and the row) and treated
    as empty, and the next compile writes a good one.

    Example:
        ```python
        import asyncio

        from pydantic_ai_context.session import SummaryIndex
        from pydantic_ai_context.store import MemoryStore


        async def main() -> None:
            store = MemoryStore()
            await SummaryIndex(store, 'chat-1').save(['span-digest'])
            assert await SummaryIndex(store, 'chat-1').load() == ['span-digest']


        asyncio.run(main())
        ```
    """

    def __init__(self, store: object, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.keys: dict[str, None] = {}
        self._repair = False

    @property
    def persistent(self) -> bool:
        return isinstance(self.store, SessionStore | ArtifactStore)

    @property
    def row(self) -> str:
        """Where the index is kept, for messages."""
        if isinstance(self.store, SessionStore):
            return f'summary {summary_index_key(self.session_id)!r}'
        return f'artifact {SESSION_SUMMARIES_NAMESPACE!r}/{self.session_id!r}'

    async def load(self) -> list[str]:
        text: str | None = None
        if isinstance(self.store, SessionStore):
            text = await self.store.get_summary(summary_index_key(self.session_id))
        elif isinstance(self.store, ArtifactStore):
            artifact = await self.store.get_artifact(SESSION_SUMMARIES_NAMESPACE, self.session_id)
            text = None if artifact is None else artifact.value
        keys = [] if text is None else self._parse(text)
        self.keys = dict.fromkeys(keys)
        return keys

    def _parse(self, text: str) -> list[str]:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as e:
            return self._corrupt(f'it is not JSON ({e})')
        if not isinstance(value, list):
            return self._corrupt(f'it holds a JSON {type(value).__name__}, not a list of keys')
        keys = [key for key in value if isinstance(key, str) and key]
        if len(keys) != len(value):
            self._corrupt(f'{len(value) - len(keys)} of its {len(value)} items are not keys', keep=len(keys))
        return keys

    def _corrupt(self, problem: str, *, keep: int = 0) -> list[str]:
        self._repair = True
        logger.warning(
            'session %r: the summary index (%s) is corrupt: %s; %s, and the next compile rewrites it',
            self.session_id,
            self.row,
            problem,
            f'keeping the {keep} valid keys' if keep else 'ignoring it (summaries may be paid for again)',
        )
        return []

    async def save(self, used: Sequence[str]) -> None:
        """Add `used` to the index, writing it only when it grew (or was corrupt)."""
        if not self.persistent or (set(used) <= self.keys.keys() and not self._repair):
            return
        keys = {**self.keys, **dict.fromkeys(used)}
        text = json.dumps(list(keys))
        if isinstance(self.store, SessionStore):
            await self.store.put_summary(
                summary_index_key(self.session_id),
                text,
                meta={'kind': 'session-summary-index', 'session_id': self.session_id},
            )
        elif isinstance(self.store, ArtifactStore):
            await self.store.put_artifacts(
                SESSION_SUMMARIES_NAMESPACE, {self.session_id: text}, conversation_id=self.session_id
            )
        else:  # pragma: no cover - guarded by `persistent`
            raise StoreError('the store keeps no summaries')
        self.keys = keys
        self._repair = False
