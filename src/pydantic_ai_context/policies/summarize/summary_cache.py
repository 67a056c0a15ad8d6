"""Where summaries are kept: by a digest of the span they cover, so an unchanged span is never summarised twice."""

from __future__ import annotations

import collections
from typing import Protocol, runtime_checkable

__all__ = ('InMemorySummaryCache', 'SummaryCache')


@runtime_checkable
class SummaryCache(Protocol):
    """Where summaries are kept, by the digest of what they cover (a SQLite store implements it too).

    A stored empty string records that the summariser's answer for that key was rejected (empty or
    inflated), so the same span is not sent again.

    Example:
        ```python
        from pydantic_ai_context import profile


        class DictCache:
            def __init__(self) -> None:
                self.summaries: dict[str, str] = {}

            def get(self, key: str) -> str | None:
                return self.summaries.get(key)

            def put(self, key: str, summary: str) -> None:
                self.summaries[key] = summary


        shared = DictCache()  # two profiles sharing it pay for each summary once
        chat = profile('chat', summary_cache=shared)
        long_runs = profile('long_horizon', summary_cache=shared)
        ```
    """

    def get(self, key: str) -> str | None:
        """The summary stored under `key`, or None."""
        ...

    def put(self, key: str, summary: str) -> None:
        """Store `summary` under `key`."""
        ...


class InMemorySummaryCache:
    """A bounded, least-recently-used `SummaryCache` in memory (the default).

    Example:
        ```python
        from pydantic_ai_context.policies.summarize.summary_cache import InMemorySummaryCache

        cache = InMemorySummaryCache(max_entries=2)
        cache.put('a', 'first'); cache.put('b', 'second'); cache.put('c', 'third')
        assert cache.get('a') is None and cache.get('c') == 'third'
        assert cache.writes == 3
        ```

    `writes` counts the puts: what was found (or not) under a key stays true while it is unchanged,
    so `summarize_window` remembers the spans it found no summary for from one compile to the next
    instead of looking every step end up again (a cache without `writes` is asked every time).
    """

    def __init__(self, *, max_entries: int = 256) -> None:
        if max_entries < 1:
            raise ValueError(f'max_entries must be >= 1, got {max_entries}')
        self.max_entries = max_entries
        self._entries: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._writes = 0

    @property
    def writes(self) -> int:
        """How many times `put` was called: a `get` answers the same while this is unchanged."""
        return self._writes

    def get(self, key: str) -> str | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def put(self, key: str, summary: str) -> None:
        self._writes += 1
        self._entries[key] = summary
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
