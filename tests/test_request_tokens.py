"""Weighing a request as pydantic-ai sends it (issue 24): the instructions once, tools supplied.

The live path, `replay`, `inspect`, the chart and `history_stats` all weigh a request with
`weigh_request`; these tests pin their agreement with what a `FunctionModel` measured live.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
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
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import HeuristicCounter, history_stats, profile
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR
from pydantic_ai_context.cli import charts, main
from pydantic_ai_context.overhead import TOOL_OVERHEAD_TOKENS, agent_parameters, measure_overhead
from pydantic_ai_context.replay import replay
from pydantic_ai_context.request_tokens import weigh_request
from pydantic_ai_context.tokens import default_counter, message_tokens

from .realistic import (
    INSTRUCTIONS,
    RequestMeter,
    make_tools,
    reading_script,
    realistic_agent,
    strip_instructions,
)
from .realistic import SHORT_INSTRUCTIONS as SHORT

CAREFUL = 'Be careful. ' * 1000
"""The issue's reproducer: about 3k tokens of instructions."""


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith('PYDANTIC_AI_CONTEXT_'):
            monkeypatch.delenv(name)


def ping_log(instructions: str = CAREFUL, pings: int = 10) -> list[ModelMessage]:
    """A real `Agent(instructions=...)` run: `pings` ping tool calls, then 'done'."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n < pings:
            return ModelResponse(parts=[ToolCallPart('ping', {}, tool_call_id=f'c{n}')])
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(model), instructions=instructions)

    @agent.tool_plain
    def ping() -> str:
        return 'pong'

    return agent.run_sync('go').all_messages()


def write_log(path: Path, messages: list[ModelMessage]) -> Path:
    path.write_bytes(ModelMessagesTypeAdapter.dump_json(messages))
    return path


def test_weigh_request_counts_the_instructions_once() -> None:
    counter = default_counter()
    log = ping_log()
    assert sum(1 for m in log if isinstance(m, ModelRequest) and m.instructions) == 11
    weight = weigh_request(log, counter=counter, per_message=True)
    assert (
        weight.counted_instructions_tokens
        == weight.instructions_tokens
        == counter.count_text(CAREFUL.strip())
    )
    assert weight.view_tokens == counter.count_messages(log)
    assert weight.per_message is not None
    assert sum(weight.per_message) == weight.message_tokens
    # The old way, once per stored request, is about eleven times the instructions.
    assert sum(counter.count_message(m) for m in log) > weight.view_tokens + 9 * weight.instructions_tokens


def test_weigh_request_adds_the_overhead_it_is_given() -> None:
    counter = HeuristicCounter()
    view = [ModelRequest(parts=[UserPromptPart('hi')], instructions='Stored.')]
    overhead = measure_overhead(view, counter=counter)
    weight = weigh_request(view, counter=counter, overhead=overhead, overhead_tokens=700)
    assert weight.total_tokens == counter.count_messages(view) + 700
    assert weight.overhead_tokens == 700


def replay_sizes(messages: list[ModelMessage], **kwargs: Any) -> list[int]:
    result = asyncio.run(
        replay(messages, None, context_window=1_000_000, counter=default_counter(), **kwargs)
    )
    return [r.view_tokens for r in result.records]


def test_replay_of_an_instructed_run_equals_the_live_measurement_within_one_percent() -> None:
    """25 tools, ~3.7k tokens of instructions, 10 reads: replay sees what the model function saw."""
    meter = RequestMeter(reading_script(10))
    agent = Agent(FunctionModel(meter.__call__), instructions=INSTRUCTIONS, tools=make_tools(25))
    log = agent.run_sync('Read the modules.').all_messages()
    assert len(meter.totals) == 11
    tool_framing = 25 * TOOL_OVERHEAD_TOKENS  # the documented per-definition framing the meter leaves out

    with_agent = replay_sizes(log, parameters=agent_parameters(agent))
    for live, replayed in zip(meter.totals, with_agent, strict=True):
        assert abs(replayed - (live + tool_framing)) <= 0.01 * live, (live, replayed)

    # Without the agent, replay counts what the log holds: messages and instructions once.
    counter = default_counter()
    seen = [
        counter.count_messages(strip_instructions(messages)) + counter.count_text(INSTRUCTIONS)
        for messages in meter.seen
    ]
    for live, replayed in zip(seen, replay_sizes(log), strict=True):
        assert abs(replayed - live) <= 0.01 * live, (live, replayed)


def test_the_live_gauge_and_history_stats_weigh_the_request_as_replay_does() -> None:
    counter = default_counter()
    ctx = profile('coding', context_window=200_000, counter=counter)
    meter = RequestMeter(reading_script(4), counter=counter)
    agent = realistic_agent(meter, ctx, tools=3)
    log = agent.run_sync('Read the modules.').all_messages()
    gauge = ctx.last_usage
    assert gauge is not None
    assert not gauge.compacted
    last_input = log[:-1]
    replayed = asyncio.run(
        replay(log, None, context_window=200_000, counter=counter, parameters=agent_parameters(agent))
    ).records[-1]
    assert abs(gauge.used_tokens - replayed.view_tokens) <= 0.01 * replayed.view_tokens
    stats = history_stats(last_input, counter=counter)
    assert stats.tokens == weigh_request(last_input, counter=counter).view_tokens
    assert stats.instructions_tokens == counter.count_text(INSTRUCTIONS)


def test_the_issue_reproducer_fits_an_8k_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_log(tmp_path / 'careful.json', ping_log())
    out = tmp_path / 'out.json'
    argv = [
        'replay',
        str(path),
        '--profile',
        'coding',
        '--window',
        '8000',
        '--json',
        str(out),
        '--no-progress',
    ]
    assert main(argv) == 0
    document = json.loads(out.read_text())
    results = {r['profile']: r for r in document['histories'][0]['results']}
    # Was 33,178 with 9 of 11 requests over: each stored request's instructions counted again.
    assert 3_000 < results['none']['peak_view_tokens'] < 3_400
    assert results['none']['requests_over_window'] == results['coding']['requests_over_window'] == 0
    assert document['counted']['agent'] is None
    assert document['counted']['overhead_tokens'] == 0
    printed = ' '.join(capsys.readouterr().out.split())
    assert 'not tool definitions' in printed
    assert '--agent MODULE:ATTR' in printed


AGENT_MODULE = """
from pydantic_ai import Agent

