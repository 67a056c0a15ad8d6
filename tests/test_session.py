"""ContextSession: the log stays whole, views are compiled, sessions resume, and tasks can share one."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai import __version__ as pydantic_ai_version
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import (
    ContextBudget,
    ContextProfile,
    HeuristicCounter,
    MemoryStore,
    SqliteStore,
    profile,
)
from pydantic_ai_context.policies.summarize import InMemorySummaryCache, summarize_window
from pydantic_ai_context.session import ContextSession, StoreSummaryCache, SummaryIndex, summary_index_key

from .builders import History, Tool

MAJOR = int(pydantic_ai_version.split('.')[0])
ELIDED = '[elided]'


def elide_old_answers(messages: list[ModelMessage]) -> list[ModelMessage]:
    """A visible, idempotent compaction: text answers older than the last two messages become a marker."""
    out: list[ModelMessage] = []
    for i, message in enumerate(messages):
        if isinstance(message, ModelResponse) and i < len(messages) - 2:
            parts = [TextPart(ELIDED) if isinstance(p, TextPart) else p for p in message.parts]
            if parts != message.parts:
                message = dataclasses.replace(message, parts=parts)
        out.append(message)
    return out


def eliding_profile() -> ContextProfile:
    return ContextProfile(
        name='eliding', steps=[elide_old_answers], counter=HeuristicCounter(), context_window=32_000
    )


def dump(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


def chat_log(turns: int) -> list[ModelMessage]:
    history = History()
    for i in range(turns):
        history.user(f'question {i}').answer(f'answer {i}')
    return history.messages


# --- add / view / log --------------------------------------------------------------------------


async def test_compaction_is_ephemeral_and_the_log_never_changes() -> None:
    store = MemoryStore()
    session = ContextSession(eliding_profile(), store=store, session_id='s')
    log = chat_log(3)
    log.append(ModelRequest(parts=[UserPromptPart('question 3')]))
    await session.add_messages(log)
    before = dump(session.messages())

    view = await session.messages_for_request()

    answers = [p.content for m in view for p in m.parts if isinstance(p, TextPart)]
    assert answers == [ELIDED, ELIDED, 'answer 2']  # the view is compacted ...
    assert dump(session.messages()) == before  # ... the log is not,
    assert dump(await store.load('s')) == before  # ... nor what is stored,
    assert dump(log) == before  # ... nor the caller's messages.
    assert await session.messages_for_request() == view  # compiling again gives the same view


async def test_add_message_copies_and_persists_one_append_per_call() -> None:
    appends: list[int] = []

    class CountingStore(MemoryStore):
        async def append(self, session_id: str, messages: Any) -> int:
            appends.append(len(messages))
            return await super().append(session_id, messages)

    store = CountingStore()
    session = ContextSession(store=store, session_id='s')
    parts: list[Any] = [UserPromptPart('hi')]
    request = ModelRequest(parts=parts)
    await session.add_message(request)
    await session.add_messages(
        [ModelResponse(parts=[TextPart('hello')]), ModelRequest(parts=[UserPromptPart('?')])]
    )
    await session.add_messages([])
    assert appends == [1, 2]
    parts.append(UserPromptPart('changed later'))  # the caller's object, not the session's
    assert len(session.messages()[0].parts) == 1
    assert dump(session.messages()) == dump(await store.load('s'))
    assert len(session) == 3


async def test_openai_dicts_in_and_out() -> None:
    session = ContextSession(profile('transparent'))
    await session.add_messages(
        [
            {'role': 'system', 'content': 'be brief'},
            {'role': 'user', 'content': 'weather?'},
            {
                'role': 'assistant',
                'content': None,
                'tool_calls': [
                    {'id': 'c1', 'type': 'function', 'function': {'name': 'wx', 'arguments': '{}'}}
                ],
            },
        ]
    )
    # Frameworks add tool results one at a time: separate requests in the log, merged in the view.
    await session.add_message({'role': 'tool', 'tool_call_id': 'c1', 'content': 'sunny'})
    await session.add_message(ModelResponse(parts=[TextPart('Sunny.')]))
    await session.add_message({'role': 'user', 'content': 'thanks'})
    assert [m.kind for m in session.messages()] == ['request', 'response', 'request', 'response', 'request']
    assert session.messages(format='openai') == session.to_openai()
    assert session.to_openai()[-3:] == [
        {'role': 'tool', 'tool_call_id': 'c1', 'content': 'sunny'},
        {'role': 'assistant', 'content': 'Sunny.'},
        {'role': 'user', 'content': 'thanks'},
    ]
    view = await session.messages_for_request()
    assert isinstance(view[-1], ModelRequest)


async def test_bad_dicts_name_their_index_and_store_nothing() -> None:
    session = ContextSession()
    good = ModelRequest(parts=[UserPromptPart('hi')])
    with pytest.raises(ValueError, match=r'message 2: unknown role .robot.'):
        await session.add_messages(
            [good, {'role': 'assistant', 'content': 'x'}, {'role': 'robot', 'content': 'x'}]
        )
    with pytest.raises(ValueError, match=r'message 0: missing "role"'):
        await session.add_message({'content': 'x'})
    with pytest.raises(ValueError, match=r'message 1: expected a ModelRequest'):
        await session.add_messages([good, 'text'])  # type: ignore[list-item]
    assert session.messages() == []
    assert await session.store.load(session.session_id) == []


async def test_set_messages_clear_conversation_and_stats() -> None:
    store = MemoryStore()
    session = ContextSession(store=store, session_id='s')
    history = History().user('list files', system='be brief').step(Tool('ls', {}, 'a.py')).answer('One file.')
    await session.set_messages(history.messages)
    assert len(await store.load('s')) == 4
    conversation = session.conversation()
    assert [m.kind for m in conversation] == ['request', 'response']
    stats = session.stats(budget=ContextBudget(context_window=10_000))
    assert (stats.messages, stats.user_turns, stats.tool_calls, stats.context_window) == (4, 1, 1, 10_000)
    await session.clear()
    assert session.messages() == []
    assert await store.load('s') == []
    assert [info.session_id for info in await store.sessions()] == ['s']


async def test_stats_count_the_tool_definitions_the_agent_sends() -> None:
    # `/history` in examples/chat.py used to say "tools 0 tokens" for an agent with tools.
    from pydantic_ai.models.test import TestModel

    agent = Agent(TestModel(call_tools=[]))

    @agent.tool_plain
    def read_log(name: str) -> str:
        """Read a log file."""
        return name

    session = ContextSession(store=MemoryStore())
    await session.run(agent, 'hello')
    stats = session.stats()
    assert stats.tools_tokens > 0
    assert stats.tools_tokens == session.profile.last_overhead.tools_tokens  # type: ignore[union-attr]


async def test_budget_from_explicit_value_else_from_the_model() -> None:
    seen: list[ContextBudget | None] = []

    def spy(messages: list[ModelMessage]) -> list[ModelMessage]:
        return messages

    class Spy:
        name = 'spy'

        def apply(self, messages: list[ModelMessage], context: Any) -> list[ModelMessage]:
            seen.append(context.budget)
            return spy(messages)

    session = ContextSession(ContextProfile(steps=[Spy()], counter=HeuristicCounter()))
    await session.add_message(ModelRequest(parts=[UserPromptPart('hi')]))
    explicit = ContextBudget(context_window=50_000, reserved_output=1_000)
    await session.messages_for_request(budget=explicit)
    await session.messages_for_request(model='openai:gpt-4o')
    assert seen[0] is explicit
    derived = seen[1]
    assert derived is not None
    assert derived.context_window == 128_000
    assert derived.limit == 128_000 - derived.reserved_output - derived.safety_tokens < 128_000
    assert derived.safety_tokens > 0


# --- resume ------------------------------------------------------------------------------------


async def test_resume_from_sqlite_gives_the_same_log_and_the_same_view(tmp_path: Path) -> None:
    path = tmp_path / 'sessions.db'
    store = await asyncio.to_thread(SqliteStore, path)
    session = await ContextSession.open(store, 'chat-7', profile=eliding_profile())
    await session.add_messages(chat_log(4))
    await session.add_message({'role': 'user', 'content': 'and now?'})
    view = await session.messages_for_request()
    log = session.messages()
    await store.close()

    # A new process, in effect: a new store object on the same file, a new profile object.
    store = await asyncio.to_thread(SqliteStore, path)
    try:
        resumed = await ContextSession.open(store, 'chat-7', profile=eliding_profile())
        assert dump(resumed.messages()) == dump(log)
        assert dump(await resumed.messages_for_request()) == dump(view)
        assert [info.session_id for info in await store.sessions()] == ['chat-7']
        assert (await ContextSession.open(store, 'unknown')).messages() == []
    finally:
        await store.close()


# --- concurrency -------------------------------------------------------------------------------


async def test_many_tasks_on_one_session_and_two_isolated_sessions(tmp_path: Path) -> None:
    store = await asyncio.to_thread(SqliteStore, tmp_path / 's.db')
    try:
        one = ContextSession(store=store, session_id='one')
        two = ContextSession(store=store, session_id='two')

        async def turn(session: ContextSession, n: int) -> None:
            await session.add_messages(
                [ModelRequest(parts=[UserPromptPart(f'q{n}')]), ModelResponse(parts=[TextPart(f'a{n}')])]
            )
            await session.messages_for_request()

        await asyncio.gather(*(turn(one, n) for n in range(60)), *(turn(two, 1000 + n) for n in range(20)))

        def pairs(messages: list[ModelMessage]) -> list[tuple[str, str]]:
            texts = [str(m.parts[0].content) for m in messages]  # type: ignore[union-attr]
            return list(zip(texts[::2], texts[1::2], strict=True))

        for session, numbers in ((one, range(60)), (two, range(1000, 1020))):
            got = pairs(session.messages())
            # Every add is whole and in one piece: each question is followed by its own answer.
            assert all(q[1:] == a[1:] for q, a in got)
            assert sorted(int(q[1:]) for q, _ in got) == list(numbers)
            assert dump(session.messages()) == dump(await store.load(session.session_id))
    finally:
        await store.close()


async def test_two_objects_on_one_session_id_reload_instead_of_diverging() -> None:
    store = MemoryStore()
    a = await ContextSession.open(store, 's')
    b = await ContextSession.open(store, 's')
    await a.add_message(ModelRequest(parts=[UserPromptPart('from a')]))
    await b.add_message(ModelResponse(parts=[TextPart('from b')]))
    assert [m.kind for m in b.messages()] == ['request', 'response']
    assert dump(b.messages()) == dump(await store.load('s'))


async def test_sessions_do_not_share_profile_state() -> None:
    shared = eliding_profile()
    a = ContextSession(shared)
    b = ContextSession(shared)
    assert a.profile is not b.profile
    assert a.profile is not shared
    await a.add_messages([*chat_log(3), ModelRequest(parts=[UserPromptPart('?')])])
    await a.messages_for_request()
    assert a.profile.events
    assert not b.profile.events
    # The profile the user holds records what its sessions did (`shared.run_events()` works).
    assert list(shared.events) == list(a.profile.events)


# --- running an agent --------------------------------------------------------------------------


def answering_model(seen: list[list[str]]) -> FunctionModel:
    """Calls `lookup` once per user turn, then answers; records the texts of every request's view."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append([str(p.content) for m in messages for p in m.parts if isinstance(p, TextPart)])
        last = messages[-1]
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart(f'answer after {len(messages)} messages')])
        return ModelResponse(parts=[ToolCallPart('lookup', {'q': 'x'})])

    return FunctionModel(respond)


