"""`ContextSession`: one conversation's canonical log, kept in a store, and the view compiled from it.

The session is the small context-manager contract frameworks expect (add messages, get the
messages for the next request, read the whole log, replace it, clear it) on top of this package's
profiles and stores: a `SessionStore`, or any pydantic-ai `ConversationStore` (2.66+). The stored
log only ever grows by what was added: compaction happens in the view that `messages_for_request`
compiles and is never written back.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, overload

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart

from ..budget import ContextBudget
from ..commands import HistoryStats, history_stats
from ..errors import HistoryIntegrityError
from ..openai_format import from_openai, to_openai
from ..policies.summarize import SummarizeWindow
from ..profiles import ContextProfile
from ..profiles import profile as make_profile
from ..readback.archive import ContextArchive
from ..store import ArtifactStore, MemoryStore, SessionStore
from ..store._codec import check_id
from ..views import conversation_view
from ._counts import TokenCountIndex
from ._log import SessionLog, session_log
from .readback import StoreReadbackStore
from .summaries import StoreSummaryCache, SummaryIndex

if TYPE_CHECKING:
    from pydantic_ai.conversation_store import ConversationStore

__all__ = ('ContextSession', 'MessageInput')

MessageInput = ModelMessage | Mapping[str, Any]
"""What `add_message` accepts: a pydantic-ai message or an OpenAI chat-format dict."""


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

    The store is a `SessionStore` (`MemoryStore`, `SqliteStore`: every pydantic-ai) or, on
    pydantic-ai 2.66+, any pydantic-ai `ConversationStore` (`open_store(url)`: SQLite,
    PostgreSQL, memory). On a conversation store the session id is the conversation id, a run
    passes the stored `Conversation` (so usage accumulates across runs), appends save with the
    conversation's revision (another writer's save makes them reload and retry; a run reloads and
    raises `ConversationConflict`), `set_messages` and `clear` keep the history they replace as a
    branch, and summaries are artifacts in the same database, so a session resumed on another
    worker pays for none of them again.

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
        store: SessionStore | ConversationStore | None = None,
        session_id: str | None = None,
        scope: str | None = None,
    ) -> None:
        """Start a new, empty session; use `ContextSession.open` to continue a stored one.

        Args:
            profile: The profile whose chain compiles the view (default: `profile()`, i.e. the
                `PYDANTIC_AI_CONTEXT_PROFILE` preset or `transparent`). The session uses a copy.
            store: Where the log and summaries are kept: a `SessionStore` or a pydantic-ai
                `ConversationStore` (default: a new `MemoryStore`).
            session_id: The id in the store (default: a new random id); on a conversation store,
                the conversation id.
            scope: On a conversation store, the owner the conversation is saved with and must
                have (pydantic-ai's `scope=`).

        Raises:
            StoreError: If `session_id` cannot be stored (empty, or not valid Unicode text).
            TypeError: If `store` is neither kind of store.
        """
        self.store: SessionStore | ConversationStore = store if store is not None else MemoryStore()
        self.session_id: str = check_id(
            session_id if session_id is not None else uuid.uuid4().hex, 'session id'
        )
        self.scope = scope
        self._stored: SessionLog = session_log(self.store, self.session_id, scope=scope)
        self._summary_caches: list[StoreSummaryCache] = []
        self._index = SummaryIndex(self.store, self.session_id)
        self._counts = TokenCountIndex(self.store, self.session_id)
        base = profile if profile is not None else make_profile()
        # The originals the markers name, kept in the session's own database (see `session.readback`).
        self._readback: StoreReadbackStore | None = None
        if base.readback and base.readback_store is None and isinstance(self.store, ArtifactStore):
            self._readback = StoreReadbackStore(self.store, self.session_id)
        self.profile: ContextProfile = self._own_profile(base)
        # Every original this session keeps is this conversation's: named by the session id, never
        # by what its messages hold (a converted chat that opens like another carries no id).
        self.profile._archive = ContextArchive(self.profile.readback_store, conversation=self.session_id)
        """The session's own copy of the profile; its summarising steps cache through the store."""
        # Summaries made ahead belong to the session, not to one run: one may be written between
        # turns, while the user types. `close` cancels them.
        self.profile._background_outlives_runs = True
        self._log: list[ModelMessage] = []
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        store: SessionStore | ConversationStore,
        session_id: str,
        *,
        profile: ContextProfile | None = None,
        scope: str | None = None,
    ) -> ContextSession:
        """The session `session_id` as it was stored (empty if the store does not know it).

        Loads the log and preloads the summaries its earlier views used, so compiling the same
        log again makes no summariser call. A corrupt summary index is logged and ignored (it
        costs summariser calls, not data); the next compile rewrites it.
        """
        session = cls(profile, store=store, session_id=session_id, scope=scope)
        session._log = await session._stored.load()
        await session._counts.load()
        if session._readback is not None:
            await session._readback.preload()
        if session._summary_caches:
            keys = await session._index.load()
            for cache in session._summary_caches:
                await cache.preload(keys)
        return session

    def _own_profile(self, base: ContextProfile) -> ContextProfile:
        steps: list[Any] = []
        for step in base.steps:
            if isinstance(step, SummarizeWindow) and self._index.persistent:
                cache = StoreSummaryCache(self.store, inner=step.cache)  # type: ignore[arg-type]
                self._summary_caches.append(cache)
                step = dataclasses.replace(step, cache=cache)
            steps.append(step)
        # A copy even without summarising steps: the profile keeps per-compile state (events, the
        # last view sent) that must not mix two conversations. Its events are also recorded on
        # the user's profile, so `base.run_events()` after `session.run` shows the run's compactions.
        changes: dict[str, Any] = {'steps': tuple(steps), 'name': base.name}
        if self._readback is not None:
            changes['readback_store'] = self._readback
        return base.replace(**changes).recording_into(base)

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
        """Counts of the whole log against the budget (`commands.history_stats`), with the tool
        definitions the session's latest request sent (`ContextProfile.last_overhead`), which the
        budget reserves as the compile did: its limit is the one the usage events report."""
        overhead = self.profile.last_overhead
        return history_stats(
            self._log,
            counter=self.profile.counter_for(model),
            budget=budget if budget is not None else self.profile.budget_for(model, overhead=overhead),
            overhead=overhead,
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
        """Append messages to the log in one store append (one transaction): all are stored or none.

        On a conversation store, another writer's save in between makes the append reload the
        conversation and retry, after a short random wait that grows with each attempt (up to 20
        attempts, at most about 3 seconds of waiting in all). If every attempt collides, pydantic-ai's
        `ConversationConflict` is raised: none of `messages` was stored, the session's log is as it
        was before the call, and calling `add_messages` again appends them to the newest stored
        history.
        """
        async with self._lock:
            converted = _convert(messages, self._log, self.session_id)
            if converted:
                self._log = await self._stored.append(list(self._log), converted)

    async def set_messages(self, messages: Sequence[MessageInput]) -> None:
        """Replace the whole log (for resume from elsewhere, or migration), atomically in the store.

        On a conversation store the history it replaces stays stored, as a branch of the conversation.
        """
        async with self._lock:
            converted = _convert(messages, [], self.session_id)
            self._log = await self._stored.replace(converted)

    async def clear(self) -> None:
        """Empty the log (the session stays in the store); cached summaries stay.

        On a conversation store the cleared history stays stored, as a branch of the conversation.
        """
        async with self._lock:
            self._log = await self._stored.clear()

    # --- compiling --------------------------------------------------------------------------

    async def messages_for_request(
        self, *, model: Any = None, budget: ContextBudget | None = None
    ) -> list[ModelMessage]:
        """The view of the log the model should receive next: the profile's chain applied to it.

        The budget is `budget` if given, else the model's: its context window (from the profile's
        `context_window`, else `resolve_context_window`)
        minus reserved output, reserved system tokens and a safety margin (`ContextBudget.for_model`).
        The log is not changed; summaries written for the view are persisted to the store.

        It is the profile's `compile` with the session id as the conversation: each request
        resumes from the previous one, heavy work runs off the event loop, and the compile ends
        with a `ContextUsageEvent` (`profile.last_usage`).
        """
        async with self._lock:
            self._counts.feed(self.profile.counter_for(model))
            # Through the profile's compile: its scope resumes the chain's folds from the previous
            # request (each request's work is what is new), and heavy work runs off the event loop.
            view = await self.profile.compile(
                list(self._log), model=model, budget=budget, conversation=self.session_id
            )
            await self._persist_summaries()
            return view

    async def close(self) -> None:
        """Cancel the summary the session is writing ahead (if any) and keep what was made.

        Unused summaries made ahead are reported as `summary_discarded` events. The log is already
        stored; a closed session may still be used (it summarises synchronously until it
        writes ahead again). `async with session:` closes it on exit.
        """
        await self.profile.close_background()
        await self._persist_summaries(final=True)

    async def __aenter__(self) -> ContextSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _persist_summaries(self, *, final: bool = False) -> None:
        if self._readback is not None:
            await self._readback.flush()
        used: dict[str, None] = {}
        for cache in self._summary_caches:
            await cache.flush()
            used.update(dict.fromkeys(cache.used))
        await self._index.save(list(used))
        await self._counts.save(self._log, final=final)

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

        On a pydantic-ai `ConversationStore` the run gets the stored `Conversation`
        (`agent.run(prompt, conversation=...)`, so usage accumulates: set `usage_limits` with that
        in mind) and the result is saved with `store.save(result)`. If another writer saved the
        conversation during the run, the session reloads it and raises pydantic-ai's
        `ConversationConflict`: run the turn again on the newer history.

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
            # The run compiles with the counter of the model it resolves: that of `model=`, else
            # the agent's (a profile without its own counter shares one per encoding).
            self._counts.feed(self.profile.counter_for(kwargs.get('model') or getattr(agent, 'model', None)))
            try:
                result, self._log = await self._stored.run(agent, prompt, list(self._log), kwargs)
            finally:
                # A run that lost a race reloaded the conversation: the session follows the store.
                if (reloaded := self._stored.take_reloaded()) is not None:
                    self._log = reloaded
            await self._persist_summaries()
            return result


def _convert(
    messages: Sequence[MessageInput], log: Sequence[ModelMessage], session_id: str
) -> list[ModelMessage]:
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
        try:
            out.append(copy.deepcopy(message))
        except RecursionError:
            raise HistoryIntegrityError(
                index,
                f'session {session_id!r}: the message nests too deeply to copy or store (tool arguments or '
                'content nested hundreds of levels deep); pass such arguments as a JSON string',
            ) from None
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
