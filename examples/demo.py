"""Offline demo: a tool-using agent whose log grows while the view the model receives stays small.

Runs a pydantic-ai agent on a scripted `FunctionModel` (no network, no API key) that reads
large files and runs a noisy test suite over many steps. For every model request it prints
the tokens in the full log beside the tokens in the view the model actually received.

    python examples/demo.py [--profile coding] [--steps 30] [--window 128000]
"""

from __future__ import annotations

import argparse
import asyncio
import textwrap

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from rich.console import Console
from rich.table import Table

from pydantic_ai_context import TiktokenCounter, available_profiles, profile

FILES = ['src/shop/cart.py', 'src/shop/pricing.py', 'src/shop/tax.py', 'tests/test_cart.py']


def fake_source(path: str) -> str:
    body = '\n'.join(
        f'    def method_{i}(self, amount: float) -> float:\n        return amount * {i} / 100  # {path}'
        for i in range(60)
    )
    return f'# {path}\nclass Thing:\n{body}\n'


def fake_test_log(step: int) -> str:
    passed = '\n'.join(f'tests/test_cart.py::test_case_{i} PASSED' for i in range(120))
    failure = textwrap.dedent(
        f"""
        FAILED tests/test_cart.py::test_discount_{step} - AssertionError: assert 9.99 == 10.0
        Traceback (most recent call last):
          File "src/shop/pricing.py", line 42, in apply_discount
        AssertionError: rounding differs
        """
    )
    return passed + failure


def scripted_model(steps: int, views: list[list[ModelMessage]]) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        views.append(messages)
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn >= steps:
            return ModelResponse(
                parts=[TextPart('Fixed the rounding in src/shop/pricing.py; all tests pass.')]
            )
        if turn % 3 == 2:
            return ModelResponse(parts=[ToolCallPart('run_tests', {}, tool_call_id=f'c{turn}')])
        path = FILES[turn % len(FILES)]
        return ModelResponse(
            parts=[
                TextPart(f'Reading {path} to find the rounding bug.'),
                ToolCallPart('read_file', {'path': path}, tool_call_id=f'c{turn}'),
            ]
        )

    return FunctionModel(respond, model_name='demo-model')


async def main(profile_name: str, steps: int, window: int) -> None:
    views: list[list[ModelMessage]] = []
    # A handler makes the profile count each step's tokens, so the events can say what changed.
    ctx_profile = profile(profile_name, context_window=window, on_compaction=lambda event: None)
    agent = Agent(scripted_model(steps, views), capabilities=[ctx_profile])

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file from the repository."""
        return fake_source(path)

    step = 0

    @agent.tool_plain
    def run_tests() -> str:
        """Run the test suite."""
        nonlocal step
        step += 1
        return fake_test_log(step)

    counter = TiktokenCounter()
    console = Console()
    logs: list[int] = []
    async with agent.iter('The cart total is off by a cent. Find and fix the bug.') as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                # The node's request joins the log when the node runs; count it now.
                pending = [] if node.request in run.all_messages() else [node.request]
                logs.append(counter.count_messages([*run.all_messages(), *pending]))
    assert run.result is not None

    table = Table(title=f'profile {profile_name!r}: tokens per model request (window {window:,})')
    table.add_column('request', justify='right')
    table.add_column('full log', justify='right')
    table.add_column('view sent', justify='right')
    table.add_column('saved', justify='right')
    for i, (log_tokens, view) in enumerate(zip(logs, views, strict=False), start=1):
        view_tokens = counter.count_messages(view)
        saved = 1 - view_tokens / log_tokens if log_tokens else 0.0
        table.add_row(str(i), f'{log_tokens:,}', f'{view_tokens:,}', f'{saved:.0%}')
    console.print(table)
    full = run.result.all_messages()
    console.print(
        f'log kept whole: {len(full)} messages, {counter.count_messages(full):,} tokens '
        f'({counter.name}); last view: {len(views[-1])} messages'
    )
    console.print(f'answer: {run.result.output}')
    if ctx_profile.events:
        console.print('last compaction events:')
        for event in list(ctx_profile.events)[-3:]:
            console.print(f'  {event.policy}: {event.reason} ({event.change})')


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f'must be a positive integer, got {text}')
    return value


if __name__ == '__main__':
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default = 'coding' if 'coding' in available_profiles() else 'transparent'
    parser.add_argument('--profile', default=default, choices=available_profiles())
    parser.add_argument('--steps', type=positive, default=30, help='tool steps the agent takes (default 30)')
    parser.add_argument(
        '--window', type=positive, default=128_000, help='context window in tokens (default 128,000)'
    )
    args = parser.parse_args()
    asyncio.run(main(args.profile, args.steps, args.window))