def lookup_agent(seen: list[list[str]], **kwargs: Any) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(answering_model(seen), output_type=str, **kwargs)

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f'result for {q}'

    return agent


async def test_run_uses_the_view_and_appends_the_new_messages() -> None:
    seen: list[list[str]] = []
    session = ContextSession(eliding_profile())
    agent = lookup_agent(seen)
    for i in range(3):
        result = await session.run(agent, f'turn {i}')
        assert result.output.startswith('answer after')
    log = session.messages()
    assert len(log) == 12  # 3 runs x (prompt, call, result, answer)
    answers = [p.content for m in log for p in m.parts if isinstance(p, TextPart)]
    assert ELIDED not in answers  # the log keeps every answer ...
    assert ELIDED in seen[-1]  # ... while the model saw the compiled view
    assert dump(log) == dump(await session.store.load(session.session_id))


@pytest.mark.filterwarnings('ignore:.*history_processors.*:UserWarning')
async def test_run_keeps_the_full_log_when_the_integration_rewrites_the_run_history() -> None:
    # The destructive integrations: history_processors on 1.x, ProcessHistory on 2.x. The view
    # replaces the run's own history; the session still appends only what the run added.
    seen: list[list[str]] = []
    ctx_profile = eliding_profile()
    if MAJOR >= 2:
        agent = lookup_agent(seen, capabilities=[ctx_profile.process_history()])
    else:
        agent = lookup_agent(seen, history_processors=ctx_profile.history_processors)
    session = ContextSession(ctx_profile)
    await session.add_messages(chat_log(2))
    await session.run(agent, 'next', apply_profile=False)
    await session.run(agent, 'and again', apply_profile=False)
    answers = [p.content for m in session.messages() for p in m.parts if isinstance(p, TextPart)]
    assert answers[:2] == ['answer 0', 'answer 1']
    assert ELIDED not in answers
    assert ELIDED in seen[-1]
    assert len(session.messages()) == 4 + 8


