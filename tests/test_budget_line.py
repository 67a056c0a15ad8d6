"""The budget's arithmetic in one line, the same words in the usage event, `session.stats()`,
`inspect` and `replay`; and the usage reading names its counter and whether it is exact."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import ContextBudget, HeuristicCounter, MemoryStore, TiktokenCounter, profile
from pydantic_ai_context.cli import main
from pydantic_ai_context.events import ContextUsageEvent
from pydantic_ai_context.session import ContextSession

from . import data

LINE = re.compile(
    r'window [\d,]+ \([^()]+\)(?: - output [\d,]+|, input capped at [\d,]+) - system & tools [\d,]+ '
    r'- margin [\d,]+ = limit [\d,]+; soft limit [\d,]+ \(\d+% trigger\)'
)


def _agent_with_tools() -> Agent[None, str]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('done')])

    agent = Agent(FunctionModel(answer))

    @agent.tool_plain
    def read_log(name: str, lines: int = 100) -> str:
        """Read the last lines of a log file on the build machine."""
        return name * lines

    return agent


async def test_the_usage_event_names_its_counter_and_how_exact_it_is() -> None:
    seen: list[ContextUsageEvent] = []
    p = profile('coding', context_window=16_000, counter=HeuristicCounter(), on_usage=seen.append)
    await _agent_with_tools().run('hello', capabilities=[p])
    usage = seen[-1]
    assert usage.counter == 'heuristic'
    assert usage.counter_exact is False
    assert usage.counting == 'estimated'
    assert usage.counted_by == 'heuristic, estimated'
    assert usage.to_dict()['counting'] == 'estimated'

    exact = TiktokenCounter(model='openai:gpt-4o')
    seen.clear()
    p = profile('coding', context_window=16_000, counter=exact, on_usage=seen.append)
    await _agent_with_tools().run('hello', capabilities=[p])
    assert seen[-1].counter == exact.name
    assert seen[-1].counting == ('exact' if exact.exact else 'estimated')


def test_an_anchored_reading_says_so() -> None:
    usage = ContextUsageEvent(
        message_tokens=1, used_tokens=1, window_tokens=10, limit_tokens=8, soft_limit_tokens=6,
        window_source='explicit', messages=1, log_messages=1, anchored=True, counter='heuristic',
    )  # fmt: skip
    assert usage.counting == 'anchored'
    assert usage.counted_by == 'heuristic, anchored on provider usage'


async def test_events_and_stats_show_the_same_budget_in_the_same_words() -> None:
    # A 16,000 window used to read as a limit of 11,366 in events and 11,680 "usable" in stats():
    # stats ignored the tool definitions the compile reserved.
    p = profile('coding', context_window=16_000, counter=HeuristicCounter())
    session = ContextSession(store=MemoryStore(), profile=p)
    await session.run(_agent_with_tools(), 'hello')
    usage = p.last_usage
    assert usage is not None
    assert usage.reserved_system_tokens > 0
    stats = session.stats()
    assert stats.limit == usage.limit_tokens
    assert stats.budget is not None
    assert stats.budget.describe() == usage.budget_line()
    assert f'  budget: {usage.budget_line()}' in str(stats).splitlines()
    assert 'usable' not in str(stats)
    assert 'counted by heuristic, estimated' in str(stats)
    # The line adds up.
    assert usage.limit_tokens == (
        usage.window_tokens
        - usage.reserved_output_tokens
        - usage.reserved_system_tokens
        - usage.safety_tokens
    )
    assert LINE.fullmatch(usage.budget_line())


def test_the_event_line_is_the_budget_line() -> None:
    budget = ContextBudget(context_window=400_000, reserved_system=1_000, input_limit=272_000)
    usage = ContextUsageEvent(
        message_tokens=1, used_tokens=1, window_tokens=budget.context_window, limit_tokens=budget.limit,
        soft_limit_tokens=budget.soft_limit, window_source='explicit', messages=1, log_messages=1,
        reserved_output_tokens=budget.reserved_output, reserved_system_tokens=budget.reserved_system,
        safety_tokens=budget.safety_tokens, input_limit_tokens=budget.input_limit,
        soft_threshold=budget.soft_threshold,
    )  # fmt: skip
    assert usage.budget_line() == budget.describe()
    assert 'input capped at 272,000' in usage.budget_line()


def _printed(capsys: pytest.CaptureFixture[str], *argv: Any) -> str:
    assert main([str(a) for a in argv]) == 0
    return ' '.join(capsys.readouterr().out.split())  # rich wraps long lines


def test_inspect_and_replay_print_the_budget_line_and_the_counter(capsys: pytest.CaptureFixture[str]) -> None:
    path: Path = data.SMALLEST
    for printed in (
        _printed(capsys, 'inspect', path, '--window', '16000', '-p', 'coding'),
        _printed(capsys, 'replay', path, '--window', '16000', '-p', 'coding', '--no-progress'),
    ):
        line = LINE.search(printed)
        assert line is not None, printed[-600:]
        assert line.group().startswith(
            'window 16,000 (--window) - output 4,000 - system & tools 0 - margin 320'
        )
        assert 'limit 11,680; soft limit' in line.group()
        assert re.search(r'counted by \S+, (exact|estimated|anchored on provider usage)', printed)
