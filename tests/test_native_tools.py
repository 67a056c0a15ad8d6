"""Native (provider-side) tool results are trimmed, masked and clamped like function tool results,
in the shape their provider needs, and those that must go back unmodified leave with their call."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic_ai import messages
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart

from pydantic_ai_context import HeuristicCounter, profile
from pydantic_ai_context._native_tools import editable_fields, output_text, with_output
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR, marker
from pydantic_ai_context.readback import read_context

from .builders import History, Tool
from .invariants import assert_all, assert_native_pairs
from .realistic import SHORT_INSTRUCTIONS, RequestMeter, prose, realistic_agent

NativeCall: Any = getattr(messages, 'NativeToolCallPart', None) or getattr(
    messages, 'BuiltinToolCallPart', None
)
NativeReturn: Any = getattr(messages, 'NativeToolReturnPart', None) or getattr(
    messages, 'BuiltinToolReturnPart', None
)
pytestmark = pytest.mark.skipif(NativeCall is None, reason='this pydantic-ai has no native tool parts')

WINDOW = 16_000
BIG = '\n'.join(f'{i:5d} ' + prose(12, seed=i) for i in range(1400))
"""About 20k tokens of code-execution output."""


def code_result(stdout: str, *, stderr: str = '') -> dict[str, Any]:
    return {
        'type': 'code_execution_result',
        'stdout': stdout,
        'stderr': stderr,
        'return_code': 0,
        'content': [],
    }


def web_results(n: int) -> list[dict[str, Any]]:
    return [
        {
            'type': 'web_search_result',
            'url': f'https://example.com/{i}',
            'title': f'Result {i}',
            'encrypted_content': 'Eq' + 'x9Z' * 600,
            'page_age': None,
        }
        for i in range(n)
    ]


def native_pair(tool: str, args: dict[str, Any], content: Any, cid: str) -> list[Any]:
    return [
        NativeCall(tool, args, tool_call_id=cid, provider_name='anthropic'),
        NativeReturn(tool, content, tool_call_id=cid, provider_name='anthropic'),
    ]


# --- which kinds may be edited ---------------------------------------------------------------------

SHAPES = [
    pytest.param(
        'code_execution', code_result('out', stderr='err'), ('stdout', 'stderr'), id='anthropic-code'
    ),
    pytest.param(
        'code_execution',
        {'type': 'bash_code_execution_result', 'stdout': 'x', 'stderr': '', 'return_code': 1, 'content': []},
        ('stdout', 'stderr'),
        id='anthropic-bash',
    ),
    pytest.param(
        'code_execution',
        {'type': 'text_editor_code_execution_view_result', 'content': 'a\nb', 'file_type': 'text'},
        ('content',),
        id='anthropic-view',
    ),
    pytest.param(
        'code_execution', {'outcome': 'OUTCOME_OK', 'output': '42\n'}, ('output',), id='google-code'
    ),
    pytest.param('code_execution', {'status': 'completed', 'logs': ['a', 'b']}, ('logs',), id='openai-code'),
    pytest.param(
        'mcp_server:deepwiki',
        {'content': [{'type': 'text', 'text': 'docs'}], 'is_error': False},
        ('content',),
        id='mcp',
    ),
    pytest.param('code_execution', 'plain text output', ('',), id='text'),
    pytest.param('web_search', web_results(2), None, id='anthropic-web-search'),
    pytest.param('web_search', {'status': 'completed', 'sources': []}, None, id='openai-web-search'),
    pytest.param(
        'web_fetch',
        {'type': 'web_fetch_result', 'url': 'u', 'content': {'type': 'document', 'source': {'data': 'x'}}},
        None,
        id='web-fetch',
    ),
    pytest.param(
        'code_execution',
        {'type': 'encrypted_code_execution_result', 'encrypted_stdout': 'E' * 40, 'return_code': 0},
        None,
        id='encrypted-code',
    ),
    pytest.param('image_generation', {'status': 'completed'}, None, id='image-generation'),
]


@pytest.mark.parametrize(('tool', 'content', 'fields'), SHAPES)
def test_each_kind_is_editable_or_kept_whole(tool: str, content: Any, fields: Any) -> None:
    part = NativeReturn(tool, content, tool_call_id='s1')
    assert editable_fields(part) == fields
    if fields is not None:
        edited = with_output(part, 'SHORT', None)
        assert output_text(edited) == 'SHORT'
        if isinstance(content, dict):
            assert set(edited.content) == set(content)  # every key the provider needs stays
            assert {k: v for k, v in edited.content.items() if k not in fields} == {
                k: v for k, v in content.items() if k not in fields
            }
        assert part.content == content  # never mutated


def test_output_text_reads_stderr_after_stdout() -> None:
    part = NativeReturn('code_execution', code_result('rows', stderr='Traceback: boom'), tool_call_id='s1')
    assert output_text(part) == 'rows\n[stderr]\nTraceback: boom'


# --- the live agent path -----------------------------------------------------------------------------


def native_script(n: int, msgs: list[ModelMessage]) -> ModelResponse:
    if n == 1:
        return ModelResponse(
            parts=[
                TextPart('Running the analysis.'),
                *native_pair('code_execution', {'code': 'print(rows)'}, code_result(BIG), 'srv1'),
                ToolCallPart('read_file', {'path': 'src/a.py'}, tool_call_id='c1'),
            ]
        )
    if n <= 6:
        return ModelResponse(
            parts=[ToolCallPart('read_file', {'path': f'src/m{n}.py'}, tool_call_id=f'c{n}')]
        )
    return ModelResponse(parts=[TextPart('done')])


@pytest.mark.parametrize('name', ['chat', 'coding', 'long_horizon'])
def test_a_20k_code_execution_result_fits_at_16k_on_the_live_path(name: str) -> None:
    meter = RequestMeter(native_script)
    ctx_profile = profile(name, context_window=WINDOW)
    agent = realistic_agent(meter, ctx_profile, tools=5, instructions=SHORT_INSTRUCTIONS)
    result = agent.run_sync('analyse the data')
    assert meter.counter.count_text(BIG) > 20_000
    assert len(meter.totals) == 7
    assert max(meter.totals) <= WINDOW
    # The request right after the call: the result is clamped in its provider's shape.
    sent = next(
        p
        for m in meter.seen[1]
        for p in m.parts
        if getattr(p, 'tool_call_id', None) == 'srv1' and p.part_kind == 'builtin-tool-return'
    )
    assert set(sent.content) == {'type', 'stdout', 'stderr', 'return_code', 'content'}
    assert sent.content['return_code'] == 0
    assert sent.content['type'] == 'code_execution_result'
    assert 'trimmed by pydantic-ai-context' in sent.content['stdout']
    assert marker(sent)['kind'] == 'clamped'
    assert marker(sent)['ref'] == 'srv1'
    # Later requests trim or mask it further; the original reads back from the log, whole.
    later = next(
        p
        for m in meter.seen[-1]
        for p in m.parts
        if getattr(p, 'tool_call_id', None) == 'srv1' and p.part_kind == 'builtin-tool-return'
    )
    assert marker(later)['kind'] in {'masked', 'trimmed'}
    page = read_context('srv1', result.all_messages(), ctx_profile.archive, limit=5)
    assert BIG.splitlines()[0] in page
    assert 'code_execution result' in page
    if PYDANTIC_AI_MAJOR >= 2:  # the capability leaves the log whole
        assert result.all_messages()[1].parts[2].content == code_result(BIG)


async def test_the_same_text_as_a_function_result_and_as_a_native_result_is_clamped_alike() -> None:
    counter = HeuristicCounter()

    async def clamped_tokens(response: ModelResponse, request: ModelRequest) -> int:
        log = [ModelRequest.user_text_prompt('go'), response, request]
        view = await profile('coding', context_window=WINDOW, counter=counter).compile(log)
        return counter.count_messages(view)

    native = await clamped_tokens(
        ModelResponse(parts=[*native_pair('code_execution', {'code': 'x'}, BIG, 's1'), TextPart('ok')]),
        ModelRequest.user_text_prompt('next'),
    )
    function = await clamped_tokens(
        ModelResponse(parts=[ToolCallPart('run', {'code': 'x'}, tool_call_id='c1')]),
        ModelRequest(parts=[messages.ToolReturnPart('run', BIG, tool_call_id='c1')]),
    )
    assert native < WINDOW / 2
    assert function < WINDOW / 2
    assert abs(native - function) < 400


# --- through compile ----------------------------------------------------------------------------------


def long_log() -> list[ModelMessage]:
    h = History().user('research and compute', system='sys')
    h.messages.append(
        ModelResponse(
            parts=[
                TextPart('Searching.'),
                *native_pair('web_search', {'query': 'pydantic ai'}, web_results(12), 'ws1'),
                *native_pair('code_execution', {'code': 'run()'}, code_result(BIG), 'ce1'),
                ToolCallPart('read_file', {'path': 'src/a.py'}, tool_call_id='c0'),
            ]
        )
    )
    h.messages.append(ModelRequest(parts=[messages.ToolReturnPart('read_file', 'a = 1', tool_call_id='c0')]))
    for i in range(1, 16):
        h.step(Tool('read_file', {'path': f'src/m{i}.py'}, prose(200, seed=i)))
    h.messages.append(
        ModelResponse(
            parts=[
                *native_pair('web_search', {'query': 'fresh'}, web_results(3), 'ws2'),
                ToolCallPart('read_file', {'path': 'src/z.py'}, tool_call_id='cz'),
            ]
        )
    )
    h.messages.append(ModelRequest(parts=[messages.ToolReturnPart('read_file', 'z = 1', tool_call_id='cz')]))
    return h.build()


@pytest.mark.parametrize('name', ['chat', 'coding', 'long_horizon'])
async def test_old_native_results_are_masked_or_leave_with_their_call(name: str) -> None:
    log = long_log()
    snapshot = copy.deepcopy(log)
    view = await profile(name, context_window=64_000, counter=HeuristicCounter()).compile(log)
    assert_all(log, snapshot, view)
    assert_native_pairs(log, view)
    parts = [p for m in view for p in m.parts]
    ids = {getattr(p, 'tool_call_id', None) for p in parts}
    # The old web search goes back whole or not at all: here not at all, call and result together.
    assert 'ws1' not in ids
    note = next(p for p in parts if isinstance(p, TextPart) and 'web_search' in p.content)
    assert "read_context('ws1')" in note.content
    assert "query='pydantic ai'" in note.content
    # The old code execution result is masked in its shape.
    masked = next(p for p in parts if p.part_kind == 'builtin-tool-return' and p.tool_call_id == 'ce1')
    assert masked.content['return_code'] == 0
    assert masked.content['type'] == 'code_execution_result'
    assert marker(masked)['kind'] == ('trimmed' if name == 'chat' else 'masked')  # chat does not mask
    assert len(masked.content['stdout']) < len(BIG) / 10
    # The recent search is as it came.
    fresh = next(p for p in parts if p.part_kind == 'builtin-tool-return' and p.tool_call_id == 'ws2')
    assert fresh.content == web_results(3)
    # Both originals read back from the log.
    assert 'encrypted_content' in read_context('ws1', log)
    assert BIG.splitlines()[1] in read_context('ce1', log, limit=5)
    again = await profile(name, context_window=64_000, counter=HeuristicCounter()).compile(view)
    assert again == view  # a view of a view


async def test_a_result_that_must_go_back_whole_is_never_edited_only_removed_with_its_call() -> None:
    log = [
        ModelRequest.user_text_prompt('search'),
        ModelResponse(
            parts=[
                *native_pair('web_search', {'query': 'q'}, web_results(40), 'ws1'),
                ToolCallPart('read_file', {'path': 'a.py'}, tool_call_id='c1'),
            ]
        ),
        ModelRequest(parts=[messages.ToolReturnPart('read_file', 'a = 1', tool_call_id='c1')]),
    ]
    counter = HeuristicCounter()
    assert counter.count_messages(log) > 40_000
    view = await profile('coding', context_window=64_000, counter=counter).compile_request(log)
    assert view[1].parts[1].content == web_results(40)  # fits: as it came
    # Too large for 8k: not clamped (its provider would reject an edited one) but removed with its call.
    snapshot = copy.deepcopy(log)
    view = await profile('coding', context_window=8_000, counter=counter).compile_request(log)
    assert_all(log, snapshot, view)
    assert_native_pairs(log, view)
    assert counter.count_messages(view) < 8_000
    assert [type(p).__name__ for p in view[1].parts] == ['TextPart', 'ToolCallPart']
    assert "[web_search(query='q') ran on the provider" in view[1].parts[0].content
    page = read_context('ws1', log, limit=400)
    assert 'Result 0' in page
    assert 'Result 39' in read_context('ws1', log, offset=270)


def test_fit_alone_trims_a_native_result_of_the_recency_window_before_giving_up() -> None:
    from pydantic_ai_context import CompileContext, ContextBudget
    from pydantic_ai_context.policies.fit import fit_to_budget

    log = [
        ModelRequest.user_text_prompt('compute'),
        ModelResponse(
            parts=[
                *native_pair('code_execution', {'code': 'run()'}, code_result(BIG), 's1'),
                ToolCallPart('read_file', {'path': 'a.py'}, tool_call_id='c1'),
            ]
        ),
        ModelRequest(parts=[messages.ToolReturnPart('read_file', 'a = 1', tool_call_id='c1')]),
    ]
    counter = HeuristicCounter()
    context = CompileContext(counter=counter, budget=ContextBudget(context_window=8_000))
    view = fit_to_budget().apply(list(log), context)
    assert counter.count_messages(view) <= context.budget.limit  # type: ignore[union-attr]
    result = view[1].parts[1]
    assert result.content['return_code'] == 0
    assert 'trimmed by pydantic-ai-context' in result.content['stdout']
    assert_native_pairs(log, view)


def test_search_context_finds_native_results() -> None:
    from pydantic_ai_context.readback import search_context

    needle = 'NEEDLE_IN_STDOUT 42'
    log = [
        ModelRequest.user_text_prompt('compute'),
        ModelResponse(
            parts=[
                *native_pair('code_execution', {'code': 'x'}, code_result(f'a\n{needle}\nb'), 's1'),
                TextPart('ok'),
            ]
        ),
        ModelRequest.user_text_prompt('next'),
    ]
    hits = search_context('NEEDLE_IN_STDOUT', log)
    assert "'s1'" in hits or 's1' in hits
    assert needle in hits


async def test_an_old_tool_search_stays_whole_as_it_declares_tools() -> None:
    found = {
        'discovered_tools': [{'name': f'deferred_{i}', 'description': prose(30, seed=i)} for i in range(30)]
    }
    h = History().user('find a tool and use it')
    h.messages.append(
        ModelResponse(
            parts=[
                *native_pair('tool_search', {'queries': ['weather']}, found, 'ts1'),
                ToolCallPart('deferred_1', {'path': 'a'}, tool_call_id='c0'),
            ]
        )
    )
    h.messages.append(ModelRequest(parts=[messages.ToolReturnPart('deferred_1', 'sunny', tool_call_id='c0')]))
    for i in range(1, 16):
        h.step(Tool('read_file', {'path': f'src/m{i}.py'}, prose(200, seed=i)))
    log = h.build()
    view = await profile('coding', context_window=8_000, counter=HeuristicCounter()).compile(log)
    kept = [p for m in view for p in m.parts if getattr(p, 'tool_call_id', None) == 'ts1']
    assert [p.part_kind for p in kept] == ['builtin-tool-call', 'builtin-tool-return']
    assert kept[1].content == found


def test_a_response_whose_native_pair_was_removed_weighs_what_it_weighed_before() -> None:
    """Regression (the idempotence property test at `long_horizon-none`, 4,000 tokens): the line
    standing for a removed pair was counted on top of the pair's recorded tokens, so on a view of
    a view the frontier's budget estimate was higher and one more result was masked."""
    from pydantic_ai_context.policies._frontier import nominal_message_tokens
    from pydantic_ai_context.policies._native import without_native_pairs
    from pydantic_ai_context.views import CompileContext

    counter = HeuristicCounter()
    response = ModelResponse(
        parts=[
            TextPart('Let me look.'),
            *native_pair('web_search', {'query': 'fits diff'}, web_results(1), 'srv1'),
            ToolCallPart('grep', {'path': 'a.py'}, tool_call_id='c1'),
        ]
    )
    removed = without_native_pairs(response, {'srv1'}, CompileContext(counter=counter))
    assert not any(isinstance(p, NativeReturn) for p in removed.parts)
    assert any('ran on the provider' in getattr(p, 'content', '') for p in removed.parts)
    assert nominal_message_tokens(removed, counter) == nominal_message_tokens(response, counter)