async def test_run_refuses_a_second_history() -> None:
    with pytest.raises(TypeError, match='message_history'):
        await ContextSession().run(lookup_agent([]), 'hi', message_history=[])


async def test_a_failed_run_appends_nothing() -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError('provider down')

    session = ContextSession()
    await session.add_messages(chat_log(1))
    with pytest.raises(RuntimeError, match='provider down'):
        await session.run(Agent(FunctionModel(broken)), 'hi')
    assert len(session.messages()) == 2


# --- summaries across resume -------------------------------------------------------------------


def summarising_profile(calls: list[int], cache: Any = None) -> ContextProfile:
    def summariser(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return ModelResponse(parts=[TextPart(f'summary #{len(calls)}')])

    settings: dict[str, Any] = {}
    if cache is not None:
        settings['cache'] = cache
    step = summarize_window(
        trigger='messages',
        max_messages=8,
        keep_messages=4,
        step_messages=2,
        keep_current_run=False,
        summary_model=FunctionModel(summariser),
        **settings,
    )
    return ContextProfile(name='summarising', steps=[step], counter=HeuristicCounter(), context_window=32_000)


def long_chat() -> list[ModelMessage]:
    history = History()
    for i in range(10):
        history.user(f'question {i} ' + 'detail ' * 40).answer(f'answer {i} ' + 'words ' * 40)
    history.user('and finally?')
    return history.messages


async def test_a_resumed_session_does_not_pay_for_the_same_summary_twice(tmp_path: Path) -> None:
    path = tmp_path / 'sessions.db'
    calls: list[int] = []
    store = await asyncio.to_thread(SqliteStore, path)
    session = await ContextSession.open(store, 'long', profile=summarising_profile(calls))
    await session.add_messages(long_chat())
    view = await session.messages_for_request()
    assert len(view) < len(session.messages())
    assert any('summary #' in str(getattr(p, 'content', '')) for m in view for p in m.parts)
    paid = len(calls)
    assert paid >= 1
    assert await store.get_summary(summary_index_key('long'))
    await store.close()

    store = await asyncio.to_thread(SqliteStore, path)
    try:
        resumed = await ContextSession.open(store, 'long', profile=summarising_profile(calls))
        assert dump(await resumed.messages_for_request()) == dump(view)
        assert len(calls) == paid  # zero summariser calls after resume

        # The control: without the session's persisted summaries, the same compile pays again.
        fresh = ContextSession(summarising_profile(calls), store=MemoryStore())
        await fresh.add_messages(long_chat())
        await fresh.messages_for_request()
        assert len(calls) > paid
    finally:
        await store.close()


async def test_store_summary_cache_writes_through_to_the_policys_own_cache() -> None:
    inner = InMemorySummaryCache()
    inner.put('known-in-memory', 'shared summary')
    store = MemoryStore()
    cache = StoreSummaryCache(store, inner=inner)
    assert cache.get('known-in-memory') == 'shared summary'
    cache.put('new', 'fresh summary')
    assert inner.get('new') == 'fresh summary'
    assert sorted(await cache.flush()) == ['known-in-memory', 'new']
    assert await cache.flush() == []
    assert await store.get_summary('known-in-memory') == 'shared summary'
    assert cache.used == ['known-in-memory', 'new']
    assert cache.get('missing') is None


async def test_store_summary_cache_counts_its_writes_with_the_inner_caches() -> None:
    """`writes` changes with every put, preload and write to the inner cache (another profile's), so
    `summarize_window` looks again the spans it found nothing for; an inner cache that does not
    count its writes makes it `None` (looked up every time)."""
    inner = InMemorySummaryCache()
    store = MemoryStore()
    await store.put_summary('stored', 'a summary in the store')
    cache = StoreSummaryCache(store, inner=inner)
    seen = [cache.writes]
    cache.put('new', 'fresh summary')
    seen.append(cache.writes)
    inner.put('shared', 'written by another profile')
    seen.append(cache.writes)
    await cache.preload(['stored'])
    seen.append(cache.writes)
    assert cache.get('missing') is None
    assert [*seen, cache.writes] == [0, 2, 3, 4, 4]

    class DictCache:
        def get(self, key: str) -> str | None:
            return None

        def put(self, key: str, summary: str) -> None:
            pass

    assert StoreSummaryCache(store, inner=DictCache()).writes is None
    assert StoreSummaryCache(store).writes == 0


async def test_the_sessions_profile_keeps_the_policys_cache_as_inner() -> None:
    calls: list[int] = []
    shared = InMemorySummaryCache()
    first = ContextSession(summarising_profile(calls, cache=shared))
    await first.add_messages(long_chat())
    await first.messages_for_request()
    paid = len(calls)
    # Another session with an identical log, on another store: the shared in-memory cache answers.
    second = ContextSession(summarising_profile(calls, cache=shared))
    await second.add_messages(first.messages())
    await second.messages_for_request()
    assert len(calls) == paid


# --- docs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    'obj', [ContextSession, StoreSummaryCache, SummaryIndex, ContextSession.run], ids=lambda o: o.__qualname__
)
def test_docstring_example_runs(obj: Any) -> None:
    doc = inspect.getdoc(obj) or ''
    assert doc.split('\n')[0].endswith('.'), 'the docstring opens with one sentence'
    [block] = re.findall(r'```python\n(.*?)```', doc, flags=re.DOTALL)
    exec(compile(textwrap.dedent(block), f'<{obj.__qualname__} example>', 'exec'), {'__name__': 'example'})


async def test_run_keeps_the_gauge_on_the_profile_the_user_passed() -> None:
    # getting-started reads `ctx_profile.last_usage`; the session compiles with its own copy.
    from pydantic_ai.models.test import TestModel

    ctx_profile = profile('coding', context_window=32_000)
    session = ContextSession(ctx_profile, store=MemoryStore())
    await session.run(Agent(TestModel(call_tools=[])), 'hello')
    assert session.profile is not ctx_profile
    assert ctx_profile.last_usage is not None
    assert ctx_profile.last_usage == session.profile.last_usage
    assert ctx_profile.last_overhead == session.profile.last_overhead