agent = Agent('test', instructions='Be careful. ' * 1000)


@agent.tool_plain
def ping() -> str:
    '''Check that the service answers.'''
    return 'pong'
"""


def test_replay_agent_counts_its_tools_and_records_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_log(tmp_path / 'careful.json', ping_log())
    (tmp_path / 'careful_agent.py').write_text(AGENT_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, 'path', list(sys.path))
    base, out = tmp_path / 'base.json', tmp_path / 'out.json'
    common = ['replay', str(path), '--profile', 'coding', '--window', '8000', '--no-progress']
    assert main([*common, '--json', str(base)]) == 0
    assert main([*common, '--agent', 'careful_agent:agent', '--json', str(out)]) == 0
    document = json.loads(out.read_text())
    counted = document['counted']['agent']
    assert counted['agent'] == 'careful_agent:agent'
    assert counted['tools'] == 1
    assert counted['tools_tokens'] > TOOL_OVERHEAD_TOKENS
    assert counted['instructions_tokens'] == 3_000
    before = json.loads(base.read_text())['histories'][0]['results'][0]['records']
    after = document['histories'][0]['results'][0]['records']
    # The log already carries the instructions: only the tool definition is added.
    assert [a['view_tokens'] - b['view_tokens'] for a, b in zip(after, before, strict=True)] == [
        counted['tools_tokens']
    ] * len(after)
    printed = ' '.join(capsys.readouterr().out.split())
    assert 'careful_agent:agent: 1 tool definition(s)' in printed

    assert main([*common, '--overhead-tokens', '1500', '--json', str(out)]) == 0
    document = json.loads(out.read_text())
    assert document['counted']['overhead_tokens'] == 1500
    records = document['histories'][0]['results'][0]['records']
    assert [r['view_tokens'] for r in records] == [b['view_tokens'] + 1500 for b in before]
    assert all(r['overhead_tokens'] == 1500 for r in records)


def test_replay_agent_errors_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_log(tmp_path / 'careful.json', ping_log(pings=1))
    for spec, expected in (
        ('no_colon', 'module:attribute'),
        ('no_such_module_xyz:agent', 'cannot import'),
        ('json:dumps', 'not a pydantic-ai Agent'),
    ):
        assert main(['replay', str(path), '--agent', spec]) == 2
        assert expected in capsys.readouterr().err
    assert main(['replay', str(path), '--agent', 'json:dumps', '--overhead-tokens', '5']) == 2


def test_inspect_counts_a_small_result_small_and_the_instructions_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_log(tmp_path / 'careful.json', ping_log())
    assert main(['inspect', str(path), '--window', '8000']) == 0
    printed = capsys.readouterr().out
    counter = default_counter()
    pong = next(
        m for m in ping_log() if isinstance(m, ModelRequest) and m.parts[0].part_kind == 'tool-return'
    )
    small = message_tokens(counter, pong)
    assert small < 20
    rows = [line for line in printed.splitlines() if 'tool-return:ping' in line]
    assert rows
    assert all(f' {small} ' in row and '3,0' not in row for row in rows)
    assert re.search(r'instructions .*3,000', printed)


def test_inspect_shows_a_drop_note_not_the_instructions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n < 30:
            call = ToolCallPart('read', {'path': f'src/m{n}.py'}, tool_call_id=f'c{n}')
            return ModelResponse(parts=[TextPart(f'step {n}'), call])
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(model), instructions='Follow the rules. ' * 100)

    @agent.tool_plain
    def read(path: str) -> str:
        return '\n'.join(f'{path}:{i} line of code number {i} Error: x' for i in range(80))

    path = write_log(tmp_path / 'long.json', agent.run_sync('go').all_messages())
    assert main(['inspect', str(path), '--window', '6000', '--profile', 'coding']) == 0
    printed = capsys.readouterr().out
    section = printed[printed.index('What the model sees instead') : printed.index('What each policy did')]
    flat = ' '.join(section.split())
    assert 'dropped' in flat
    assert 'older steps of this conversation were removed' in flat
    assert 'Follow the rules' not in flat


def test_the_chart_axis_rounds_to_the_next_round_step_not_double() -> None:
    assert charts.nice(266_000 * 1.05) == 300_000
    y_max, clipped = charts.y_scale({'none': [266_000], 'coding': [200_000]}, window=128_000)
    assert y_max == 300_000
    assert not clipped


@pytest.mark.skipif(PYDANTIC_AI_MAJOR < 2, reason='the read-back instruction is sent by the 2.x capability')
def test_the_gauge_view_tokens_hold_the_stored_instructions_and_used_tokens_what_is_sent() -> None:
    """`view_tokens` != `message_tokens + instructions_tokens` once the read-back instruction is sent."""
    counter = default_counter()
    gauges: list[Any] = []
    ctx = profile('coding', context_window=16_000, counter=counter, on_usage=gauges.append)
    meter = RequestMeter(reading_script(12), counter=counter)
    agent = realistic_agent(meter, ctx, tools=3, instructions=SHORT)
    agent.run_sync('Read the modules.')
    stored = counter.count_text(SHORT)
    assert gauges
    for gauge in gauges:
        assert gauge.used_tokens == gauge.message_tokens + gauge.instructions_tokens + gauge.tools_tokens
        assert gauge.view_tokens == gauge.message_tokens + stored
    final = ctx.last_usage
    assert final is not None
    assert final.compacted
    # The read-back instruction travels with the request, not on the stored requests.
    assert final.instructions_tokens > stored


# --- tables that fit, and --format (issue 24) ------------------------------------------------------


def long_log(tmp_path: Path) -> Path:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n < 12:
            call = ToolCallPart('read', {'path': f'src/m{n}.py'}, tool_call_id=f'c{n}')
            return ModelResponse(parts=[TextPart(f'step {n}'), call])
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(model), instructions='Follow the rules. ' * 20)

    @agent.tool_plain
    def read(path: str) -> str:
        return '\n'.join(f'{path}:{i} line of code number {i} Error: x' for i in range(80))

    return write_log(tmp_path / 'long.json', agent.run_sync('go').all_messages())


@pytest.mark.parametrize('columns', [80, 100, 120])
def test_tables_fit_the_terminal_and_never_cut_a_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], columns: int
) -> None:
    path = long_log(tmp_path)
    monkeypatch.setenv('COLUMNS', str(columns))
    argv = ['replay', str(path), '-p', 'coding', '-p', 'chat', '--window', '6000', '--no-progress']
    assert main(argv) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if re.match(r'\W*(none|coding|chat)\b', line)]
    assert len(rows) == 3
    for row in rows:
        assert '…' not in row
        assert re.search(r'\d+\.\d+/\d+\.\d+\W*$', row), row  # the last column, whole
    if columns >= 100:  # a rich table within the width; narrower gets aligned plain text
        assert all(len(line) <= columns for line in printed.splitlines() if '│' in line or '┃' in line)


def test_format_markdown_and_plain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = long_log(tmp_path)
    base = ['replay', str(path), '-p', 'coding', '--window', '6000', '--no-progress']
    assert main([*base, '--format', 'markdown']) == 0
    markdown = capsys.readouterr().out
    assert '| profile | input tokens | cost |' in markdown
    assert '|---|---:|---:|' in markdown
    assert re.search(r'^\| coding \| [\d,]+ \|', markdown, re.MULTILINE)
    assert main([*base, '--format', 'plain']) == 0
    plain = capsys.readouterr().out
    assert not set('│┃━') & set(plain)
    assert re.search(r'^coding +[\d,]+ +[\d,]+ +0\.\d{3}', plain, re.MULTILINE)
    assert main(['inspect', str(path), '--window', '6000', '--format', 'markdown']) == 0
    assert '| log # | role | kind | tokens |' in capsys.readouterr().out


def test_inspect_does_not_anchor_on_a_usage_that_left_out_the_instructions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The FunctionModel that recorded the log estimated usage without the instructions: the gauge
    # once read "messages 0, instructions 3,000".
    path = write_log(tmp_path / 'careful.json', ping_log())
    assert main(['inspect', str(path), '--window', '8000']) == 0
    gauge = ' '.join(capsys.readouterr().out.split()).rsplit('context ', 1)[-1]
    messages = int(re.search(r'messages ([\d,]+),', gauge).group(1).replace(',', ''))  # type: ignore[union-attr]
    assert messages > 100, gauge
    assert 'instructions 3,000' in gauge
    assert 'counted' in gauge


def test_newest_instructions_resumed_between_compiles_equals_a_fresh_scan() -> None:
    """Issue 22: during a compile the requests carrying instructions are a fold resumed from the
    previous list; the newest request's instructions, filled in after it was read (as pydantic-ai
    does before sending), and lists that branch off or end earlier give what a fresh scan does."""
    import dataclasses

    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from pydantic_ai_context._scope import MemoScope, compiling
    from pydantic_ai_context.request_tokens import newest_instructions

    def fresh(messages: list[ModelMessage]) -> ModelRequest | None:
        return next((m for m in reversed(messages) if isinstance(m, ModelRequest) and m.instructions), None)

    log: list[ModelMessage] = []
    for i in range(12):
        log.append(ModelRequest(parts=[UserPromptPart(f'q{i}')], instructions='be brief' if i == 3 else None))
        log.append(ModelResponse(parts=[TextPart(f'a{i}')]))
    log.append(ModelRequest(parts=[UserPromptPart('last')]))
    branch = [*log[:9], dataclasses.replace(log[9]), *log[10:15]]
    later = [*log[:12], dataclasses.replace(log[12], instructions='later'), *log[13:]]
    scope = MemoScope()
    for messages in (log[:5], log, branch, log[:7], later, log):
        with compiling(scope, log):
            assert newest_instructions(messages) is fresh(messages)
    with compiling(scope, log):
        assert newest_instructions(log) is fresh(log) is log[6]
    log[-1].instructions = 'filled in'  # the open request, in place
    with compiling(scope, log):
        assert newest_instructions(log) is log[-1]
    view = [*log[:-1], ModelRequest(parts=[UserPromptPart('last')])]
    with compiling(scope, log):
        assert newest_instructions(view) is log[6]
        view[-1].instructions = 'now'
        assert newest_instructions(view) is view[-1]
        assert newest_instructions([*view, ModelResponse(parts=[TextPart('ok')])]) is view[-1]
        view[-1].instructions = None
        assert newest_instructions(view) is log[6]
    with compiling(MemoScope(), log):  # one fold only: what it read past the branch is undone
        for messages in (later[:-1], log[:-1]):
            assert newest_instructions(messages) is fresh(messages)
