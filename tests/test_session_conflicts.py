"""`ContextSession` on a conversation store: appends back off, with jitter, when another writer
keeps saving the same conversation; and what the caller sees when every attempt collides."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic_ai import __version__ as pydantic_ai_version
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart

from pydantic_ai_context.session import ContextSession
from pydantic_ai_context.session import _log as session_log
from pydantic_ai_context.store._compat import HAS_CONVERSATION_STORE

pytestmark = pytest.mark.skipif(
    not HAS_CONVERSATION_STORE, reason=f'pydantic-ai {pydantic_ai_version} has no ConversationStore (2.66+)'
)


def _contested_store(conflicts: int) -> Any:
    """A memory conversation store whose next `conflicts` saves lose to another writer."""
    from pydantic_ai.conversation_store import ConversationConflict

    from pydantic_ai_context.store.conversations_memory import MemoryConversationStore

    class Contested(MemoryConversationStore):
        left = conflicts

        async def save(self, conversation: Any, **kwargs: Any) -> Any:
            if self.left > 0:
                self.left -= 1
                raise ConversationConflict(conversation.conversation_id)
            return await super().save(conversation, **kwargs)

    return Contested()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The delays the session waited for, without waiting them."""
    seen: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float, *args: Any) -> None:
        seen.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, 'sleep', sleep)
    return seen


def _turn(n: int) -> list[Any]:
    return [ModelRequest.user_text_prompt(f'question {n}'), ModelResponse(parts=[TextPart(f'answer {n}')])]


async def test_an_append_backs_off_with_growing_jittered_waits(waits: list[float]) -> None:
    store = _contested_store(conflicts=8)
    session = await ContextSession.open(store, 'c1')
    await session.add_messages(_turn(1))
    assert len(session.messages()) == 2
    assert len(waits) == 8  # one wait before each retry
    caps = [min(session_log.RETRY_MAX_DELAY, session_log.RETRY_BASE_DELAY * 2**k) for k in range(8)]
    assert all(0 <= wait <= cap for wait, cap in zip(waits, caps, strict=True))
    assert caps[-1] == session_log.RETRY_MAX_DELAY  # the waits grow, up to a cap
    assert len(set(waits)) > 1  # jitter: two writers do not retry in lockstep


async def test_when_every_attempt_collides_the_conflict_is_raised_and_nothing_stored(
    waits: list[float],
) -> None:
    from pydantic_ai.conversation_store import ConversationConflict

    store = _contested_store(conflicts=0)
    session = await ContextSession.open(store, 'c1')
    await session.add_messages(_turn(1))
    store.left = session_log.SAVE_ATTEMPTS
    with pytest.raises(ConversationConflict):
        await session.add_messages(_turn(2))
    assert len(waits) == session_log.SAVE_ATTEMPTS - 1
    assert len(session.messages()) == 2  # the log as before the call
    assert len((await store.load('c1')).messages) == 2  # nothing of the failed call was stored
    await session.add_messages(_turn(2))  # calling again appends them
    assert len((await store.load('c1')).messages) == 4
