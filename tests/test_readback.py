"""Nothing is lost: every marker names a ref, and `read_context` / `search_context` read originals back
(issue 10), on pydantic-ai 2.x (the log is whole) and where the view replaces the history (1.x,
`process_history()`: the side store)."""

from __future__ import annotations

import copy
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import (
    BinaryContent,
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import ContextBudgetExceeded, ContextProfile, HeuristicCounter, profile
from pydantic_ai_context._markers import span_ref
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR, is_failed_result, marker, part_text
from pydantic_ai_context.archive import ContextArchive, MemoryReadbackStore
from pydantic_ai_context.readback import (
    READBACK_INSTRUCTION,
    _search,
    read_context,
    search_context,
    shows_markers,
    with_readback_instruction,
)
from pydantic_ai_context.replay import extractive_summary_model

from . import data
from ._examples import examples
from .builders import History, Tool, long_text
from .invariants import assert_all
from .strategies import PNG, CompactionPart, any_histories

PRESETS = ('coding', 'chat', 'long_horizon')


def source(i: int) -> str:
    body = '\n'.join(f'value_{i}_{j} = {j}' for j in range(40))
    return f'# module {i}\n{body}\nSECRET_{i} = "token-{i}"\n'


FILES = {f'src/mod_{i}.py': source(i) for i in range(30)}


@dataclass
class Scripted:
    """A FunctionModel that plays `actions` in order and records what each request sent."""

    actions: list[ModelResponse]
    seen: list[tuple[list[ModelMessage], AgentInfo]] = field(default_factory=list)

    def model(self) -> FunctionModel:
        steps: Iterator[ModelResponse] = iter(self.actions)

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.seen.append((list(messages), info))
            return next(steps)

        return FunctionModel(respond)


def call(tool: str, args: dict[str, Any], call_id: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=call_id)])


def reading_script() -> Scripted:
    reads = [call('read_file', {'path': f'src/mod_{i}.py'}, f'c{i + 1}') for i in range(30)]
    return Scripted(
        [
            *reads,
            call('read_context', {'ref': 'c1'}, 'r1'),
            call('search_context', {'query': 'SECRET_7 = "token-7"'}, 'r2'),
            call('read_context', {'ref': 'no-such-ref'}, 'r3'),
            ModelResponse(parts=[TextPart('done')]),
        ]
    )


def coding_profile(**overrides: Any) -> ContextProfile:
    return profile(
        'coding', context_window=128_000, counter=HeuristicCounter(), keep_recent=2, step=5, **overrides
    )


def agent_for(path: str, p: ContextProfile, model: FunctionModel) -> Agent[None, str]:
    if path == 'capability':
        agent: Agent[None, str] = Agent(model, capabilities=[p])
    elif PYDANTIC_AI_MAJOR >= 2:
        agent = Agent(model, capabilities=[p.process_history()], toolsets=[p.toolset])
    else:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            agent = Agent(model, history_processors=p.history_processors, toolsets=[p.toolset])

    @agent.tool_plain
    def read_file(path: str) -> str:
        return FILES[path]

    return agent


def part_with_id(messages: list[ModelMessage], call_id: str) -> Any:
    return next(p for m in messages for p in m.parts if getattr(p, 'tool_call_id', None) == call_id)


def result_with_id(messages: list[ModelMessage], call_id: str) -> Any:
    return next(
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if getattr(p, 'tool_call_id', None) == call_id
    )


# --- an agent reads back what its view left out -------------------------------------------------------


