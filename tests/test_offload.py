"""A compile never holds its event loop for long: large new content is measured in a worker thread."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import threading
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    UserPromptPart,
)

from pydantic_ai_context import (
    ContextProfile,
    HeuristicCounter,
    TiktokenCounter,
    _offload,
    _scope,
    profile,
    profiles,
)
from pydantic_ai_context._markers import conversation_key
from pydantic_ai_context._offload import new_messages, warm_off_loop
from pydantic_ai_context.integrity import validate_view
from pydantic_ai_context.policies._base import SyncPolicy
from pydantic_ai_context.readback import archive
from pydantic_ai_context.readback import tools as readback_tools
from pydantic_ai_context.replay.recall import SpanCalls
from pydantic_ai_context.tokens import pieces
from pydantic_ai_context.views import CompileContext

from ._examples import examples
from .builders import History, Tool, long_text
from .strategies import any_histories
from .test_presets import make
from .test_warm import views_and_reasons


class ThreadNoting(HeuristicCounter):
    """Notes the thread that counts each large text."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[threading.Thread] = []

    def count_text(self, text: str) -> int:
        if len(text) >= 100_000:
            self.threads.append(threading.current_thread())
        return super().count_text(text)


def log_with_a_large_newest_result(steps: int = 12) -> list[ModelMessage]:
    h = History().user('Find why the import fails.', system='You are a coding agent.')
    for i in range(steps):
        h.step(Tool('execute_bash', {'command': f'run {i}'}, long_text(30, prefix=f'run {i}')))
    h.step(Tool('execute_bash', {'command': 'cat build.log'}, long_text(6_000, prefix='build.log')))
    return h.build()


async def test_large_new_content_is_counted_in_a_worker_thread_and_the_view_is_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = log_with_a_large_newest_result()
    counter = ThreadNoting()
    off = await profile('coding', context_window=16_000, counter=counter).compile(log)
    assert counter.threads  # the large result was counted ...
    assert all(t is not threading.main_thread() for t in counter.threads)  # ... off the loop's thread
    monkeypatch.setattr(_offload, 'OFFLOAD_CHARS', 10**12)  # everything on the loop, as before
    on_loop = ThreadNoting()
    on = await profile('coding', context_window=16_000, counter=on_loop).compile(log)
    assert on_loop.threads
    assert all(t is threading.main_thread() for t in on_loop.threads)
    assert on == off


async def test_small_new_content_stays_on_the_loop() -> None:
    log = log_with_a_large_newest_result()
    counter = HeuristicCounter()
    counter.count_messages(log[:-1])
    assert new_messages(counter, log) == log[-1:]  # only the tail the counter has not seen
    assert await warm_off_loop(counter, log, threshold=10**9) is False
    assert await warm_off_loop(counter, log) is True
    assert new_messages(counter, log) == []  # counted: the steps find it measured
    assert await warm_off_loop(counter, log) is False


