"""`ContextSession`: one conversation's canonical log, kept in a store, and the view compiled from it.

The session is the small context-manager contract frameworks expect (add messages, get the
messages for the next request, read the whole log, replace it, clear it) on top of this package's
profiles and stores. The stored log only ever grows by what was added: compaction happens in the
view that `messages_for_request` compiles and is never written back.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal, overload

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart

from .budget import ContextBudget
from .commands import HistoryStats, history_stats
from .events import CompactionEvent
from .openai_format import from_openai, to_openai
from .policies.summarize import SummarizeWindow, SummaryCache
from .profiles import ContextProfile
from .profiles import profile as make_profile
from .store import MemoryStore, SessionStore
from .views import CompileContext, compile_view, conversation_view

__all__ = ('ContextSession', 'MessageInput', 'StoreSummaryCache', 'summary_index_key')

MessageInput = ModelMessage | Mapping[str, Any]
"""What `add_message` accepts: a pydantic-ai message or an OpenAI chat-format dict."""

SUMMARY_INDEX_PREFIX: Final = 'pydantic_ai_context/session-summaries/'


def summary_index_key(session_id: str) -> str:
    """The summary-cache key under which a session lists the summary keys its views use."""
    return f'{SUMMARY_INDEX_PREFIX}{session_id}'


class StoreSummaryCache:
    """A `SummaryCache` backed by a `SessionStore`: sync reads from memory, writes persisted after each compile.

    `SummarizeWindow` reads its cache synchronously while a store is async, so this adapter keeps
    the summaries it knows in a dict: `preload` fills it from the store before compiling, `put`
    records new summaries there and queues them, and `flush` writes the queue with
    `store.put_summary`. `ContextSession` does all three for you: it preloads the summaries its
    session used before (listed under `summary_index_key(session_id)`), and flushes after every
    compile and run, so a resumed session finds its summaries and pays for none of them again.
    An optional `inner` cache (the policy's own) is read on a miss and written through, so
    summaries shared in memory between profiles stay shared.

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

    def __init__(self, store: SessionStore, *, inner: SummaryCache | None = None) -> None:
        self.store = store
        self.inner = inner
        self._entries: dict[str, str] = {}
        self._pending: dict[str, str] = {}
        self._used: dict[str, None] = {}

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
        self._entries[key] = self._pending[key] = summary
        self._used[key] = None
        if self.inner is not None:
            self.inner.put(key, summary)

    async def preload(self, keys: Sequence[str]) -> int:
        """Read `keys` from the store into memory (those it has); return how many were found."""
        found = 0
        for key in keys:
            if key in self._entries:
                found += 1
                continue
            summary = await self.store.get_summary(key)
            if summary is not None:
                self._entries[key] = summary
                self._used[key] = None
                found += 1
        return found

    async def flush(self) -> list[str]:
        """Write the summaries stored since the last flush to the store; return their keys."""
        written: list[str] = []
        while self._pending:
            key, summary = next(iter(self._pending.items()))
            await self.store.put_summary(key, summary, meta={'source': 'pydantic_ai_context.session'})
            # Removed only once written: a failed write is retried by the next flush.
            if self._pending.get(key) == summary:
                del self._pending[key]
            written.append(key)
        return written


class ContextSession:
    """One conversation: its canonical log in a store, its profile, and the view each request gets.

    `add_message(s)` appends to the log (one store append per call), `messages_for_request`
    compiles the view the model should receive (compaction is ephemeral: the stored log never
    changes), `messages()` is the whole log, `set_messages` replaces it, `clear` empties it.
    `run(agent, prompt)` runs a pydantic-ai agent on the log and appends what the run added.
    Messages may be pydantic-ai messages or OpenAI chat-format dicts (see `openai_format`), and
    `messages(format='openai')` gives the log back as dicts.

    Every method that touches the log holds the session's `asyncio.Lock`, so many tasks may share
    one session: their additions never interleave inside a call, and each compile sees a whole
    log. Open one session object per conversation and share it; two objects on the same session
    id notice each other's appends (the store's count differs) and reload. Sessions share nothing
    but identical cached summaries: the session compiles with its own copy of the profile, whose
    summarising steps use a `StoreSummaryCache` on the session's store.

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelResponse, TextPart
        from pydantic_ai_context import MemoryStore, profile
        from pydantic_ai_context.session import ContextSession


        async def main() -> None:
            store = MemoryStore()
            session = await ContextSession.open(store, 'chat-1', profile=profile('transparent'))
            await session.add_message({'role': 'user', 'content': 'hi'})
            await session.add_message(ModelResponse(parts=[TextPart('hello!')]))
            await session.add_message({'role': 'user', 'content': 'how are you?'})
            view = await session.messages_for_request()
            assert len(view) == len(session.messages()) == 3
            assert session.messages(format='openai')[-1] == {'role': 'user', 'content': 'how are you?'}

            resumed = await ContextSession.open(store, 'chat-1')
            assert resumed.messages(format='openai') == session.messages(format='openai')


        asyncio.run(main())
        ```
    """

    def __init__(
        self,
        profile: ContextProfile | None = None,
        *,
        store: SessionStore | None = None,
        session_id: str | None = None,
    ) -> None:
        """Start a new, empty session; use `ContextSession.open` to continue a stored one.

        Args:
            profile: The profile whose chain compiles the view (default: `profile()`, i.e. the
                `PYDANTIC_AI_CONTEXT_PROFILE` preset or `transparent`). The session uses a copy.
            store: Where the log and summaries are kept (default: a new `MemoryStore`).
            session_id: The id in the store (default: a new random id).
        """
        self.store: SessionStore = store if store is not None else MemoryStore()
        self.session_id: str = session_id if session_id is not None else uuid.uuid4().hex
        self._summary_caches: list[StoreSummaryCache] = []
        self.profile: ContextProfile = self._own_profile(profile if profile is not None else make_profile())
        """The session's own copy of the profile; its summarising steps cache through the store."""
        self._log: list[ModelMessage] = []
        self._indexed: dict[str, None] = {}
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls, store: SessionStore, session_id: str, *, profile: ContextProfile | None = None
    ) -> ContextSession:
        """The session `session_id` as it was stored (empty if the store does not know it).

        Loads the log and preloads the summaries its earlier views used, so compiling the same
        log again makes no summariser call.
        """
        session = cls(profile, store=store, session_id=session_id)
        session._log = await store.load(session_id)
        index = await store.get_summary(summary_index_key(session_id))
        if index:
            keys = [k for k in json.loads(index) if isinstance(k, str)]
            for cache in session._summary_caches:
                await cache.preload(keys)
            session._indexed = dict.fromkeys(keys)
        return session

    def _own_profile(self, base: ContextProfile) -> ContextProfile:
        steps: list[Any] = []
        for step in base.steps:
            if isinstance(step, SummarizeWindow):
                cache = StoreSummaryCache(self.store, inner=step.cache)
                self._summary_caches.append(cache)
                step = dataclasses.replace(step, cache=cache)
            steps.append(step)
        # A copy even without summarising steps: the profile keeps per-compile state (events, the
        # last view sent) that must not mix two conversations. Its events are also recorded on
        # the user's profile, so `base.run_events()` after `session.run` shows the run's compactions.
        return base.replace(steps=tuple(steps)).recording_into(base)

    # --- reading ----------------------------------------------------------------------------

    @overload
    def messages(self, *, format: Literal['pydantic_ai'] = 'pydantic_ai') -> list[ModelMessage]: ...

    @overload
    def messages(self, *, format: Literal['openai']) -> list[dict[str, Any]]: ...

    def messages(
        self, *, format: Literal['pydantic_ai', 'openai'] = 'pydantic_ai'
    ) -> list[ModelMessage] | list[dict[str, Any]]:
        """The whole canonical log (a new list; do not mutate the messages), or it as OpenAI dicts."""
        if format == 'openai':
            return to_openai(self._log)
        if format != 'pydantic_ai':
            raise ValueError(f"format must be 'pydantic_ai' or 'openai', got {format!r}")
        return list(self._log)

    def to_openai(self) -> list[dict[str, Any]]:
        """The whole log as OpenAI chat-format dicts (`openai_format.to_openai`)."""
        return to_openai(self._log)

    def conversation(self, *, include_system_prompt: bool = True) -> list[ModelMessage]:
        """The clean user ↔ assistant thread of the log (`views.conversation_view`)."""
        return conversation_view(self._log, include_system_prompt=include_system_prompt)

    def stats(self, *, model: Any = None, budget: ContextBudget | None = None) -> HistoryStats:
        """Counts of the whole log against the budget (`commands.history_stats`)."""
        return history_stats(
            self._log,
            counter=self.profile.counter_for(model),
            budget=budget if budget is not None else self.profile.budget_for(model),
        )

    def __len__(self) -> int:
        return len(self._log)

    def __repr__(self) -> str:
        return f'ContextSession(session_id={self.session_id!r}, messages={len(self._log)}, profile={self.profile!r})'

    # --- writing ----------------------------------------------------------------------------

    async def add_message(self, message: MessageInput) -> None:
        """Append one message (a pydantic-ai message or an OpenAI chat-format dict) to the log."""
        await self.add_messages([message])

    async def add_messages(self, messages: Sequence[MessageInput]) -> None:
        """Append messages to the log in one store append (one transaction): all are stored or none."""
        async with self._lock:
            converted = _convert(messages, self._log)
            if converted:
                await self._append_locked(converted)

    async def set_messages(self, messages: Sequence[MessageInput]) -> None:
        """Replace the whole log (for resume from elsewhere, or migration), atomically in the store."""
        async with self._lock:
            converted = _convert(messages, [])
            await self.store.replace(self.session_id, converted)
            self._log = converted

    async def clear(self) -> None:
        """Empty the log (the session stays in the store); cached summaries stay."""
        async with self._lock:
            await self.store.clear(self.session_id)
            self._log = []

    async def _append_locked(self, messages: list[ModelMessage]) -> None:
        count = await self.store.append(self.session_id, messages)
        if count == len(self._log) + len(messages):
            self._log.extend(messages)
        else:
            # Someone else (another session object, another process, or a cancelled append of ours
            # that still completed) wrote to this session: the store is the truth.
            self._log = await self.store.load(self.session_id)

    # --- compiling --------------------------------------------------------------------------

    async def messages_for_request(
        self, *, model: Any = None, budget: ContextBudget | None = None
    ) -> list[ModelMessage]:
        """The view of the log the model should receive next: the profile's chain applied to it.

        The budget is `budget` if given, else the model's: its context window (from the profile's
        `context_window`, else the model's profile or genai-prices, else a conservative default)
        minus reserved output, reserved system tokens and a safety margin (`ContextBudget.for_model`).
        The log is not changed; summaries written for the view are persisted to the store.
        """
        async with self._lock:
            log = list(self._log)
            if budget is None:
                budget = self.profile.budget_for(model)
            context = CompileContext(
                counter=self.profile.counter_for(model),
                budget=budget,
                model=self.profile.summary_model if self.profile.summary_model is not None else model,
                log=log,
            )
            view = await compile_view(
                log,
                self.profile.steps,
                context,
                on_event=self._on_event,
                count_tokens=bool(self.profile.event_handlers),
            )
            await self._persist_summaries()
            return view

    async def _on_event(self, event: CompactionEvent) -> None:
        event = dataclasses.replace(event, profile=self.profile.name)
        self.profile._record(event)
        await self.profile._dispatch(event)  # a handler that raises is logged, never propagated

    async def _persist_summaries(self) -> None:
        used: dict[str, None] = {}
        for cache in self._summary_caches:
            await cache.flush()
            used.update(dict.fromkeys(cache.used))
        if not used.keys() <= self._indexed.keys():
            keys = {**self._indexed, **used}
            await self.store.put_summary(
                summary_index_key(self.session_id),
                json.dumps(list(keys)),
                meta={'kind': 'session-summary-index', 'session_id': self.session_id},
            )
            self._indexed = keys

    # --- running an agent -------------------------------------------------------------------

    async def run(self, agent: Any, prompt: Any = None, *, apply_profile: bool = True, **kwargs: Any) -> Any:
        """Run `agent` on the session's log and append the messages the run added; return its result.

        With `apply_profile` (default) the session's profile is passed as a run-level capability
        (`agent.run(..., capabilities=[profile])`, supported by pydantic-ai 2.x and 1.x ≥ 1.107):
        each model request gets the compiled view. Set `apply_profile=False` when the agent was
        built with a context profile already. Only `result.new_messages()` is appended, so the log
        stays whole even on pydantic-ai 1.x, where the view replaces the run's own history. The
        run holds the session's lock (turns of one conversation do not overlap); a run that fails
        or is cancelled appends nothing (use `agent.iter` and `add_messages` to keep partial runs,
        as `examples/chat.py` does). Other keyword arguments go to `agent.run`.

        Example:
            ```python
            import asyncio

            from pydantic_ai import Agent
            from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
            from pydantic_ai.models.function import AgentInfo, FunctionModel
            from pydantic_ai_context.session import ContextSession


            def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
                return ModelResponse(parts=[TextPart(f'{len(messages)} messages so far')])


            async def main() -> None:
                session = ContextSession()
                agent = Agent(FunctionModel(reply))
                assert (await session.run(agent, 'hi')).output == '1 messages so far'
                assert (await session.run(agent, 'again')).output == '3 messages so far'
                assert len(session.messages()) == 4


            asyncio.run(main())
            ```
        """
        if 'message_history' in kwargs:
            raise TypeError('ContextSession.run provides message_history from the session log')
        if apply_profile:
            kwargs['capabilities'] = [*(kwargs.get('capabilities') or ()), self.profile]
        async with self._lock:
            history = list(self._log)
            if history and isinstance(history[-1], ModelRequest):
                # pydantic-ai resumes a trailing request in place (timestamps, run id): give it a copy.
                history[-1] = copy.copy(history[-1])
            result = await agent.run(prompt, message_history=history, **kwargs)
            new = [m for m in result.new_messages() if isinstance(m, ModelRequest | ModelResponse)]
            if new:
                await self._append_locked(new)
            await self._persist_summaries()
            return result