@pytest.mark.parametrize('path', ['capability', 'history_processors'])
async def test_agent_reads_back_a_masked_read_and_searches_another(path: str) -> None:
    script = reading_script()
    p = coding_profile()
    result = await agent_for(path, p, script.model()).run('read every module')
    assert result.output == 'done', 'a bad ref is a failed tool result: the run goes on'
    seen = script.seen

    # The request that calls read_context: the first read is masked and names its ref.
    view, info = seen[30]
    masked = result_with_id(view, 'c1')
    assert marker(masked)['kind'] == 'masked'
    assert marker(masked)['ref'] == 'c1'
    assert masked.content.endswith("[original: read_context('c1')]")
    assert 'SECRET_0' not in masked.content
    assert {'read_context', 'search_context'} <= {t.name for t in info.function_tools}

    # read_context('c1') returned the original line.
    page = result_with_id(seen[31][0], 'r1')
    assert page.content.startswith('[c1: read_file result, lines 1-43 of 43]')
    assert 'SECRET_0 = "token-0"' in page.content

    # search_context found another masked read (c8) from a line of its content.
    assert marker(result_with_id(seen[31][0], 'c8'))['kind'] == 'masked'
    hits = result_with_id(seen[32][0], 'r2').content.splitlines()
    assert hits[1].startswith('- c8 (read_file result)')
    assert 'SECRET_7' in hits[1]

    # The bad ref came back as a failed tool result the model could act on.
    retry = result_with_id(seen[33][0], 'r3')
    assert is_failed_result(retry) or PYDANTIC_AI_MAJOR < 2  # 1.x: an `Error:` result
    assert "unknown ref 'no-such-ref'" in part_text(retry)

    # Where the log stays whole (2.x capability) it is untouched; elsewhere the side store had c1.
    logged = result_with_id(result.all_messages(), 'c1')
    if path == 'capability' and PYDANTIC_AI_MAJOR >= 2:
        assert logged.content == FILES['src/mod_0.py']
    else:
        assert marker(logged)['kind'] == 'masked'
        kept = p.archive.result('c1', conversation=p.archive.conversation_of(result.all_messages()))
        assert kept == ('read_file', FILES['src/mod_0.py'])


@pytest.mark.parametrize('path', ['capability', 'history_processors'])
async def test_instruction_appears_only_when_the_view_shows_markers(path: str) -> None:
    script = reading_script()
    await agent_for(path, coding_profile(), script.model()).run('read every module')
    shown = [READBACK_INSTRUCTION in (info.instructions or '') for _, info in script.seen]
    markers = [shows_markers(messages) for messages, _ in script.seen]
    assert not markers[0]
    assert any(markers)
    first = markers.index(True)
    assert all(markers[first:]), 'markers stay once the view has one'
    if path == 'capability':
        # Added after compiling: from the very request whose view first shows a marker.
        assert shown == markers
    else:
        # A toolset's instructions are resolved before the history processors compile: the history
        # (the previous view) shows markers from the next request on.
        assert shown == [False] * (first + 1) + [True] * (len(shown) - first - 1)
    # Same text every time it appears: the cached prefix holding it stays valid.
    texts = {info.instructions for (_, info), on in zip(script.seen, shown, strict=True) if on}
    assert len(texts) == 1


async def test_no_markers_no_instruction_and_transparent_has_no_tools() -> None:
    script = Scripted(
        [call('read_file', {'path': 'src/mod_0.py'}, 'c1'), ModelResponse(parts=[TextPart('ok')])]
    )
    await agent_for('capability', coding_profile(), script.model()).run('read one')
    assert not any(READBACK_INSTRUCTION in (info.instructions or '') for _, info in script.seen)
    assert 'read_context' in {t.name for t in script.seen[0][1].function_tools}

    plain = Scripted([ModelResponse(parts=[TextPart('hi')])])
    await Agent(plain.model(), capabilities=[profile('transparent')]).run('hello')
    assert plain.seen[0][1].function_tools == []
    assert coding_profile(readback=False).get_toolset() is None


async def test_side_store_serves_a_resumed_process_on_the_destructive_path() -> None:
    """1.x-style history replacement with a user's store: a later profile on the same store reads back."""

    class DictStore:
        def __init__(self) -> None:
            self.data: dict[str, str] = {}

        def get(self, key: str) -> str | None:
            return self.data.get(key)

        def put(self, key: str, value: str) -> None:
            self.data[key] = value

    store = DictStore()
    script = reading_script()
    result = await agent_for('history_processors', coding_profile(readback_store=store), script.model()).run(
        'go'
    )
    assert result.output == 'done'
    assert any(key.endswith('/c1') for key in store.data)
    history = result.all_messages()
    assert marker(result_with_id(history, 'c1'))['kind'] == 'masked', 'the history holds only the marker'
    resumed = coding_profile(readback_store=store)
    page = read_context('c1', history, resumed.archive)
    assert 'SECRET_0 = "token-0"' in page
    hits = search_context('token-12', history, resumed.archive).splitlines()
    assert hits[1].startswith('- c13 ')


