"""Conversations stay apart in the read-back side store (issue 23, item 1).

Two chats converted from OpenAI dicts carry no pydantic-ai ids and the same fixed timestamps: when
they open alike ("hi", or no user prompt at all), their first user prompt cannot tell them apart.
A profile that serves both must never let one read or search the other's originals.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import HeuristicCounter, profile
from pydantic_ai_context.archive import ContextArchive
from pydantic_ai_context.openai_format import from_openai
from pydantic_ai_context.readback import read_context, search_context

SECRET = 'ALICESECRET password=hunter2'


def chat(opening: str | None, secret: str, n: int = 8) -> list[dict[str, Any]]:
    """An OpenAI-format chat: `opening` (None: no user prompt), then `n` tool steps with big outputs."""
    messages: list[dict[str, Any]] = [{'role': 'system', 'content': 'You are helpful.'}]
    if opening is not None:
        messages.append({'role': 'user', 'content': opening})
    for i in range(n):
        call = f'call_{i}'
        messages.append(
            {
                'role': 'assistant',
                'content': None,
                'tool_calls': [
                    {'id': call, 'type': 'function', 'function': {'name': 'read_file', 'arguments': '{}'}}
                ],
            }
        )
        body = '\n'.join(f'{secret} line {i}.{j} ' + 'x' * 60 for j in range(40))
        messages.append({'role': 'tool', 'tool_call_id': call, 'content': body})
    messages.append({'role': 'assistant', 'content': 'done'})
    messages.append({'role': 'user', 'content': 'and now?'})
    return messages


def coding() -> Any:
    return profile('coding', context_window=8_000, counter=HeuristicCounter())


def leaked(text: str) -> bool:
    return 'hunter2' in text


async def try_read(ref: str, view: list[ModelMessage], p: Any, **kwargs: Any) -> str:
    try:
        return read_context(ref, view, p.archive, **kwargs)
    except ModelRetry as exc:
        return str(exc)


async def try_search(query: str, view: list[ModelMessage], p: Any, **kwargs: Any) -> str:
    try:
        return search_context(query, view, p.archive, **kwargs)
    except ModelRetry as exc:
        return str(exc)


@pytest.mark.parametrize('opening', ['hi', '', None])
async def test_converted_chats_that_open_alike_never_share_originals(opening: str | None) -> None:
    # The reproducer: B's search_context listed A's stored tool outputs, B read A's refs.
    p = coding()
    a = from_openai(chat(opening, SECRET))
    b = from_openai(chat(opening, 'BOBDATA token=abc'))
    va = await p.compile(a)
    vb = await p.compile(b)
    assert await try_search('ALICESECRET password', vb, p) == (
        "nothing earlier in this conversation matches 'ALICESECRET password'; try other words."
    )
    for i in range(8):
        assert not leaked(await try_read(f'call_{i}', vb, p))
    # A still reads its own originals, B its own.
    assert leaked(await try_search('ALICESECRET password', va, p))
    assert 'BOBDATA' in await try_search('BOBDATA token', vb, p)


async def test_a_view_passed_on_stays_its_conversation() -> None:
    # A caller that compiles, then passes the view on with new messages (as pydantic-ai 1.x does).
    p = coding()
    a = from_openai(chat('hi', SECRET))
    b = from_openai(chat('hi', 'BOBDATA token=abc'))
    va = await p.compile(a)
    await p.compile(b)
    more = from_openai(chat('hi', SECRET, n=2))[-3:]
    va2 = await p.compile([*va, *more])
    assert leaked(await try_search('ALICESECRET password', va2, p))


async def test_an_explicit_conversation_key_reads_back_across_profiles() -> None:
    # With a key, a log that carries no id reads back what another process's profile kept (one store).
    from pydantic_ai_context.archive import MemoryReadbackStore

    store = MemoryReadbackStore()
    first = profile('coding', context_window=8_000, counter=HeuristicCounter(), readback_store=store)
    second = profile('coding', context_window=8_000, counter=HeuristicCounter(), readback_store=store)
    a = from_openai(chat('hi', SECRET))
    b = from_openai(chat('hi', 'BOBDATA token=abc'))
    va = await first.compile(a, conversation='alice')
    await first.compile(b, conversation='bob')
    assert leaked(read_context('call_0', va, second.archive, conversation='alice'))
    assert not leaked(await try_read('call_0', va, second, conversation='bob'))
    assert not leaked(await try_search('ALICESECRET', va, second, conversation='bob'))


async def test_the_same_profile_from_two_tasks() -> None:
    p = coding()
    chats = {'alice': chat('hi', SECRET, n=10), 'bob': chat('hi', 'BOBDATA token=abc', n=10)}

    async def serve(name: str) -> tuple[str, list[ModelMessage]]:
        log = from_openai(chats[name])
        view: list[ModelMessage] = []
        for end in range(4, len(log) + 1, 2):  # the conversation grows, request by request
            view = await p.compile(log[:end])
            await asyncio.sleep(0)
        return name, view

    views = dict(await asyncio.gather(serve('alice'), serve('bob')))
    assert not leaked(await try_search('ALICESECRET password', views['bob'], p))
    for i in range(10):
        assert not leaked(await try_read(f'call_{i}', views['bob'], p))
    assert leaked(await try_search('ALICESECRET password', views['alice'], p))


async def test_two_live_runs_from_two_tasks_on_converted_histories() -> None:
    # Two agent runs at once through one profile (as a capability), each continuing a converted chat
    # that opens with "hi": the model asks search_context for the other user's secret.
    p = coding()
    answers: dict[str, str] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if getattr(last, 'tool_name', None) == 'search_context':
            return ModelResponse(parts=[TextPart(json.dumps(str(last.content)))])
        return ModelResponse(
            parts=[ToolCallPart('search_context', {'query': 'ALICESECRET password'}, tool_call_id='s1')]
        )

    agent = Agent(FunctionModel(model), capabilities=[p])

    async def serve(name: str, secret: str) -> None:
        history = from_openai(chat('hi', secret))
        result = await agent.run('what did the files say?', message_history=history)
        answers[name] = result.output

    await asyncio.gather(serve('alice', SECRET), serve('bob', 'BOBDATA token=abc'))
    assert not leaked(answers['bob'])


def test_a_pinned_archive_ignores_what_the_messages_hold() -> None:
    a = from_openai(chat('hi', SECRET))
    archive = ContextArchive(conversation='session-1')
    other = ContextArchive(conversation='session-2')
    assert archive.conversation_of(a) == archive.conversation_of([]) != other.conversation_of(a)


@pytest.mark.parametrize('call', [read_context, search_context])
def test_a_huge_ref_or_query_is_echoed_clipped(call: Any) -> None:
    # A 1 MB argument made a 1 MB tool result.
    with pytest.raises(ModelRetry) as caught:
        call('zq' * 500_000, from_openai(chat('hi', SECRET, n=1)), ContextArchive())
    assert len(str(caught.value)) < 500
    assert '1,000,000 characters' in str(caught.value)


def test_a_converted_chat_continued_by_runs_is_named_by_their_conversation_id() -> None:
    # The compile inside the run (with its RunContext) and a reader of the stored log afterwards
    # (without one) name the conversation alike: by the id pydantic-ai gave the runs' messages.
    import dataclasses
    from types import SimpleNamespace

    from pydantic_ai_context._markers import conversation_identity

    converted = from_openai(chat('hi', SECRET, n=2))
    assert conversation_identity(converted) is None
    continued = [*converted, dataclasses.replace(converted[-1], conversation_id='conv-7')]
    run = SimpleNamespace(conversation_id='conv-7')
    assert conversation_identity(continued) == conversation_identity(converted, run) is not None
    other = [*converted, dataclasses.replace(converted[-1], conversation_id='conv-8')]
    assert conversation_identity(other) != conversation_identity(continued)


def test_first_conversation_id_resumed_between_compiles_equals_a_fresh_scan() -> None:
    """Issue 22: during a compile the scan for the first conversation id is a fold resumed from the
    previous list (only messages a response follows; the open tail is read as it is): lists that
    branch off, end earlier or get an id filled in give what a fresh scan does."""
    import dataclasses

    from pydantic_ai.messages import ModelRequest, UserPromptPart

    from pydantic_ai_context._markers import first_conversation_id
    from pydantic_ai_context._scope import MemoScope, compiling

    if not hasattr(ModelRequest(parts=[]), 'conversation_id'):
        pytest.skip('messages carry no conversation id on this pydantic-ai')

    def fresh(messages: list[ModelMessage]) -> Any:
        return next((m.conversation_id for m in messages if getattr(m, 'conversation_id', None)), None)

    log: list[ModelMessage] = []
    for i in range(10):
        log.append(ModelRequest(parts=[UserPromptPart(f'q{i}')]))
        log.append(ModelResponse(parts=[TextPart(f'a{i}')]))
    log.append(ModelRequest(parts=[UserPromptPart('last')]))
    named = [*log[:14], dataclasses.replace(log[14], conversation_id='c-14'), *log[15:]]
    later = [*log[:16], dataclasses.replace(log[16], conversation_id='c-16'), *log[17:]]
    scope = MemoScope()
    for messages in (log[:5], log, named, log[:15], named[:16], log, named):
        with compiling(scope, log):
            assert first_conversation_id(messages) == fresh(messages)
    view = [*log[:-1], ModelRequest(parts=[UserPromptPart('last')])]
    with compiling(scope, log):
        assert first_conversation_id(view) is None
        view[-1].conversation_id = 'filled'  # the open request, in place
        assert first_conversation_id(view) == 'filled'
    with compiling(MemoScope(), log):  # one fold only: what it read past the branch is undone
        for messages in (named[:-1], log[:-1], named[:-1], later[:-1]):
            assert first_conversation_id(messages) == fresh(messages)


async def test_a_steady_compile_reads_the_new_messages_for_the_conversation_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A log no id names is fingerprinted for the archive: whether one does is asked before the
    compile's steps, inside its scope, so the scan resumes from the previous compile's."""
    from pydantic_ai_context import _markers

    read: list[int] = []
    extend = _markers._ConversationIds.extend

    def counted(self: Any, messages: Any) -> None:
        read.append(len(messages) - len(self.messages))
        extend(self, messages)

    monkeypatch.setattr(_markers._ConversationIds, 'extend', counted)
    log = from_openai(
        [{'role': 'user', 'content': 'go'}]
        + [
            m
            for i in range(100)
            for m in ({'role': 'assistant', 'content': f'a{i}'}, {'role': 'user', 'content': f'q{i}'})
        ]
    )
    p = profile('coding', context_window=32_000, counter=HeuristicCounter())
    await p.compile(log[:-2])
    read.clear()
    await p.compile(log)
    assert read
    assert sum(read) <= 4, 'only the new messages are read'


async def test_the_conversations_told_apart_without_an_id_are_bounded() -> None:
    """Per-conversation state stops growing at the archive's cap; within it, reading back is unchanged."""
    p = coding()
    p.archive.max_conversations = 5
    chats = [from_openai(chat(f'question {k}', f'SECRET{k} password=hunter{k}', n=4)) for k in range(12)]
    views = []
    for k, log in enumerate(chats):
        views.append(await p.compile(log))
        assert len(p.archive._lineages) == min(k + 1, 5)  # growth stops at the cap
    # The 5 most recently compiled read their own originals back, as without a cap.
    for k in range(7, 12):
        assert f'SECRET{k}' in await try_search(f'SECRET{k} password', views[k], p)
    # One forgotten: its log is a new conversation, whose originals the reader no longer reaches.
    assert p.archive.conversation_of(chats[0]) is None
    with pytest.raises(ValueError, match='max_conversations'):
        ContextArchive(max_conversations=0)
