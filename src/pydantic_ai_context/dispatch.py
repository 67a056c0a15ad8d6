"""Event dispatch: a profile's events reach its handlers, and a handler that raises never breaks a run.

A `ContextProfile` holds one `EventDispatch`. It keeps the events and the gauge on the profile (and
on the profile a copy records into, see `ContextProfile.recording_into`), sends every event to the
profile's `event_handlers`, and logs a handler that raises: once with its traceback, later at DEBUG.
The handlers run with the profile's incremental state suspended: they are the application's code.

Failures are logged on the `pydantic_ai_context.profiles` logger, the name the documentation gives.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ._scope import suspended
from .events import CompactionEvent, ContextEvent, ContextUsageEvent, EventHandler
from .overhead import RequestOverhead

__all__ = ('EventDispatch', 'EventOwner', 'handler_list', 'only_kind', 'run_events')

# The logger the documentation names for handler failures (the profile's module).
logger = logging.getLogger('pydantic_ai_context.profiles')


class EventOwner(Protocol):
    """What `EventDispatch` reads and writes on the profile it serves."""

    name: str
    event_handlers: Sequence[EventHandler]
    events: collections.deque[CompactionEvent]
    last_usage: ContextUsageEvent | None
    last_overhead: RequestOverhead | None


class EventDispatch:
    """Records a profile's events and gauge, and sends events to its handlers in isolation.

    Example:
        ```python
        import asyncio

        from pydantic_ai_context import CompactionEvent, profile
        from pydantic_ai_context.dispatch import EventDispatch

        seen = []
        p = profile('transparent', context_window=32_000, on_event=seen.append)
        event = CompactionEvent(policy='demo', reason='r', messages_before=2, messages_after=1)
        asyncio.run(EventDispatch().send(p, event))
        assert seen == [event]
        ```
    """

    def __init__(self) -> None:
        # Handlers whose failure was logged with its traceback; later failures log one line at DEBUG.
        self._failed_handlers: set[int] = set()
        # The profile a copy also records into (a session's copy records into the profile it was given).
        self.records_into: tuple[EventOwner, EventDispatch] | None = None
        # Numbers compiles; shared with the profile a copy records into (`record_into`), so the
        # events there never show two compiles with the same id.
        self._compile_ids: Iterator[int] = itertools.count(1)
        self.last_compile_id = 0
        """The id of the latest finished compile (0 before the first)."""

    def next_id(self) -> int:
        """A new compile id (a rejected attempt's event takes one too)."""
        return next(self._compile_ids)

    def record_into(self, original: EventOwner, dispatch: EventDispatch) -> None:
        """Also record into `original` (whose dispatch is `dispatch`), numbering compiles with its counter."""
        self.records_into = (original, dispatch)
        self._compile_ids = dispatch._compile_ids

    def collector(
        self, owner: EventOwner, compile_id: int
    ) -> tuple[list[CompactionEvent], Callable[[CompactionEvent], Awaitable[None]]]:
        """The events of one compile, and the callback the chain reports them to (records and sends)."""
        happened: list[CompactionEvent] = []

        async def on_event(event: CompactionEvent) -> None:
            event = dataclasses.replace(event, profile=owner.name, compile_id=compile_id)
            happened.append(event)
            self.record(owner, event)
            await self.send(owner, event)

        return happened, on_event

    async def send(self, owner: EventOwner, event: ContextEvent) -> None:
        """Send `event` to every handler of `owner`; a handler that raises is logged, never propagated."""
        for handler in owner.event_handlers:
            try:
                # The handler is the application's code: the profile's incremental state is not for it.
                with suspended():
                    result = handler(event)
                    if inspect.isawaitable(result):
                        await result
            except Exception:
                self._handler_failed(owner, handler, event)

    async def deliver(self, owner: EventOwner, events: Iterable[CompactionEvent]) -> None:
        """Record and send events that arose outside a compile (summaries made ahead), as `owner`'s."""
        for event in events:
            event = dataclasses.replace(event, profile=owner.name)
            self.record(owner, event)
            await self.send(owner, event)

    def record(self, owner: EventOwner, event: CompactionEvent) -> None:
        """Keep `event` in `owner.events`, and in the events of the profile `owner` records into."""
        owner.events.append(event)
        if self.records_into is not None:
            original, dispatch = self.records_into
            dispatch.record(original, event)

    def set_gauge(
        self, owner: EventOwner, usage: ContextUsageEvent | None, overhead: RequestOverhead | None
    ) -> None:
        """Keep the latest gauge, on `owner` and on the profile it records into (a session's)."""
        owner.last_usage = usage
        owner.last_overhead = overhead
        if self.records_into is not None:
            original, dispatch = self.records_into
            dispatch.set_gauge(original, usage, overhead)

    def _handler_failed(self, owner: EventOwner, handler: EventHandler, event: ContextEvent) -> None:
        name = _handler_name(handler)
        if id(handler) in self._failed_handlers:
            logger.debug('event handler %s raised again on a %s event', name, event.kind, exc_info=True)
            return
        self._failed_handlers.add(id(handler))
        logger.exception(
            'event handler %s of profile %r raised on a %s event; the run goes on (further errors '
            'of this handler are logged at DEBUG)',
            name,
            owner.name,
            event.kind,
        )


def run_events(events: Iterable[CompactionEvent], run_id: str | None) -> list[CompactionEvent]:
    """The events of agent run `run_id` (default: the run of the newest event)."""
    kept = list(events)
    if run_id is None:
        if not kept:
            return []
        run_id = kept[-1].run_id
    return [e for e in kept if e.run_id == run_id]


def _handler_name(handler: Any) -> str:
    inner = getattr(handler, 'handler', handler)  # an `_OnlyKind` wrapper names the user's function
    name = getattr(inner, '__qualname__', None) or getattr(inner, '__name__', None)
    return str(name) if name else repr(inner)


@dataclass(frozen=True)
class _OnlyKind:
    """An event handler that passes one kind of event to `handler` (`on_compaction=`, `on_usage=`)."""

    kind: type[CompactionEvent] | type[ContextUsageEvent]
    handler: Callable[[Any], Awaitable[None] | None]

    def __call__(self, event: ContextEvent) -> Awaitable[None] | None:
        if isinstance(event, self.kind):
            return self.handler(event)
        return None


def only_kind(kind: type[CompactionEvent] | type[ContextUsageEvent], handler: Any) -> EventHandler:
    """`handler`, called with the events of `kind` only."""
    return _OnlyKind(kind, handler)


def handler_list(given: Any) -> list[EventHandler]:
    """One callable or a sequence of them, as a list; `TypeError` for anything else."""
    if given is None:
        return []
    if callable(given):
        items = [given]
    elif isinstance(given, str | bytes) or not isinstance(given, Iterable):
        raise TypeError(f'an event handler must be callable (or a sequence of callables), got {given!r}')
    else:
        items = list(given)
    for item in items:
        if not callable(item):
            raise TypeError(f'an event handler must be callable, got {item!r}')
    return items