# --- every marker names a ref that reads back -----------------------------------------------------------


def busy_log() -> list[ModelMessage]:
    """Two runs: a finished one (digested by isolate) and a long one with re-reads and big outputs."""
    h = History(stamp_runs=True).user('List the app files.', system='You are a coding agent.')
    h.step(Tool('execute_bash', {'command': 'ls src/app'}, 'src/app/views.py\nsrc/app/models.py', id='ls1'))
    h.answer('Two files: views.py and models.py.')
    h.user('Fix the failing test in src/app/models.py.')
    for i in range(24):
        if i % 6 in (0, 1):
            tool = Tool(
                'read_file', {'path': 'src/app/models.py'}, long_text(80, prefix='models.py'), id=f'rd{i}'
            )
        elif i % 6 == 3:
            tool = Tool(
                'execute_bash',
                {'command': 'pytest -q'},
                long_text(400, prefix=f'tests/test_{i}.py'),
                id=f'pt{i}',
            )
        else:
            tool = Tool(
                'read_file',
                {'path': f'src/app/m{i}.py'},
                f'UNIQUE-{i}\n' + long_text(40, prefix=f'm{i}'),
                id=f'm{i}',
            )
        h.step(tool)
    return h.build()


def refs_in(view: list[ModelMessage]) -> dict[str, str]:
    """Every ref a marker names, with the marker kind."""
    found: dict[str, str] = {}
    for message in view:
        for obj in (message, *message.parts):
            outer = marker(obj)
            # A drop note added to a request that already is a marker nests its record under it.
            for record in (outer, (outer or {}).get('dropped')):
                if isinstance(record, dict) and isinstance(record.get('ref'), str):
                    found[record['ref']] = record['kind']
                    text = (
                        part_text(obj)
                        if obj is not message
                        else '\n'.join(part_text(p) for p in message.parts)
                    )
                    assert f"[original: read_context('{record['ref']}')]" in text, (
                        'the marker text names its ref'
                    )
    return found


def original_text(log: list[ModelMessage], call_id: str) -> str:
    return part_text(result_with_id(log, call_id))


def read_all(ref: str, log: list[ModelMessage], archive: ContextArchive) -> str:
    """Every page of `ref`, following each header's next offset."""
    pages: list[str] = []
    offset: int | None = 0
    while offset is not None:
        header, _, body = read_context(ref, log, archive, offset=offset).partition('\n')
        pages.append(body)
        more = re.search(r'offset=(\d+)\)\]$', header)
        offset = int(more.group(1)) if more else None
    return '\n'.join(pages)


def make(name: str, window: int, **overrides: Any) -> ContextProfile:
    return profile(
        name,
        context_window=window,
        counter=HeuristicCounter(),
        summary_model=extractive_summary_model(),
        **overrides,
    )


@pytest.mark.parametrize('name', PRESETS)
async def test_every_marker_names_a_ref_that_reads_back_and_survives_a_view_of_a_view(name: str) -> None:
    log = busy_log()
    p = make(name, 16_000, keep_recent=2, step=3)
    view = await p.compile(log)
    assert await p.compile(view) == view, 'idempotent with refs'
    refs = refs_in(view)
    assert refs
    for ref, kind in refs.items():
        for source_log in (log, view):  # the whole log (2.x), or only the view (the side store serves)
            body = read_all(ref, source_log, p.archive)
            if re.fullmatch(r's[0-9a-f]{8}', ref):
                assert kind in {'isolated', 'dropped', 'summary'}
                assert 'assistant called' in body or 'user:' in body
            else:
                assert body == original_text(log, ref), f'{kind} {ref} reads back its original'
    if name == 'coding':
        kinds = set(refs.values())
        assert {'isolated', 'masked', 'superseded'} <= kinds, kinds
        digest = next(r for r, k in refs.items() if k == 'isolated')
        assert 'src/app/views.py' in read_context(digest, view, p.archive), (
            "the finished run's trace reads back"
        )


