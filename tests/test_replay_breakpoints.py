"""Replay's second cache model: a provider that caches at explicit breakpoints (Anthropic, Bedrock)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_context import HeuristicCounter, TiktokenCounter, profile
from pydantic_ai_context.replay import load_history, replay
from pydantic_ai_context.replay.breakpoints import BreakpointCache, content_blocks
from pydantic_ai_context.request_tokens import RequestTokens, weigh_request

from . import data

COUNTER = HeuristicCounter()


def steps(n: int, *, start: int = 0, calls: int = 1) -> list[ModelMessage]:
    """`n` tool steps: a response with `calls` calls, then a request with their results."""
    out: list[ModelMessage] = []
    for k in range(start, start + n):
        ids = [f'c{k}_{j}' for j in range(calls)]
        out.append(
            ModelResponse(
                parts=[
                    ToolCallPart('read', {'path': f'f{k}_{j}.py'}, tool_call_id=i) for j, i in enumerate(ids)
                ]
            )
        )
        out.append(
            ModelRequest(parts=[ToolReturnPart('read', f'output {k} ' * 20, tool_call_id=i) for i in ids])
        )
    return out


def weigh(view: Sequence[ModelMessage]) -> RequestTokens:
    return weigh_request(view, counter=COUNTER, per_message=True)


def read(cache: BreakpointCache, view: list[ModelMessage]) -> tuple[int, RequestTokens]:
    weight = weigh(view)
    return cache.read(view, weight), weight


def test_a_request_that_appends_reads_the_previous_one_whole() -> None:
    cache = BreakpointCache(lambda m: m)
    first = [ModelRequest(parts=[UserPromptPart('Fix it.')]), *steps(5)]
    assert read(cache, first)[0] == 0
    second = [*first, *steps(1, start=5)]
    cached, weight = read(cache, second)
    assert weight.per_message is not None
    assert cached == sum(weight.per_message[: len(first)])


def test_a_change_far_from_the_end_reads_no_message_and_a_near_one_reads_up_to_an_entry() -> None:
    cache = BreakpointCache(lambda m: m)
    opening = [ModelRequest(parts=[UserPromptPart('Fix it.')])]
    first = [*opening, *steps(30)]
    views = [first, [*first, *steps(1, start=30)]]  # the same message objects, as a replay's log
    for view in views:
        read(cache, view)
    # The oldest output masked: 60 blocks before the end, out of every breakpoint's reach.
    masked = list(views[1])
    masked[2] = ModelRequest(parts=[ToolReturnPart('read', '[masked]', tool_call_id='c0_0')])
    far = [*masked, *steps(1, start=31)]
    cached, weight = read(cache, far)
    assert cached == 0  # no instructions or tools here: nothing at all
    # The cache of the longest common prefix would have read the one message before the change.
    assert weight.per_message is not None
    # A change 2 steps from the end: read up to the request two steps back (the one before's end).
    cache = BreakpointCache(lambda m: m)
    for view in views:
        read(cache, view)
    near = list(views[1])
    near[-1] = ModelRequest(parts=[ToolReturnPart('read', '[masked]', tool_call_id='c30_0')])
    near = [*near, *steps(1, start=31)]
    cached, weight = read(cache, near)
    assert weight.per_message is not None
    assert cached == sum(weight.per_message[: len(views[0])])


def test_a_turn_of_many_parallel_calls_is_read_through_the_breakpoint_at_the_previous_end() -> None:
    cache = BreakpointCache(lambda m: m)
    first = [ModelRequest(parts=[UserPromptPart('Read them all.')]), *steps(2)]
    read(cache, first)
    wide = [*first, *steps(1, start=2, calls=25)]
    assert content_blocks(wide[-2]) == 25
    assert content_blocks(wide[-1]) == 1  # results take one position
    cached, weight = read(cache, wide)
    assert weight.per_message is not None
    assert cached == sum(weight.per_message[: len(first)])


def test_instructions_are_read_while_unchanged_and_a_change_reads_nothing() -> None:
    cache = BreakpointCache(lambda m: m)
    rules = 'Be careful. ' * 50
    first = [ModelRequest(parts=[UserPromptPart('Fix it.')], instructions=rules), *steps(30)]
    read(cache, first)
    masked = list(first)
    masked[2] = ModelRequest(
        parts=[ToolReturnPart('read', '[masked]', tool_call_id='c0_0')], instructions=None
    )
    masked[-1] = ModelRequest(parts=list(masked[-1].parts), instructions=rules)
    cached, weight = read(cache, masked)
    assert cached == weight.instructions_tokens > 0
    other = [*first[:-1], ModelRequest(parts=list(first[-1].parts), instructions='Other rules.')]
    assert read(cache, other)[0] == 0


def test_content_blocks_count_positions_as_the_claude_api_does() -> None:
    response = ModelResponse(
        parts=[TextPart('Looking.'), ToolCallPart('a', {}, 'x'), ToolCallPart('b', {}, 'y')]
    )
    assert content_blocks(response) == 3
    results = ModelRequest(
        parts=[
            ToolReturnPart('a', '1', tool_call_id='x'),
            ToolReturnPart('b', '2', tool_call_id='y'),
            UserPromptPart(['see', 'this']),
        ]
    )
    assert content_blocks(results) == 3


async def test_replay_records_both_caches_and_they_agree_without_compaction() -> None:
    log = load_history(data.TRAJECTORY_DIR / 'oh_sdk_sonnet4_astropy_fitsdiff.json')
    assert isinstance(log[0], ModelRequest)
    counter = TiktokenCounter()
    none = await replay(log, None, context_window=128_000, counter=counter)  # type: ignore[arg-type]
    assert [r.breakpoint_cached_tokens for r in none.records] == [r.cached_tokens for r in none.records]
    assert none.breakpoint_cost == none.cost
    coding = await replay(
        log, profile('coding', context_window=32_000, counter=counter), context_window=32_000, counter=counter
    )  # type: ignore[arg-type]
    breaks = [r for r in coding.records if r.prefix_break]
    assert breaks
    # A compaction step changes messages far from the end: the breakpoints read less than the
    # longest common prefix there, and never more anywhere.
    assert all(r.breakpoint_cached_tokens <= r.cached_tokens for r in coding.records)
    assert sum(r.breakpoint_cached_tokens < r.cached_tokens for r in breaks) >= len(breaks) // 2
    assert coding.breakpoint_cost > coding.cost
    assert coding.summary()['breakpoint_cost'] == coding.breakpoint_cost
