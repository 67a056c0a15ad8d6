"""Issue 14: a coding agent whose tool outputs are large keeps what it learned at a 32k window.

A `FunctionModel` agent alternates `read_file` (about 5.5k tokens a file) and `run_tests` (a long
log with one `FAILED` line), 44 tool steps, with `profile('coding', context_window=32_000)`. The
model function measures every request it receives with the library's counter. Before the frontier
followed the budget, the view kept up to a dozen full outputs, overflowed, and `fit_to_budget`
dropped whole steps with their digests: 1 of 22 paths and 2 of 22 FAILED lines were left at the end.
"""

from __future__ import annotations

import warnings

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import ContextProfile, profile
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR, message_text
from pydantic_ai_context.tokens import default_counter

STEPS = 44
WINDOW = 32_000


def source_file(path: str) -> str:
    """About 5.5k tokens of plausible Python source naming its own path."""
    lines = [f'# {path}', 'from __future__ import annotations', '']
    n = 0
    while len(lines) < 520:
        lines += [
            f'def handler_{n}(request, *, timeout: float = {n}.5) -> dict[str, object]:',
            f'    """Handle request kind {n} for {path}."""',
            f'    payload = {{"id": {n}, "status": request.status, "items": list(request.items)}}',
            '    return payload',
            '',
        ]
        n += 1
    return '\n'.join(lines)


def pytest_log(i: int) -> str:
    """A long pytest log with exactly one FAILED line."""
    body = [f'tests/test_mod{i}.py::test_case_{k} PASSED' for k in range(160)]
    failed = f'FAILED tests/test_mod{i}.py::test_edge_{i} - AssertionError: expected {i}, got {i + 1}'
    return '\n'.join(['============ test session starts ============', *body, failed, '1 failed, 160 passed'])


def read_path(i: int) -> str:
    return f'src/pkg/module_{i}.py'


class Recorder:
    """The model: calls the next tool; records the size of every request it receives."""

    def __init__(self) -> None:
        self.received: list[list[ModelMessage]] = []
        self.sizes: list[int] = []

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(messages)
        self.sizes.append(default_counter(None).count_messages(messages))
        step = sum(isinstance(m, ModelResponse) for m in messages)
        if step >= STEPS:
            return ModelResponse(parts=[TextPart('all modules read and tested')])
        i = step // 2
        if step % 2 == 0:
            call = ToolCallPart('read_file', {'path': read_path(i)}, tool_call_id=f'r{i}')
        else:
            call = ToolCallPart('run_tests', {'target': f'tests/test_mod{i}.py'}, tool_call_id=f't{i}')
        return ModelResponse(parts=[call])


def build_agent(model: FunctionModel, p: ContextProfile) -> Agent[None, str]:
    if PYDANTIC_AI_MAJOR >= 2:
        agent = Agent(model, capabilities=[p])
    else:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            agent = Agent(model, history_processors=p.history_processors)

    @agent.tool_plain
    def read_file(path: str) -> str:
        return source_file(path)

    @agent.tool_plain
    def run_tests(target: str) -> str:
        return pytest_log(int(target.removeprefix('tests/test_mod').removesuffix('.py')))

    return agent


@pytest.mark.parametrize('name', ['coding', 'long_horizon'])
async def test_large_outputs_keep_paths_and_failures_at_32k(name: str) -> None:
    recorder = Recorder()
    p = profile(name, context_window=WINDOW)
    agent = build_agent(FunctionModel(recorder.respond), p)
    assert default_counter(None).count_text(source_file(read_path(0))) > 5_000

    result = await agent.run('Read every module and run its tests; report what fails.')

    assert result.output == 'all modules read and tested'
    assert len(recorder.received) == STEPS + 1
    assert max(recorder.sizes) <= WINDOW, 'a request over the window'
    over = [size for size in recorder.sizes if size > p.budget_for(None).limit]
    assert not over, f'{len(over)} requests over the limit'
    last = '\n'.join(message_text(m) for m in recorder.received[-1])
    earlier = range(STEPS // 2 - 1)  # the last read and test run are in the recency window
    paths = [read_path(i) for i in earlier]
    failures = [pytest_log(i).splitlines()[-2] for i in earlier]
    seen_paths = sum(path in last for path in paths) / len(paths)
    seen_failures = sum(line in last for line in failures) / len(failures)
    assert seen_paths >= 0.9, f'{seen_paths:.0%} of the paths are visible'
    assert seen_failures >= 0.9, f'{seen_failures:.0%} of the FAILED lines are visible'