async def test_destructive_compiles_keep_every_original() -> None:
    """pydantic-ai 1.x: each compile's input is the previous view plus the new messages."""
    log = busy_log()
    # Small enough that masking alone does not fit: steps are dropped (or summarised) too, not only
    # fresh results clamped (`clamp_fresh`: at 3,000 tokens clamping them was enough).
    p = make('long_horizon', 2_200, keep_recent=2, step=3)
    history: list[ModelMessage] = []
    consumed = 0
    for end in range(1, len(log) + 1, 2):
        history = [*history, *log[consumed:end]]
        consumed = end
        if isinstance(history[-1], ModelRequest):
            history = await p.compile(history)
    refs = refs_in(history)
    assert any(k in {'dropped', 'summary'} for k in refs.values()), refs
    for ref in refs:
        read_context(ref, history, p.archive)
    # A result compacted early and summarised away later is still there, through the spans that held it.
    assert not any(getattr(part, 'tool_call_id', None) == 'm2' for m in history for part in m.parts)
    assert 'UNIQUE-2' in read_context('m2', history, p.archive)
    assert search_context('UNIQUE-2', history, p.archive).splitlines()[1].startswith('- m2 ')


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=any_histories)
async def test_invariants_hold_and_every_ref_resolves(log: list[ModelMessage]) -> None:
    p = make('long_horizon', 6_000, reserved_output=500, keep_recent=1, step=2)
    snapshot = copy.deepcopy(log)
    try:
        view = await p.compile(log)
    except ContextBudgetExceeded:
        return
    assert_all(log, snapshot, view)
    assert await p.compile(view) == view
    for ref in refs_in(view):
        read_context(ref, view, p.archive, limit=100_000)


async def test_a_log_opening_with_a_follow_up_before_the_runs_prompt_reads_its_records_back() -> None:
    # Sent as one request, with the run's id: the view is named by that id, so must the log be.
    h = History(stamp_runs=True).user('task 0: read a.py')
    h.step(Tool('read_file', {'path': 'a.py'}, long_text(40, prefix='a.py')), text='Reading.')
    h.answer('a.py is fine.')
    h.user('task 1: and b.py?')
    log = [ModelRequest(parts=[UserPromptPart('and also this')]), *h.build()]
    p = make('long_horizon', 6_000, reserved_output=500)
    view = await p.compile(log)
    refs = refs_in(view)
    assert list(refs.values()) == ['isolated'], 'the finished run is isolated into a record'
    for ref in refs:
        assert 'a.py 39: ' in read_context(ref, view, p.archive, limit=100_000)


async def test_a_view_opening_at_a_later_run_than_its_log_reads_the_logs_originals() -> None:
    """Found by the property above (a generated log, kept as it was): a provider's compaction in the
    first response is a boundary, so the view opens after it at the next run's prompt, whose run id
    names the conversation otherwise than the log's opening run. The view's readers, its recompile
    and a log continuing it still reach the summary's span kept under the log's conversation."""
    log = data.load_trajectory(data.DATA / 'readback_view_opens_at_a_later_run.json')
    p = make('long_horizon', 6_000, reserved_output=500, keep_recent=1, step=2)
    view = await p.compile(log)
    assert p.archive.conversation_of(view) == p.archive.conversation_of(log) is not None
    refs = refs_in(view)
    assert 'summary' in refs.values()
    continued = [*view, ModelResponse(parts=[TextPart('Done.')])]
    for viewed in (view, continued):
        for ref in refs:
            assert read_context(ref, viewed, p.archive, limit=100_000)
    assert await p.compile(view) == view


@pytest.mark.skipif(CompactionPart is None, reason='pydantic-ai without CompactionPart')
async def test_a_log_whose_first_prompt_is_tool_content_reads_it_back_once_masked() -> None:
    # After a provider's compaction the window opens with a step; its screenshot (content the tool
    # returned beside its result) is masked with the result, so it does not name the conversation.
    assert CompactionPart is not None
    compaction = CompactionPart(content=None, id='cmp_1', provider_name='openai', provider_details={})
    h = History()
    for i in range(1, 6):
        h.step(Tool('read_file', {'path': f'm{i}.py'}, long_text(40, prefix=f'm{i}.py')), text=f'Step {i}.')
    log = h.build()
    log[0] = ModelResponse(parts=[compaction, *log[0].parts])
    screenshot = UserPromptPart(['screenshot:', BinaryContent(PNG, media_type='image/png')])
    log[1] = ModelRequest(parts=[*log[1].parts, screenshot])
    p = make('long_horizon', 128_000, keep_recent=1, step=2)
    view = await p.compile(log)
    first = log[1].parts[0].tool_call_id
    assert first in refs_in(view), 'the first result is masked'
    assert 'm1.py 39: ' in read_context(first, view, p.archive, limit=100_000)


