"""ContextSession on pydantic-ai conversation stores (memory, SQLite, PostgreSQL), and its odd-input errors."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import __version__ as pydantic_ai_version
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)

from pydantic_ai_context import HistoryIntegrityError, MemoryStore, SqliteStore, StoreError
from pydantic_ai_context.session import ContextSession, summary_index_key
from pydantic_ai_context.store._compat import HAS_CONVERSATION_STORE

from ._conversation_worker import NO_LIMITS, echo_agent, long_chat, summarising_profile

if HAS_CONVERSATION_STORE:
    from pydantic_ai.conversation_store import ConversationConflict

    from pydantic_ai_context import open_store

needs_conversation_store = pytest.mark.skipif(
    not HAS_CONVERSATION_STORE, reason=f'pydantic-ai {pydantic_ai_version} has no ConversationStore (2.66+)'
)
WORKER = Path(__file__).with_name('_conversation_worker.py')


def dump(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


def url_for(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == 'memory':
        return 'memory://'
    if kind == 'sqlite':
        return f'sqlite:///{tmp_path / "conversations.db"}'
    return str(request.getfixturevalue('postgres_url'))


@pytest.fixture(params=['memory', 'sqlite', 'postgres'])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if not HAS_CONVERSATION_STORE:
        pytest.skip(f'pydantic-ai {pydantic_ai_version} has no ConversationStore (2.66+)')
    async with open_store(url_for(request.param, tmp_path, request)) as made:
        yield made


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {'a': value}
    return value


# --- a session on a conversation store ------------------------------------------------------------


async def test_the_session_log_is_the_stored_conversation(store: Any) -> None:
    session = await ContextSession.open(store, 'chat')
    await session.add_messages([{'role': 'system', 'content': 'be brief'}, {'role': 'user', 'content': 'hi'}])
    await session.add_message(ModelResponse(parts=[TextPart('hello')]))
    await session.run(echo_agent(), 'first', usage_limits=NO_LIMITS)
    await session.run(echo_agent(), 'second', usage_limits=NO_LIMITS)
    stored = await store.load('chat')
    assert dump(session.messages()) == dump(stored.messages)
    assert len(stored.messages) == 6  # system + user prompt are one request
    assert stored.usage.requests == 2  # the runs were given the conversation: usage accumulates
    resumed = await ContextSession.open(store, 'chat')
    assert dump(resumed.messages()) == dump(session.messages())
    view = await resumed.messages_for_request()
    assert isinstance(view[-1], ModelResponse | ModelRequest)


async def test_replace_and_clear_keep_the_old_history_as_a_branch(store: Any) -> None:
    session = await ContextSession.open(store, 'chat')
    await session.run(echo_agent(), 'one', usage_limits=NO_LIMITS)
    await session.run(echo_agent(), 'two', usage_limits=NO_LIMITS)
    before = session.messages()
    await session.set_messages([*before[:2], ModelRequest(parts=[UserPromptPart('two, edited')])])
    assert len((await store.load('chat')).messages) == 3
    [record] = await store.list_conversations()
    [tip] = record.branches
    assert dump([e.message for e in await store.read_history(tip)]) == dump(before)  # nothing lost
    await session.clear()
    assert session.messages() == []
    assert (await store.load('chat')).messages == []
    [record] = await store.list_conversations()
    assert len(record.branches) == 2
    await session.run(echo_agent(), 'fresh start', usage_limits=NO_LIMITS)
    assert len((await store.load('chat')).messages) == 2


async def test_two_sessions_on_one_conversation(store: Any) -> None:
    a = await ContextSession.open(store, 'chat')
    b = await ContextSession.open(store, 'chat')
    await a.add_message(ModelRequest(parts=[UserPromptPart('from a')]))
    await b.add_message(ModelResponse(parts=[TextPart('from b')]))  # b's save conflicts, reloads, retries
    assert [m.kind for m in b.messages()] == ['request', 'response']
    assert dump(b.messages()) == dump((await store.load('chat')).messages)

    with pytest.raises(ConversationConflict):  # a's run saw a stale history (b added since): not saved
        await a.run(echo_agent(), 'a runs', usage_limits=NO_LIMITS)
    assert dump(a.messages()) == dump(b.messages())  # a reloaded ...
    await a.run(echo_agent(), 'a runs', usage_limits=NO_LIMITS)  # ... so its retry works
    with pytest.raises(ConversationConflict):  # now b is the stale one
        await b.run(echo_agent(), 'b runs', usage_limits=NO_LIMITS)
    assert dump(b.messages()) == dump((await store.load('chat')).messages)  # b reloaded
    result = await b.run(echo_agent(), 'b runs', usage_limits=NO_LIMITS)  # ... so its retry works
    assert result.output == 'ack b runs after 4'
    assert len((await store.load('chat')).messages) == 6


async def test_summaries_are_artifacts_owned_by_the_conversation(store: Any) -> None:
    calls: list[int] = []
    session = await ContextSession.open(store, 'long', profile=summarising_profile(calls))
    await session.add_messages(long_chat())
    await session.messages_for_request()
    assert calls
    summaries = await store.artifact_keys('summaries')
    assert summaries
    index = await store.get_artifact('session-summaries', 'long')
    assert index is not None
    assert index.conversation_id == 'long'
    assert set(json.loads(index.value)) <= set(summaries)
    await store.delete('long')
    assert await store.get_artifact('session-summaries', 'long') is None  # deleted with it
    assert await store.artifact_keys('summaries') == summaries  # shared by content: kept


@needs_conversation_store
@pytest.mark.parametrize('kind', ['sqlite', 'postgres'])
def test_a_session_resumed_by_another_process_pays_for_no_summary(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = url_for(kind, tmp_path, request)

    async def in_this_process() -> tuple[int, bool]:
        calls: list[int] = []
        async with open_store(url) as one_store:  # a store instance of its own each time
            session = await ContextSession.open(one_store, 'long', profile=summarising_profile(calls))
            if not session.messages():
                await session.add_messages(long_chat())
            view = await session.messages_for_request()
        return len(calls), any('summary #' in str(getattr(p, 'content', '')) for m in view for p in m.parts)

    paid, summarised = asyncio.run(in_this_process())
    assert paid >= 1
    assert summarised
    resumed = subprocess.run(
        [sys.executable, str(WORKER), 'summarise', url, 'long'],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, 'PYTHONPATH': os.pathsep.join(sys.path)},
        check=True,
    )
    assert int(resumed.stdout) == 0  # another process resumes it: zero summariser calls
    assert asyncio.run(in_this_process()) == (0, True)  # and so does another store instance


# --- odd input: the library's own errors (issue 15) -----------------------------------------------


async def test_a_lone_surrogate_session_id_is_a_store_error(tmp_path: Path) -> None:
    bad = 'chat-\udc80'
    with pytest.raises(StoreError, match=r"session id 'chat-\\udc80' is not valid Unicode text"):
        ContextSession(session_id=bad)
    async with SqliteStore(tmp_path / 's.db') as sqlite:
        for store in (MemoryStore(), sqlite):
            with pytest.raises(StoreError, match='lone surrogate'):
                await ContextSession.open(store, bad)
            with pytest.raises(StoreError, match='lone surrogate'):
                await store.append(bad, [ModelRequest(parts=[UserPromptPart('hi')])])
        if HAS_CONVERSATION_STORE:
            with pytest.raises(StoreError, match='lone surrogate'):
                await ContextSession.open(open_store('memory://'), bad)


@pytest.mark.parametrize(
    'corrupt',
    ['{not json', '5', 'null', '{"a": 1}', '[1, "k", null]'],
    ids=['text', 'int', 'null', 'dict', 'items'],
)
async def test_a_corrupt_summary_index_is_logged_and_rewritten(
    corrupt: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    calls: list[int] = []
    first = await ContextSession.open(store, 's', profile=summarising_profile(calls))
    await first.add_messages(long_chat())
    await first.messages_for_request()
    await store.put_summary(summary_index_key('s'), corrupt)  # damaged behind the session's back

    with caplog.at_level(logging.WARNING, logger='pydantic_ai_context.session'):
        resumed = await ContextSession.open(store, 's', profile=summarising_profile(calls))
    [warning] = caplog.records
    assert "session 's'" in warning.getMessage()
    assert summary_index_key('s') in warning.getMessage()
    assert 'corrupt' in warning.getMessage()
    await resumed.messages_for_request()  # works, and repairs the index
    repaired = json.loads(await store.get_summary(summary_index_key('s')) or '')
    assert isinstance(repaired, list)
    assert repaired
    assert all(isinstance(k, str) for k in repaired)
    paid = len(calls)
    again = await ContextSession.open(store, 's', profile=summarising_profile(calls))
    await again.messages_for_request()
    assert len(calls) == paid  # the repaired index serves the next resume


@needs_conversation_store
async def test_a_corrupt_summary_index_artifact_is_repaired(caplog: pytest.LogCaptureFixture) -> None:
    store = open_store('memory://')
    await store.put_artifacts('session-summaries', {'s': '["ok", 3'}, conversation_id='s')
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_context.session'):
        session = await ContextSession.open(store, 's', profile=summarising_profile([]))
    assert "artifact 'session-summaries'/'s'" in caplog.text
    await session.add_messages(long_chat())
    await session.messages_for_request()
    index = await store.get_artifact('session-summaries', 's')
    assert index is not None
    assert json.loads(index.value)


async def test_deeply_nested_tool_arguments_are_a_clear_error() -> None:
    request = ModelRequest(parts=[UserPromptPart('go')])
    deep = ModelResponse(parts=[ToolCallPart('t', nested(500), tool_call_id='deep')])
    session = ContextSession(session_id='deep-session')
    with pytest.raises(
        HistoryIntegrityError, match=r"message 1: session 'deep-session': the message nests too deeply"
    ):
        await session.add_messages([request, deep])
    assert session.messages() == []
    assert await session.store.load('deep-session') == []  # nothing stored, nothing half stored
    # Deep, but copyable: the store names the message it cannot serialize.
    too_deep = ModelResponse(parts=[ToolCallPart('t', nested(350), tool_call_id='deep')])
    with pytest.raises(StoreError, match=r"session 'deep-session': message 1 cannot be serialized"):
        await session.add_messages([request, too_deep])
    # Shallower nesting round-trips through a store, even past pydantic-core's 200-level JSON reader.
    fine = ModelResponse(parts=[ToolCallPart('t', nested(240), tool_call_id='deep')])
    await session.add_messages([request, fine])
    assert (await session.store.load('deep-session'))[1] == fine