def _convert(messages: Sequence[MessageInput], log: Sequence[ModelMessage]) -> list[ModelMessage]:
    """Messages as new pydantic-ai objects; runs of OpenAI dicts are converted together.

    Tool messages may answer calls already in `log` (frameworks add tool results one at a time).
    """
    if isinstance(messages, ModelRequest | ModelResponse | Mapping):
        raise TypeError('add_messages takes a sequence of messages; use add_message for one')
    out: list[ModelMessage] = []
    dicts: list[Mapping[str, Any]] = []
    start = 0
    now = datetime.now(UTC)
    for index, message in enumerate(messages):
        if isinstance(message, Mapping):
            if not dicts:
                start = index
            dicts.append(message)
            continue
        if dicts:
            out.extend(_from_openai_at(dicts, start, now, _call_names(log, out)))
            dicts = []
        if not isinstance(message, ModelRequest | ModelResponse):
            raise ValueError(
                f'message {index}: expected a ModelRequest, a ModelResponse or an OpenAI chat-format dict, '
                f'got {type(message).__name__}'
            )
        # A copy: the caller may keep changing its objects; the log must match what was stored.
        out.append(copy.deepcopy(message))
    if dicts:
        out.extend(_from_openai_at(dicts, start, now, _call_names(log, out)))
    return out


def _call_names(*logs: Sequence[ModelMessage]) -> dict[str, str]:
    return {
        part.tool_call_id: part.tool_name
        for log in logs
        for message in log
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart)
    }


def _from_openai_at(
    dicts: list[Mapping[str, Any]], start: int, now: datetime, tool_names: dict[str, str]
) -> list[ModelMessage]:
    try:
        return from_openai(dicts, timestamp=now, tool_names=tool_names)
    except ValueError as e:
        # Renumber 'message N' to the caller's index when the dicts were part of a longer list.
        text = str(e)
        if start and text.startswith('message '):
            head, _, rest = text.partition(':')
            number = head.removeprefix('message ')
            if number.isdigit():
                raise ValueError(f'message {int(number) + start}:{rest}') from e
        raise