async def test_a_log_opening_with_a_step_normalize_drops_reads_its_records_back() -> None:
    # The log opens with a response (dropped from every view) and the result of its call beside a
    # screenshot: in the view that screenshot is the first prompt, so it names the conversation.
    h = History()
    h.step(Tool('read_file', {'path': 'a.py'}, 'ok'))
    h.answer('Read.')
    h.user('task 1: now b.py')
    h.step(Tool('read_file', {'path': 'b.py'}, long_text(40, prefix='b.py')))
    h.answer('b.py is fine.')
    h.user('task 2: thanks')
    log = h.build()
    screenshot = UserPromptPart(['screenshot:', BinaryContent(PNG, media_type='image/png')])
    log[1] = ModelRequest(parts=[*log[1].parts, screenshot])
    p = make('long_horizon', 6_000, reserved_output=500)
    view = await p.compile(log)
    refs = refs_in(view)
    assert refs, 'the finished runs are isolated into records'
    for ref in refs:
        read_context(ref, view, p.archive, limit=100_000)


async def test_one_profile_keeps_conversations_apart() -> None:
    """A profile serving two conversations (1.x-style, side store) never reads one's originals in the other."""
    p = make('coding', 128_000, keep_recent=1, step=1)
    logs = []
    for who in ('alice', 'bob'):
        h = History().user(f'read the notes of {who}')
        for i in range(4):
            h.step(
                Tool(
                    'read_file',
                    {'path': f'{who}/n{i}.md'},
                    f'{who.upper()}-SECRET-{i}\n' + 'x\n' * 80,
                    id=f'c{i}',
                )
            )
        logs.append(await p.compile(h.build()))
    alice, bob = logs
    assert (
        marker(result_with_id(alice, 'c0'))['kind'] == marker(result_with_id(bob, 'c0'))['kind'] == 'masked'
    )
    assert 'ALICE-SECRET-0' in read_context('c0', alice, p.archive)
    assert 'BOB-SECRET-0' in read_context('c0', bob, p.archive)
    with pytest.raises(ModelRetry, match='nothing earlier'):
        search_context('ALICE', bob, p.archive)


# --- never recursive, never compacted -------------------------------------------------------------


async def test_readback_results_are_never_compacted_nor_read_back() -> None:
    page = long_text(300, prefix='src/big.py')
    h = History().user('go')
    h.step(Tool('read_file', {'path': 'src/big.py'}, page, id='c1'))
    h.step(
        Tool('read_context', {'ref': 'c1'}, '[c1: read_file result, lines 1-300 of 300]\n' + page, id='r1')
    )
    h.step(Tool('search_context', {'query': 'big'}, '1 match for ...\n' + page, id='r2'))
    for i in range(12):
        h.step(Tool('read_file', {'path': 'src/big.py'}, page, id=f'again{i}'))
    log = h.build()
    view = await make('coding', 128_000, keep_recent=1, step=1).compile(log)
    assert result_with_id(view, 'r1') is result_with_id(log, 'r1')
    assert result_with_id(view, 'r2') is result_with_id(log, 'r2')
    assert marker(result_with_id(view, 'c1')) is not None
    with pytest.raises(ModelRetry, match='result of a read_context call'):
        read_context('r1', log)
    # A span holding a read-back shows a reference, not a second copy.
    archive = ContextArchive()
    archive.keep_span('s1', log[3:5], conversation=archive.conversation_of(log, conversation='chat'))
    assert '(a read-back result; not repeated)' in read_context('s1', log, archive, conversation='chat')
    assert search_context('src big py', log).count('- r') == 0, 'read-back results are not searched'


# --- the tools' own behaviour ------------------------------------------------------------------------


def one_result_log(text: str) -> list[ModelMessage]:
    return History().user('go').step(Tool('bash', {'command': 'x'}, text, id='c1')).build()


