"""Where a `ContextSession` keeps its log: a `SessionStore`'s append-only log, or a pydantic-ai conversation.

Both give the session the same four operations (load, append, replace, clear) and a run; the
session holds its lock around each, so these never overlap for one session object.
"""

from __future__ import annotations

import asyncio
import copy
import random
from typing import TYPE_CHECKING, Any, Final, Protocol

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from ..store import SessionStore
from ..store._compat import HAS_CONVERSATION_STORE

if TYPE_CHECKING:
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import ConversationStore

SAVE_ATTEMPTS: Final = 20
"""How often an append, replace or clear reloads and retries after another writer saved the same conversation."""

RETRY_BASE_DELAY: Final = 0.002
"""Seconds: the most the first retry after a `ConversationConflict` waits (doubling each time)."""

RETRY_MAX_DELAY: Final = 0.25
"""Seconds: the most any one retry waits."""


async def conflict_backoff(attempt: int) -> None:
    """Wait before retry `attempt` (0 for the first) after a `ConversationConflict`: a random time up
    to `RETRY_BASE_DELAY * 2**attempt`, at most `RETRY_MAX_DELAY` ("full jitter"), so that two
    writers that keep colliding drift apart instead of retrying in lockstep."""
    await asyncio.sleep(random.uniform(0, min(RETRY_MAX_DELAY, RETRY_BASE_DELAY * 2**attempt)))


class SessionLog(Protocol):
    """The session's log in its store; each method returns the whole log as now stored."""

    async def load(self) -> list[ModelMessage]: ...

    async def append(self, log: list[ModelMessage], messages: list[ModelMessage]) -> list[ModelMessage]: ...

    async def replace(self, messages: list[ModelMessage]) -> list[ModelMessage]: ...

    async def clear(self) -> list[ModelMessage]: ...

    async def run(
        self, agent: Any, prompt: Any, log: list[ModelMessage], kwargs: dict[str, Any]
    ) -> tuple[Any, list[ModelMessage]]: ...

    def take_reloaded(self) -> list[ModelMessage] | None:
        """The log a failed call reloaded from the store (once), or `None`."""
        ...


def is_conversation_store(store: object) -> bool:
    if not HAS_CONVERSATION_STORE:
        return False
    from pydantic_ai.conversation_store import ConversationStore

    return isinstance(store, ConversationStore)


def session_log(store: object, session_id: str, *, scope: str | None) -> SessionLog:
    if is_conversation_store(store):
        return ConversationLog(store, session_id, scope)  # type: ignore[arg-type]
    if not isinstance(store, SessionStore):
        raise TypeError(
            f'store must be a SessionStore or a pydantic-ai ConversationStore, got {type(store).__name__}'
        )
    if scope is not None:
        raise TypeError('scope is a pydantic-ai ConversationStore feature; a SessionStore has none')
    return StoreLog(store, session_id)


def _history_for_run(log: list[ModelMessage]) -> list[ModelMessage]:
    history = list(log)
    if history and isinstance(history[-1], ModelRequest):
        # pydantic-ai resumes a trailing request in place (timestamps, run id): give it a copy.
        history[-1] = copy.copy(history[-1])
    return history