def overhead_bench() -> Any:
    path = Path(__file__).resolve().parents[1] / 'bench' / 'overhead.py'
    spec = importlib.util.spec_from_file_location('overhead_bench', path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault('overhead_bench', module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize('shape', ['tool-loop', 'chat-tools', 'long-notes', 'observations', 'interleaved'])
def test_every_shape_the_overhead_benchmark_times_is_a_valid_history_of_its_size(shape: str) -> None:
    bench = overhead_bench()
    logs = bench.shape_logs(shape, 200)
    logs = logs if shape == 'interleaved' else [logs]
    assert abs(sum(len(log) for log in logs) - 200) <= 4
    for log in logs:
        validate_view(log)  # raises on an invalid history
    if shape == 'chat-tools':  # a user turn every 8 rounds: many finished runs
        prompts = [m for m in logs[0] if any(isinstance(p, UserPromptPart) for p in m.parts)]
        assert len(prompts) >= 200 // 18
    if shape == 'interleaved':  # four conversations, told apart by their opening
        assert len({str(log[0]) for log in logs}) == 4


class NotingThreads(SyncPolicy):
    """A synchronous policy of the kind a profile may run off the loop; notes where it ran."""

    name = 'noting_threads'

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        self.threads.append(threading.current_thread())
        return messages


def chat_with_tools(runs: int) -> list[ModelMessage]:
    h = History().user('task 0: look at the parser', system='You are a coding agent.')
    for run in range(runs):
        for i in range(3):
            h.step(Tool('execute_bash', {'command': f'pytest tests/test_{run}_{i}.py'}, long_text(20)))
        h.answer(f'Run {run} done.')
        h.user(f'task {run + 1}: the next module')
    return h.build()


async def test_a_long_log_is_compiled_in_a_worker_thread_and_a_short_one_on_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    noting = NotingThreads()
    p = ContextProfile(name='noting', steps=(noting,), counter=HeuristicCounter())
    log = chat_with_tools(4)
    await p.compile(log)
    assert noting.threads == [threading.main_thread()]
    monkeypatch.setattr(profiles, 'OFFLOAD_MESSAGES', len(log))
    await p.compile(log)
    assert noting.threads[-1] is not threading.main_thread()


async def test_a_step_waiting_for_another_compiles_work_waits_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # While one compile's work holds the profile (in a worker thread), another compile of the same
    # profile does not run the same policies beside it, nor block the loop waiting: it waits in a
    # worker thread too.
    noting = NotingThreads()
    p = ContextProfile(name='noting', steps=(noting,), counter=HeuristicCounter())
    p._work_lock.acquire()
    try:
        task = asyncio.create_task(p.compile(chat_with_tools(2)))
        for _ in range(20):
            await asyncio.sleep(0.005)  # the loop runs on
        assert not task.done()
        assert noting.threads == []
    finally:
        p._work_lock.release()
    await task
    assert len(noting.threads) == 1  # it ran once the lock was free


@pytest.mark.parametrize('name', ['coding', 'long_horizon', 'chat'])
@pytest.mark.parametrize('window', [128_000, 8_000])
async def test_views_events_and_the_next_requests_are_the_same_off_the_loop(
    name: str, window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = chat_with_tools(10)
    logs = [log[:k] for k in range(len(log) // 3, len(log) + 1, 7)] + [log]
    on_loop = await views_and_reasons(make(name, window), logs)
    monkeypatch.setattr(profiles, 'OFFLOAD_MESSAGES', 1)
    off_loop = await views_and_reasons(make(name, window), logs)
    assert off_loop == on_loop


async def test_compiles_of_one_profile_running_at_once_give_the_views_each_gives_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(profiles, 'OFFLOAD_MESSAGES', 60)  # the longer conversations go off the loop
    conversations = [chat_with_tools(runs) for runs in (2, 12, 5, 15)]
    alone = [await make('coding', 8_000).compile(log) for log in conversations]
    shared = make('coding', 8_000)
    together = await asyncio.gather(*(shared.compile(log) for log in conversations))
    assert list(together) == alone


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=any_histories, name=st.sampled_from(['coding', 'long_horizon', 'chat']))
def test_any_log_compiles_to_the_same_view_off_the_loop(log: list[ModelMessage], name: str) -> None:
    on_loop = asyncio.run(views_and_reasons(make(name, 6_000, reserved_output=500), [log]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(profiles, 'OFFLOAD_MESSAGES', 1)
        off_loop = asyncio.run(views_and_reasons(make(name, 6_000, reserved_output=500), [log]))
    assert off_loop == on_loop


@settings(max_examples=examples(200), deadline=None)
@given(
    text=st.lists(
        st.sampled_from(
            [
                'a',
                'Zq',
                '1',
                '42',
                '\n',
                '\r\n',
                ' ',
                '  ',
                '\t',
                'é',
                '中',
                '🙂',
                "'s",
                ':',
                '/',
                '\n\n',
                '_',
                '.',
            ]
        ),
        max_size=400,
    ).map(''.join),
    size=st.integers(min_value=1, max_value=64),
)
def test_a_long_text_counted_in_pieces_counts_what_it_counts_whole(text: str, size: int) -> None:
    counter = TiktokenCounter()
    if counter.encoding is None:
        pytest.skip('no tiktoken encoding loads here')
    found = list(pieces(text, size))
    assert ''.join(found) == text
    encode = counter.encoding.encode_ordinary
    assert sum(len(encode(piece)) for piece in found) == len(encode(text))


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [s for item in items for s in strings(item)]


def test_the_recorded_runs_count_the_same_in_pieces() -> None:
    counter = TiktokenCounter()
    if counter.encoding is None:
        pytest.skip('no tiktoken encoding loads here')
    encode = counter.encoding.encode_ordinary
    for path in sorted((Path(__file__).parent / 'data' / 'trajectories').glob('*.json')):
        text = '\n'.join(strings(json.loads(path.read_text())))  # file reads, logs, diffs, prose
        found = list(pieces(text, 4_096))
        assert len(found) > 10
        assert sum(len(encode(piece)) for piece in found) == len(encode(text)), path.name
        assert counter.count_text(text) == len(encode(text))


@settings(max_examples=examples(200), deadline=None)
@given(text=st.text(max_size=300), piece=st.integers(min_value=1, max_value=40))
def test_a_long_original_escaped_in_pieces_is_the_json_of_it_whole(text: str, piece: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(archive, '_ESCAPE_PIECE', piece)
        assert archive._encoded_text(text) == json.dumps(text, ensure_ascii=False)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=examples(200), deadline=None)
@given(value=json_values, piece=st.integers(min_value=1, max_value=16))
def test_a_message_with_long_text_is_archived_as_the_json_of_it_whole(value: Any, piece: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(archive, '_ESCAPE_PIECE', piece)
        assert archive._json_of(value) == json.dumps(value, ensure_ascii=False)


def edited_in_place(span: list[Any], n: int) -> bool:
    """Edit the span's last message in place (between compiles: a new generation, so the span is
    encoded whole again); whether it was a message that could be."""
    last = span[-1] if span else None
    if not isinstance(last, ModelRequest | ModelResponse):
        return False
    last.parts = [*last.parts]  # type: ignore[assignment]
    last.metadata = {'edited': n}
    return True


def stored(store: archive.MemoryReadbackStore) -> dict[str, Any]:
    return {key: json.loads(value) for key, value in store._entries.items()}


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log=any_histories,
    ends=st.lists(st.integers(min_value=1, max_value=80), min_size=1, max_size=5),
    earlier=st.booleans(),
    edit=st.booleans(),
)
def test_a_span_kept_again_longer_is_stored_as_when_kept_once(
    log: list[ModelMessage], ends: list[int], earlier: bool, edit: bool
) -> None:
    # A summary over a growing log keeps a span that begins with the previous one: the archive
    # encodes only the new messages, and what it stores is what a fresh archive stores.
    items: list[ModelMessage | str] = [*(['s0ld'] if earlier else []), *log]
    spans = [items[: min(end, len(items))] for end in sorted(ends)]
    grown = archive.ContextArchive()
    encoded: list[Any] = []
    encode = grown._message_json
    grown._message_json = lambda message, **kw: encoded.append(message) or encode(message, **kw)  # type: ignore[method-assign]
    scope = _scope.MemoScope()
    for n, span in enumerate(spans):
        edited = edit and n == 1 and edited_in_place(span, n)
        encoded.clear()
        with _scope.compiling(scope, log):
            grown.keep_span(f's{n}', span, conversation='c')
        before = 0 if n == 0 or edited else len(spans[n - 1])
        assert encoded == [m for m in span[before:] if not isinstance(m, str)]
        fresh = archive.ContextArchive()
        fresh.keep_span(f's{n}', span, conversation='c')
        key = f'{archive._SPAN_KEY}c/s{n}'
        assert grown.store.get(key) == fresh.store.get(key)
        assert stored(grown.store)[key] == {
            'items': [
                {'ref': item}
                if isinstance(item, str)
                else ModelMessagesTypeAdapter.dump_python([item], mode='json')[0]
                for item in span
            ]
        }
        results = {k for k in stored(fresh.store) if k.startswith(archive._RESULT_KEY)}
        assert results <= set(stored(grown.store))


def _read_back(kept: archive.ContextArchive, ref: str) -> tuple[str, str, frozenset[str]]:
    """What `read_context` shows of span `ref` (label and text) and the tool calls replay finds in it."""
    original = readback_tools._resolve(ref, [], readback_tools._Side(kept, 'c'))
    return original.what, original.text, SpanCalls(kept, 'c').of(ref)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log=any_histories,
    ends=st.lists(st.integers(min_value=1, max_value=80), min_size=2, max_size=5),
    edit=st.booleans(),
)
def test_a_long_span_kept_again_longer_names_the_one_before(
    log: list[ModelMessage], ends: list[int], edit: bool
) -> None:
    # Each summary of a growing log keeps a span that begins with the previous one. Once that one
    # is long, the new span names it by ref and holds only the new messages, and reading either
    # back (the read-back tools, replay's reach) gives what a span holding them all gives.
    spans = [log[: min(end, len(log))] for end in sorted(ends)]
    chained = archive.ContextArchive()
    scope = _scope.MemoScope()
    with patch.object(archive, '_CHAIN_CHARS', 0):
        for n, span in enumerate(spans):
            edited = edit and n == 1 and edited_in_place(span, n)
            with _scope.compiling(scope, log):
                chained.keep_span(f's{n}', span, conversation='c')
            document = stored(chained.store)[f'{archive._SPAN_KEY}c/s{n}']
            before = 0 if n == 0 or edited else len(spans[n - 1])
            new = [ModelMessagesTypeAdapter.dump_python([m], mode='json')[0] for m in span[before:]]
            assert document['items'] == ([{'ref': f's{n - 1}'}] if before else []) + new
            whole = archive.ContextArchive()
            whole.keep_span(f's{n}', span, conversation='c')
            assert _read_back(chained, f's{n}') == _read_back(whole, f's{n}')


def test_a_chain_of_many_summaries_reads_back_every_message() -> None:
    # One level of nesting per summary: far deeper than any span nested by hand.
    history = History().user('read every file')
    for i in range(60):
        history.step(Tool('cat', {'path': f'f{i}.py'}, f'contents of f{i}.py'))
    log = history.build()
    chained = archive.ContextArchive()
    scope = _scope.MemoScope()
    with patch.object(archive, '_CHAIN_CHARS', 0):
        for n in range(1, 61):
            with _scope.compiling(scope, log):
                chained.keep_span(f's{n}', log[: 2 * n], conversation='c')
    assert stored(chained.store)[f'{archive._SPAN_KEY}c/s60']['items'][0] == {'ref': 's59'}
    whole = archive.ContextArchive()
    whole.keep_span('s60', log[:120], conversation='c')
    label, text, calls = _read_back(chained, 's60')
    assert (label, text, calls) == _read_back(whole, 's60')
    assert label == 'span of 120 messages'
    assert len(calls) == 59


def test_a_span_named_in_a_cycle_is_read_once() -> None:
    # Only a store written by hand can name a span inside itself; reading it back still ends.
    kept = archive.ContextArchive()
    log = (
        History()
        .user('read two files')
        .step(Tool('cat', {'path': 'a'}, 'A'))
        .step(Tool('cat', {'path': 'b'}, 'B'))
        .build()
    )
    kept.keep_span('a', ['b', *log[:2]], conversation='c')
    kept.keep_span('b', ['a', *log[2:]], conversation='c')
    label, text, calls = _read_back(kept, 'a')
    assert label == f'span of {len(log)} messages'
    assert '(earlier span a: shown above)' in text
    assert calls == SpanCalls(kept, 'c').of('b')


def test_a_view_that_opens_otherwise_than_its_log_reads_the_logs_originals() -> None:
    # After a provider's compaction (or a repair in the opening) the view a compile returns can
    # open with another prompt than its log. A reader of that view, and a later log continuing
    # it, are the same conversation: they read the originals the compile kept.
    log = History().user('task 0: fix the tests').step(Tool('cat', {'path': 'a'}, 'A' * 50)).build()
    view = History().user('continue the task').step(Tool('cat', {'path': 'b'}, 'B' * 50)).build()
    assert conversation_key(view) != conversation_key(log)
    kept = archive.ContextArchive()
    sink = kept.sink(log, results=True)
    sink.keep_span('s1', log[:2])
    kept.compiled(sink, view)
    for reader in (view, [*view, *History().step(Tool('ls', {}, 'x')).build()]):
        conversation = kept.conversation_of(reader)
        assert conversation == sink.conversation
        assert kept.span('s1', conversation=conversation) == log[:2]