def test_read_context_pages_by_lines() -> None:
    log = one_result_log('\n'.join(f'row {i}' for i in range(10)))
    first = read_context('c1', log, limit=4)
    assert (
        first
        == "[c1: bash result, lines 1-4 of 10; next page: read_context('c1', offset=4)]\nrow 0\nrow 1\nrow 2\nrow 3"
    )
    assert read_context('c1', log, offset=8).splitlines() == [
        '[c1: bash result, lines 9-10 of 10]',
        'row 8',
        'row 9',
    ]
    with pytest.raises(ModelRetry, match='past its end'):
        read_context('c1', log, offset=10)
    with pytest.raises(ModelRetry, match='unknown ref'):
        read_context('c2', log)
    with pytest.raises(ModelRetry, match='give the ref'):
        read_context('  ', log)
    with pytest.raises(ModelRetry, match='empty'):
        read_context('c1', one_result_log(''))


def test_a_page_is_capped_in_characters() -> None:
    log = one_result_log('x' * 50_000 + '\nnext')
    page = read_context('c1', log)
    assert 'line cut at 20,000 of 50,000 characters' in page
    assert "next page: read_context('c1', offset=1)" in page


def test_search_ranks_with_bm25_and_retries_on_nothing() -> None:
    h = History().user('go')
    h.step(Tool('read_file', {'path': 'a.py'}, 'def parse_header(raw): ...', id='a'))
    h.step(Tool('read_file', {'path': 'b.py'}, 'ValueError: bad header in parse_header', id='b'))
    h.step(Tool('read_file', {'path': 'c.py'}, 'nothing to see', id='c'))
    log = h.build()
    found = search_context('bad header', log, limit=5).splitlines()
    assert found[0] == "2 matches for 'bad header', best first:"
    assert found[1].startswith('- b (read_file result): ')
    assert found[2].startswith('- a ')
    with pytest.raises(ModelRetry, match='nothing earlier'):
        search_context('zebra', log)
    with pytest.raises(ModelRetry, match='no words'):
        search_context('?!', log)


def test_search_without_fts5_falls_back_to_term_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_search, '_fts5', False)
    log = one_result_log('ValueError: bad header')
    assert search_context('header', log).splitlines()[1].startswith('- c1 ')