class StoreLog:
    """A `SessionStore` log: appends land on top of whatever is stored (others' appends included)."""

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id

    async def load(self) -> list[ModelMessage]:
        return await self.store.load(self.session_id)

    async def append(self, log: list[ModelMessage], messages: list[ModelMessage]) -> list[ModelMessage]:
        count = await self.store.append(self.session_id, messages)
        if count == len(log) + len(messages):
            return [*log, *messages]
        # Someone else (another session object, another process, or a cancelled append of ours
        # that still completed) wrote to this session: the store is the truth.
        return await self.store.load(self.session_id)

    async def replace(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        await self.store.replace(self.session_id, messages)
        return list(messages)

    async def clear(self) -> list[ModelMessage]:
        await self.store.clear(self.session_id)
        return []

    async def run(
        self, agent: Any, prompt: Any, log: list[ModelMessage], kwargs: dict[str, Any]
    ) -> tuple[Any, list[ModelMessage]]:
        result = await agent.run(prompt, message_history=_history_for_run(log), **kwargs)
        new = [m for m in result.new_messages() if isinstance(m, ModelRequest | ModelResponse)]
        return result, (await self.append(log, new) if new else log)

    def take_reloaded(self) -> list[ModelMessage] | None:
        return None


class ConversationLog:
    """A pydantic-ai conversation: saved with its revision, so concurrent writers are noticed.

    Appends, replacements and clears reload and retry on `ConversationConflict` (they do not depend
    on what another writer added), after a short random wait that grows with each attempt
    (`conflict_backoff`), up to `SAVE_ATTEMPTS` times; then the conflict is raised and nothing was
    stored. A run does not retry, since its answer was computed from the older history: it reloads
    and raises, for the caller to run again.
    """

    def __init__(self, store: ConversationStore, session_id: str, scope: str | None) -> None:
        self.store = store
        self.session_id = session_id
        self.scope = scope
        self.conversation: Conversation | None = None
        self._reloaded: list[ModelMessage] | None = None

    async def _fresh(self) -> Conversation:
        from pydantic_ai.conversation import Conversation

        loaded = await self.store.load(self.session_id, scope=self.scope)
        self.conversation = loaded if loaded is not None else Conversation(conversation_id=self.session_id)
        return self.conversation

    async def _current(self) -> Conversation:
        return self.conversation if self.conversation is not None else await self._fresh()

    async def load(self) -> list[ModelMessage]:
        return list((await self._fresh()).messages)

    async def append(self, log: list[ModelMessage], messages: list[ModelMessage]) -> list[ModelMessage]:
        from pydantic_ai.conversation_store import ConversationConflict

        conversation = await self._current()
        for attempt in range(SAVE_ATTEMPTS):
            stored = len(conversation.messages)
            # Extending in place keeps the conversation's mark of what is stored: save appends only these.
            conversation.messages.extend(messages)
            try:
                await self.store.save(conversation, scope=self.scope)
            except ConversationConflict:
                del conversation.messages[stored:]
                if attempt == SAVE_ATTEMPTS - 1:
                    raise
                await conflict_backoff(attempt)
                conversation = await self._fresh()
                continue
            except BaseException:
                del conversation.messages[stored:]
                raise
            return list(conversation.messages)
        raise AssertionError('unreachable')  # pragma: no cover

    async def replace(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        from pydantic_ai.conversation import Conversation
        from pydantic_ai.conversation_store import ConversationConflict

        for attempt in range(SAVE_ATTEMPTS):
            base = await self._current()
            # No mark of what is stored: save compares with the stored history, keeps the shared
            # start and stores the rest as a branch, so the replaced history stays stored.
            replacement = Conversation(
                messages=list(messages),
                usage=base.usage,
                conversation_id=self.session_id,
                revision=base.revision,
            )
            try:
                await self.store.save(replacement, scope=self.scope)
            except ConversationConflict:
                if attempt == SAVE_ATTEMPTS - 1:
                    raise
                await conflict_backoff(attempt)
                await self._fresh()
                continue
            self.conversation = replacement
            return list(messages)
        raise AssertionError('unreachable')  # pragma: no cover

    async def clear(self) -> list[ModelMessage]:
        from pydantic_ai.conversation_store import ConversationConflict

        for attempt in range(SAVE_ATTEMPTS):
            base = await self._current()
            if base.revision is None:  # never stored: nothing to branch away from
                return []
            try:
                # The history it leaves is kept as a branch of the conversation.
                self.conversation = await self.store.branch(
                    self.session_id, at=0, expected_revision=base.revision, scope=self.scope
                )
            except ConversationConflict:
                if attempt == SAVE_ATTEMPTS - 1:
                    raise
                await conflict_backoff(attempt)
                await self._fresh()
                continue
            return []
        raise AssertionError('unreachable')  # pragma: no cover

    async def run(
        self, agent: Any, prompt: Any, log: list[ModelMessage], kwargs: dict[str, Any]
    ) -> tuple[Any, list[ModelMessage]]:
        from pydantic_ai.conversation import Conversation
        from pydantic_ai.conversation_store import ConversationConflict

        conversation = await self._current()
        if conversation.messages and isinstance(conversation.messages[-1], ModelRequest):
            # As in StoreLog: pydantic-ai would edit the trailing request in place. A copy loses the
            # conversation's mark of what is stored, so save compares that many stored messages.
            conversation = Conversation(
                messages=_history_for_run(conversation.messages),
                usage=conversation.usage,
                conversation_id=conversation.conversation_id,
                deferred_tool_requests=conversation.deferred_tool_requests,
                revision=conversation.revision,
                new_message_index=len(conversation.messages),
            )
        result = await agent.run(prompt, conversation=conversation, **kwargs)
        try:
            await self.store.save(result, scope=self.scope)
        except ConversationConflict:
            self._reloaded = list((await self._fresh()).messages)
            raise
        new = [m for m in result.new_messages() if isinstance(m, ModelRequest | ModelResponse)]
        after = result.conversation
        if len(after.messages) == len(log) + len(new):
            self.conversation = after
            return result, list(after.messages)
        # The run's history was rewritten (ProcessHistory, 1.x-style processors): the store kept
        # the whole log plus the run's messages; read it back.
        return result, await self.load()

    def take_reloaded(self) -> list[ModelMessage] | None:
        reloaded, self._reloaded = self._reloaded, None
        return reloaded