def test_a_failing_store_is_logged_and_never_breaks(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def get(self, key: str) -> str | None:
            raise OSError('disk gone')

        def put(self, key: str, value: str) -> None:
            raise OSError('disk gone')

    archive = ContextArchive(Broken())
    with caplog.at_level(logging.WARNING):
        archive.keep_result('c1', ToolReturnPart('bash', 'out', tool_call_id='c1'))
        assert archive.result('c1') is None
    assert 'read-back store failed' in caplog.text


def test_memory_store_evicts_oldest_past_its_size() -> None:
    store = MemoryReadbackStore(max_chars=10)
    store.put('a', '123456')
    store.put('b', '123456')
    assert store.get('a') is None
    assert store.get('b') == '123456'
    with pytest.raises(ValueError, match='max_chars'):
        MemoryReadbackStore(max_chars=0)


def test_instruction_goes_after_the_static_parts_once() -> None:
    parts = [InstructionPart('static'), InstructionPart('now: 12:00', dynamic=True)]
    out = with_readback_instruction(parts)
    assert [p.content for p in out] == ['static', READBACK_INSTRUCTION, 'now: 12:00']
    assert with_readback_instruction(out) == out
    assert [p.content for p in with_readback_instruction(None)] == [READBACK_INSTRUCTION]


def test_span_refs_are_short_stable_and_content_derived() -> None:
    log = busy_log()
    ref = span_ref(log[1:5])
    assert re.fullmatch(r's[0-9a-f]{8}', ref)
    assert span_ref(copy.deepcopy(log[1:5])) == ref
    assert span_ref(log[1:7]) != ref
    assert span_ref(['s00000000', *log[1:5]]) != ref


async def test_bad_refs_never_end_a_run_however_often_the_model_asks() -> None:
    """A model that keeps reading back refs that do not exist is told so each time (no retry budget)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    calls = 0

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        if calls <= 8:
            return ModelResponse(
                parts=[ToolCallPart('read_context', {'ref': f'nope-{calls}'}, tool_call_id=f'x{calls}')]
            )
        return ModelResponse(parts=[TextPart('gave up')])

    p = coding_profile()
    toolsets = [] if PYDANTIC_AI_MAJOR >= 2 else [p.toolset]
    agent = Agent(FunctionModel(model), capabilities=[p] if PYDANTIC_AI_MAJOR >= 2 else [], toolsets=toolsets)
    result = await agent.run('read back something')
    assert result.output == 'gave up'
    failures = [
        p
        for m in result.all_messages()
        for p in m.parts
        if getattr(p, 'tool_name', None) == 'read_context' and not hasattr(p, 'args')
    ]
    assert len(failures) == 8
    assert all('unknown ref' in part_text(f) for f in failures)
    if PYDANTIC_AI_MAJOR >= 2:
        assert all(is_failed_result(f) for f in failures)


def test_a_repeated_call_id_is_read_back_by_the_views_name_and_by_the_stored_one() -> None:
    """Ids that repeat across runs are renamed in the view (`c20-2`): markers name ids the stored log
    lacks, and read_context accepts both (issue 24)."""
    from pydantic_ai_context._parts import is_tool_result
    from pydantic_ai_context.integrity import unique_call_ids

    log = (
        History()
        .user('first')
        .step(Tool('read', {'path': 'a.py'}, 'alpha contents', id='c20'))
        .answer('ok')
        .user('second')
        .step(Tool('read', {'path': 'b.py'}, 'beta contents', id='c20'))
        .answer('ok')
        .user('third')
        .messages
    )
    view_ids = [p.tool_call_id for m in unique_call_ids(log) for p in m.parts if is_tool_result(p)]
    assert view_ids == ['c20', 'c20-2']
    assert read_context('c20-2', log).endswith('beta contents')
    assert read_context('c20', log).endswith('alpha contents')
    assert '- c20-2 (read result)' in search_context('beta', log)


def test_lineage_fingerprints_resumed_between_compiles_equal_fresh_ones() -> None:
    """The archive's lineage fingerprints resume from the previous list's (issue 22); a list that
    branches off, or a newest request filled in after it was fingerprinted, gives what a fresh
    computation does."""
    from pydantic_ai.messages import UserPromptPart

    from pydantic_ai_context._scope import MemoScope, compiling

    def log_of(steps: int, tag: str = '') -> list[ModelMessage]:
        out: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('task')])]
        for i in range(steps):
            call = ToolCallPart('ls', {'i': i}, tool_call_id=f'c{i}{tag}')
            out.append(ModelResponse(parts=[TextPart(f'step {i}{tag}'), call]))
            out.append(ModelRequest(parts=[ToolReturnPart('ls', f'out {i}{tag}', tool_call_id=f'c{i}{tag}')]))
        return out

    archive, scope = ContextArchive(), MemoScope()

    def fresh(messages: list[ModelMessage]) -> tuple[bytes, ...]:
        return tuple(map(ContextArchive()._fingerprint, messages))

    log = log_of(10)
    branch = log[:11] + log_of(10, tag='b')[11:]
    for messages in (log[:9], log, branch, log[:15], log):
        with compiling(scope, messages):
            assert archive._fingerprints_of(messages) == fresh(messages)
    with compiling(scope, log):  # one compile fingerprints the log, then a view that branches off it
        for messages in (log, branch, log[:15], log):
            assert archive._fingerprints_of(messages) == fresh(messages)
    # The newest request filled in (as pydantic-ai does before sending a view), in the same generation.
    view = [*log, ModelResponse(parts=[TextPart('done')]), ModelRequest(parts=[UserPromptPart('next')])]
    with compiling(scope, log):
        assert archive._fingerprints_of(view) == fresh(view)
    view[-1].parts = [*view[-1].parts, UserPromptPart('more')]
    with compiling(scope, log):
        assert archive._fingerprints_of(view) == fresh(view)


async def test_the_archive_keeps_no_json_of_the_messages_it_only_fingerprints() -> None:
    """Lineage fingerprints read each message's JSON once; keeping that text would hold about as
    much again as the log. Only the spans written to the store remember theirs."""
    h = History().user('go')
    for i in range(12):
        h.step(Tool('read_file', {'path': f'src/m{i}.py'}, long_text(40, prefix=f'src/m{i}.py'), id=f'c{i}'))
    log = h.build()
    p = make('coding', 128_000, keep_recent=1, step=1)
    await p.compile(log)
    await p.compile([*log, *History().user('more').build()])
    assert p.archive._fingerprints_of(log)  # every message fingerprinted
    assert len(p.archive._encoded) == 0
