"""The whole request fits: instructions and tool definitions are counted, the view is fitted per
attempt for the model that serves it, and a provider's "too long" is recovered from.

The agents here are realistic (`tests/realistic.py`): 25 tools with about 10.8k tokens of
definitions, about 3.8k tokens of instructions, a `read_file` returning about 2.9k tokens, and a
`FunctionModel` that measures each request's total (messages + instructions + tool definitions)
with the library's counter, independently of the profile's own measurement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pydantic_ai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, exceptions
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from pydantic_ai_context import ContextBudgetExceeded, ContextUsageEvent, profile
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR
from pydantic_ai_context.integration._overflow import context_overflow
from pydantic_ai_context.overhead import TOOL_OVERHEAD_TOKENS

from ._examples import examples
from .realistic import (
    INSTRUCTIONS,
    SHORT_INSTRUCTIONS,
    RequestMeter,
    make_tools,
    prose,
    read_file,
    reading_script,
    realistic_agent,
)
from .strategies import any_histories

PAI_VERSION = tuple(int(x) for x in pydantic_ai.__version__.split('.')[:2])
HAS_RETRY_MODEL_REQUEST = hasattr(exceptions, 'RetryModelRequest')
LIMITS = UsageLimits(request_limit=300)
STEPS = 45


def integration_paths() -> list[bool]:
    """The capability, and a history processor (1.x `history_processors=`, 2.x `ProcessHistory`)."""
    return [True, False]


@pytest.mark.parametrize('capability', integration_paths(), ids=lambda c: 'capability' if c else 'processors')
@pytest.mark.parametrize('window', [32_000, 24_000])
async def test_no_request_of_a_realistic_agent_exceeds_the_window(window: int, capability: bool) -> None:
    meter = RequestMeter(reading_script(STEPS))
    ctx_profile = profile('coding', context_window=window)
    agent = realistic_agent(meter, ctx_profile, capability=capability)
    result = await agent.run('Read every module and report.', usage_limits=LIMITS)
    assert result.output == 'All files read.'
    assert meter.totals, 'the model was never called'
    assert max(meter.totals) <= window, f'requests over {window:,}: {[t for t in meter.totals if t > window]}'
    # The fixed part (instructions + tools) is about 14.6k tokens; at 24k fewer than 5k are left for
    # messages: the recency window is trimmed and the newest result clamped rather than failing.
    assert len(meter.totals) == STEPS + 1
    if window == 32_000:
        # Without counting tools and instructions, 15+ of these requests went over (issue #9).
        assert max(meter.totals) > 20_000


def thinking_reader(steps: int) -> Callable[[int, list[ModelMessage]], ModelResponse]:
    """Read `steps` files (about 3k tokens each), saying a paragraph before each read (texts are never
    masked: the masked view grows with them until the newest result takes it over the limit)."""

    def script(n: int, messages: list[ModelMessage]) -> ModelResponse:
        if n <= steps:
            return ModelResponse(
                parts=[
                    TextPart(f'Step {n}. ' + prose(120, seed=n)),
                    ToolCallPart('read_file', {'path': f'src/pkg/module_{n:03d}.py'}, tool_call_id=f'c{n}'),
                ]
            )
        return ModelResponse(parts=[TextPart('All files read.')])

    return script


async def test_steps_dropped_for_a_fresh_result_never_come_back() -> None:
    """Regression (stop 25): a fresh ~3k-token result took the view just over the limit, older steps
    were dropped, and at the next request (that result masked) they came back: the provider's
    cached prefix broke twice. At 28k, 11 of these steps came back; with `clamp_fresh` none does."""
    window = 28_000
    meter = RequestMeter(thinking_reader(STEPS))
    agent = realistic_agent(meter, profile('coding', context_window=window, clamp_fresh=True))
    await agent.run('Read every module and report.', usage_limits=LIMITS)
    assert max(meter.totals) <= window
    shown = [
        {p.tool_call_id for m in seen for p in m.parts if isinstance(p, ToolCallPart)} for seen in meter.seen
    ]

    def came_back(ref: str) -> bool:
        """Shown at some request, missing at a later one, shown again after that."""
        present = [ref in ids for ids in shown]
        gone = next((i for i in range(present.index(True), len(present)) if not present[i]), None)
        return gone is not None and any(present[gone:])

    assert not sorted(ref for ref in set().union(*shown) if came_back(ref))


async def test_the_gauge_splits_messages_instructions_and_tools() -> None:
    seen: list[ContextUsageEvent] = []
    meter = RequestMeter(reading_script(3))
    ctx_profile = profile(
        'coding',
        context_window=32_000,
        on_event=lambda e: seen.append(e) if isinstance(e, ContextUsageEvent) else None,
    )
    await realistic_agent(meter, ctx_profile).run('Read three modules.', usage_limits=LIMITS)
    usages = [u for u in seen if u.compile_id is not None]
    assert len(usages) == len(meter.totals) == 4
    counter = meter.counter
    # The agent's, and (as a capability) the profile's read_context and search_context.
    tool_defs = 25 + (2 if PYDANTIC_AI_MAJOR >= 2 else 0)
    for usage, measured in zip(usages, meter.totals, strict=True):
        assert usage.instructions_tokens == counter.count_text(INSTRUCTIONS)
        # The profile counts each definition as the model function does, plus its framing.
        assert usage.tools_tokens > 10_000
        assert usage.used_tokens == usage.message_tokens + usage.instructions_tokens + usage.tools_tokens
        assert measured <= usage.used_tokens <= measured + tool_defs * TOOL_OVERHEAD_TOKENS + 100
    assert ctx_profile.last_overhead is not None
    assert ctx_profile.last_overhead.tools == tool_defs
    if PYDANTIC_AI_MAJOR >= 2:
        assert ctx_profile.last_overhead.source == 'request'


async def test_history_processors_measure_the_runs_tools() -> None:
    meter = RequestMeter(reading_script(2))
    ctx_profile = profile('coding', context_window=32_000)
    agent = realistic_agent(meter, ctx_profile, capability=False)
    await agent.run('Read two modules.', usage_limits=LIMITS)
    assert ctx_profile.last_overhead is not None
    assert ctx_profile.last_overhead.source == 'run-context'
    assert ctx_profile.last_overhead.tools == 25
    assert ctx_profile.last_overhead.tools_tokens > 10_000


async def test_an_explicit_reserved_system_overrides_the_measurement() -> None:
    meter = RequestMeter(reading_script(2))
    ctx_profile = profile('coding', context_window=32_000, reserved_system=1_234)
    await realistic_agent(meter, ctx_profile).run('Read two modules.', usage_limits=LIMITS)
    usage = ctx_profile.last_usage
    assert usage is not None
    assert usage.tools_tokens == 1_234
    assert ctx_profile.budget_for(None).reserved_system == 1_234


async def test_tools_that_leave_no_room_raise_before_anything_is_sent() -> None:
    meter = RequestMeter(reading_script(2))
    agent = realistic_agent(meter, profile('coding', context_window=12_000))
    with pytest.raises(ContextBudgetExceeded, match='instructions and tool definitions'):
        await agent.run('Read two modules.', usage_limits=LIMITS)
    assert meter.totals == []


@pytest.mark.parametrize('kind', ['transparent', 'custom'])
async def test_a_profile_that_does_not_compact_refuses_a_request_over_a_known_window(kind: str) -> None:
    from pydantic_ai_context import ContextProfile

    meter = RequestMeter(reading_script(STEPS))
    # `transparent` checks in its chain; a custom chain without a fit is refused by the request path.
    ctx_profile = (
        profile('transparent', context_window=32_000)
        if kind == 'transparent'
        else ContextProfile(context_window=32_000)
    )
    agent = realistic_agent(meter, ctx_profile)
    with pytest.raises(ContextBudgetExceeded, match='budget allows'):
        await agent.run('Read every module.', usage_limits=LIMITS)
    assert meter.totals
    assert max(meter.totals) <= 32_000


# --- the provider says "too long" ---------------------------------------------------------------


def overflow_error(total: int, limit: int, *, stated: bool) -> Exception:
    detail = f"This model's maximum context length is {limit} tokens. " if stated else 'Input too long. '
    message = detail + f'However, your messages resulted in {total} tokens. (context_length_exceeded)'
    window_error = getattr(exceptions, 'ModelContextWindowExceededError', None)
    if window_error is not None:
        return window_error('function:hidden', message)
    return exceptions.ModelHTTPError(400, 'function:hidden', body={'error': {'message': message}})


@dataclasses.dataclass
class HiddenLimit:
    """A model function that rejects every request whose total is over `limit` tokens."""

    meter: RequestMeter
    limit: int
    stated: bool
    rejected: list[int] = dataclasses.field(default_factory=list[int])
    accepted: list[int] = dataclasses.field(default_factory=list[int])

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        total = self.meter.total(messages, info)
        if total > self.limit:
            self.rejected.append(total)
            raise overflow_error(total, self.limit, stated=self.stated)
        self.accepted.append(total)
        return self.meter(messages, info)


@pytest.mark.parametrize('stated', [True, False], ids=['limit-stated', 'limit-unstated'])
async def test_a_provider_rejection_is_retried_tighter_and_the_run_completes(stated: bool) -> None:
    meter = RequestMeter(reading_script(30))
    hidden = HiddenLimit(meter, limit=20_000, stated=stated)
    ctx_profile = profile('coding', context_window=32_000)
    agent = Agent(
        FunctionModel(hidden.__call__),
        instructions=INSTRUCTIONS,
        tools=make_tools(10),  # with 3.8k tokens of instructions: about 8k tokens besides messages
        capabilities=[ctx_profile],
    )
    result = await agent.run('Read every module and report.', usage_limits=LIMITS)
    assert result.output == 'All files read.'
    assert hidden.rejected, 'the hidden limit was never hit: the test proves nothing'
    assert max(hidden.accepted) <= 20_000
    rejections = [e for e in ctx_profile.events if e.policy == 'provider_rejected']
    assert len(rejections) == len(hidden.rejected)
    # What the provider taught is kept for the model: later requests fit without a rejection.
    assert len(hidden.rejected) <= 3
    assert all('rejected the request as too long' in e.reason for e in rejections)
    assert 'This model' not in rejections[0].reason  # the provider's message body is not echoed


async def test_rejections_past_the_retry_limit_raise_with_both_numbers() -> None:
    meter = RequestMeter(reading_script(40))
    attempts: list[int] = []

    def rejects_once_long(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(meter.totals) < 20:
            return meter(messages, info)
        attempts.append(meter.total(messages, info))
        raise overflow_error(attempts[-1], 10, stated=False)

    ctx_profile = profile('coding', context_window=128_000, max_overflow_retries=2)
    agent = Agent(FunctionModel(rejects_once_long), tools=make_tools(3), capabilities=[ctx_profile])
    with pytest.raises(ContextBudgetExceeded, match='rejected the request as too long 3 times') as info:
        await agent.run('Read every module.', usage_limits=LIMITS)
    # Each attempt was tighter than the one the provider rejected before it.
    assert len(attempts) == 3
    assert attempts[0] > attempts[1] > attempts[2]
    assert info.value.used == attempts[2] or abs(info.value.used - attempts[2]) < 0.05 * attempts[2]
    assert info.value.limit < info.value.used
    assert isinstance(info.value.__cause__, exceptions.ModelAPIError)


async def test_other_model_errors_pass_through_unchanged() -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise exceptions.ModelHTTPError(400, 'function:broken', body={'error': 'invalid tool schema'})

    agent = Agent(FunctionModel(broken), capabilities=[profile('coding', context_window=32_000)])
    with pytest.raises(exceptions.ModelHTTPError, match='400'):
        await agent.run('hello', usage_limits=LIMITS)


@pytest.mark.skipif(not hasattr(pydantic_ai.capabilities, 'ModelFallback'), reason='ModelFallback is 2.64+')
async def test_a_fallback_to_a_smaller_model_gets_a_view_that_fits_it() -> None:
    from pydantic_ai.capabilities import ModelFallback

    big_meter = RequestMeter(reading_script(30))
    small_meter = RequestMeter(reading_script(30))

    def big(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        total = big_meter.total(messages, info)
        big_meter.totals.append(total)
        if total > 18_000:  # the big model is flaky once the conversation grows
            raise exceptions.ModelHTTPError(503, 'function:big', body='overloaded')
        return small_meter.script(len(big_meter.totals) + len(small_meter.totals), messages)

    def small(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        total = small_meter.total(messages, info)
        small_meter.totals.append(total)
        return small_meter.script(len(big_meter.totals) + len(small_meter.totals), messages)

    big_model = FunctionModel(big, model_name='big', profile={'context_window': 128_000})
    small_model = FunctionModel(small, model_name='small', profile={'context_window': 16_000})
    ctx_profile = profile('coding')  # the window comes from each serving model's profile
    agent = Agent(
        big_model,
        instructions=SHORT_INSTRUCTIONS,
        tools=make_tools(5),
        capabilities=[ctx_profile, ModelFallback(small_model)],
    )
    await agent.run('Read every module.', usage_limits=LIMITS)
    assert any(t > 16_000 for t in big_meter.totals), 'the big model never saw more than the small one fits'
    assert small_meter.totals
    assert max(small_meter.totals) <= 16_000


async def test_incremental_state_is_exact_when_attempts_alternate_windows() -> None:
    meter = RequestMeter(reading_script(20))
    await realistic_agent(meter, profile('coding', context_window=128_000)).run('Read.', usage_limits=LIMITS)
    log = meter.seen[-1]
    live = profile('coding')
    big = FunctionModel(meter.__call__, model_name='big', profile={'context_window': 64_000})
    small = FunctionModel(meter.__call__, model_name='small', profile={'context_window': 16_000})
    for end in range(3, len(log) + 1, 2):
        if not isinstance(log[end - 1], type(log[0])):
            continue
        for model in (big, small, big):
            expected = await profile('coding').compile(log[:end], model=model)
            assert await live.compile(log[:end], model=model) == expected


def test_overflow_errors_are_recognised_with_their_limits() -> None:
    openai = exceptions.ModelHTTPError(
        400,
        'gpt',
        body={
            'error': {
                'message': "This model's maximum context length is 128000 tokens. However, your messages "
                'resulted in 130,512 tokens.',
                'code': 'context_length_exceeded',
            }
        },
    )
    found = context_overflow(openai)
    assert found is not None
    assert (found.limit, found.requested) == (128_000, 130_512)
    anthropic = exceptions.ModelHTTPError(
        400,
        'claude',
        body={'type': 'error', 'error': {'message': 'prompt is too long: 210000 tokens > 200000 maximum'}},
    )
    found = context_overflow(anthropic)
    assert found is not None
    assert (found.limit, found.requested) == (200_000, 210_000)
    gemini = exceptions.ModelHTTPError(
        400,
        'gemini',
        body='The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).',
    )
    found = context_overflow(gemini)
    assert found is not None
    assert found.limit == 1_048_576
    assert context_overflow(exceptions.ModelHTTPError(400, 'x', body='invalid schema for tool')) is None
    assert context_overflow(exceptions.ModelHTTPError(500, 'x', body='context length exceeded')) is None
    assert context_overflow(ValueError('context length')) is None
    # A hostile body is read only so far, and never echoed.
    hostile = exceptions.ModelHTTPError(
        400, 'x', body='maximum context length ' + '9' * 5_000_000 + ' secret'
    )
    found = context_overflow(hostile)
    assert found is not None
    assert 'secret' not in found.message
    assert '999' not in found.message


# --- thinking parts -----------------------------------------------------------------------------


def thinking_script(steps: int, *, run: int) -> Any:
    from pydantic_ai.messages import ThinkingPart

    def script(n: int, messages: list[ModelMessage]) -> ModelResponse:
        plan = f'Run {run}, plan for step {n}: ' + 'consider the module carefully. ' * 40
        thinking = ThinkingPart(plan, signature=f'sig-{run}-{n}', provider_name='anthropic')
        if n <= steps:
            call = ToolCallPart(
                'read_file', {'path': f'src/pkg/module_{run}_{n:03d}.py'}, tool_call_id=f't{run}-{n}'
            )
            return ModelResponse(parts=[thinking, call])
        return ModelResponse(parts=[thinking, TextPart('Done.')])

    return script


def thinking_agent(meter: RequestMeter, ctx_profile: Any) -> Agent[None, str]:
    if PYDANTIC_AI_MAJOR >= 2:
        return Agent(FunctionModel(meter.__call__), tools=[read_file], capabilities=[ctx_profile])
    return Agent(
        FunctionModel(meter.__call__), tools=[read_file], history_processors=ctx_profile.history_processors
    )


@pytest.mark.parametrize('window', [64_000, 16_000])
@pytest.mark.parametrize('name', ['coding', 'chat', 'long_horizon'])
async def test_signed_thinking_parts_are_never_altered_and_the_current_runs_stay(
    name: str, window: int
) -> None:
    from pydantic_ai.messages import ThinkingPart

    summariser = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart('A short summary.')]))
    ctx_profile = profile(name, context_window=window, summary_model=summariser)
    first = RequestMeter(thinking_script(12, run=1))
    result = await thinking_agent(first, ctx_profile).run('Read twelve modules.', usage_limits=LIMITS)
    second = RequestMeter(thinking_script(6, run=2))
    await thinking_agent(second, ctx_profile).run(
        'Now six more.', message_history=result.all_messages(), usage_limits=LIMITS
    )
    logged = {
        (p.content, p.signature) for m in second.seen[-1] for p in m.parts if isinstance(p, ThinkingPart)
    }
    originals = {
        (p.content, p.signature)
        for meter in (first, second)
        for view in meter.seen
        for m in view
        for p in m.parts
        if isinstance(p, ThinkingPart)
    }
    assert logged <= originals
    for n, view in enumerate(second.seen, start=1):
        sent = [p for m in view for p in m.parts if isinstance(p, ThinkingPart)]
        for part in sent:
            # Whole and signed, or not there at all: never clipped, never re-signed.
            expected_run, expected_step = part.signature.split('-')[1:]
            assert part.content.startswith(f'Run {expected_run}, plan for step {expected_step}: ')
            assert part.content.endswith('carefully. ')
            assert part.provider_name == 'anthropic'
        current = [p.signature for p in sent if p.signature.startswith('sig-2-')]
        if window == 64_000:
            # Room for the current run: its thinking is all there, in order.
            assert current == [f'sig-2-{k}' for k in range(1, n)]
        else:
            # Fitting 16k drops whole old steps of the run, thinking and all; the newest stays.
            assert current == [f'sig-2-{k}' for k in range(n - len(current), n)]
            if n > 1:
                assert current[-1] == f'sig-2-{n - 1}'


# --- prompt caching -----------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(pydantic_ai.capabilities, 'Caching'), reason='the Caching capability is 2.x')
async def test_views_keep_the_cached_prefix_with_the_caching_capability() -> None:
    from pydantic_ai.capabilities import Caching

    settings: list[Any] = []
    meter = RequestMeter(reading_script(40))

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        settings.append(info.model_request_parameters.cache)
        return meter(messages, info)

    ctx_profile = profile('coding', context_window=64_000)
    # A model whose profile supports the unified cache setting, as Anthropic's and Bedrock's do.
    cached_model = FunctionModel(model, profile={'supports_cache': True})
    agent = Agent(
        cached_model,
        instructions=SHORT_INSTRUCTIONS,
        tools=make_tools(5),
        capabilities=[Caching(), ctx_profile],
    )
    await agent.run('Read every module.', usage_limits=LIMITS)
    # The cache setting reaches the model: the provider places its breakpoint at the end of what it is sent.
    assert settings
    assert all(s not in (None, False) for s in settings), settings[:3]
    # That breakpoint is a hit on the next request unless compaction moved the prefix: it moves in steps.
    kept = [meter.seen[i + 1][: len(meter.seen[i])] == meter.seen[i] for i in range(len(meter.seen) - 1)]
    moved = kept.count(False)
    compactions = {e.compile_id for e in ctx_profile.events}
    assert 0 < moved <= len(compactions)
    assert moved <= len(kept) // 5, f'the prefix moved on {moved} of {len(kept)} requests'


async def test_history_stats_split_messages_instructions_and_tools() -> None:
    from pydantic_ai_context import history_stats

    meter = RequestMeter(reading_script(3))
    ctx_profile = profile('coding', context_window=32_000)
    result = await realistic_agent(meter, ctx_profile).run('Read three modules.', usage_limits=LIMITS)
    log = result.all_messages()
    counter = meter.counter
    stats = history_stats(log, counter=counter, overhead=ctx_profile.last_overhead)
    assert stats.instructions_tokens == counter.count_text(INSTRUCTIONS)
    assert stats.message_tokens == stats.tokens - stats.instructions_tokens
    assert ctx_profile.last_overhead is not None
    assert stats.tools_tokens == ctx_profile.last_overhead.tools_tokens > 10_000
    assert 'instructions 3,' in str(stats)
    bare = history_stats(log, counter=counter)
    assert bare.tools_tokens == 0
    assert bare.instructions_tokens == stats.instructions_tokens


def test_overflow_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_MAX_OVERFLOW_RETRIES', '5')
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_OVERFLOW_SHRINK', '0.5')
    built = profile('coding')
    assert (built.max_overflow_retries, built.overflow_shrink) == (5, 0.5)
    assert profile('coding', overflow_shrink=0.9).overflow_shrink == 0.9
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_OVERFLOW_SHRINK', '1.5')
    from pydantic_ai_context import ContextSettingsError

    with pytest.raises(ContextSettingsError, match='PYDANTIC_AI_CONTEXT_OVERFLOW_SHRINK'):
        profile('coding')


# --- never send what cannot fit, on any input -------------------------------------------------


@given(
    log=any_histories,
    name=st.sampled_from(['transparent', 'coding', 'chat', 'long_horizon']),
    window=st.sampled_from([2_000, 4_000, 8_000, 32_000]),
    tools=st.integers(0, 12),
    instructions=st.integers(0, 400),
)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
async def test_the_request_path_never_returns_a_view_over_the_window(
    log: list[ModelMessage], name: str, window: int, tools: int, instructions: int
) -> None:
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.tools import ToolDefinition

    from pydantic_ai_context import HeuristicCounter

    from .invariants import assert_valid

    counter = HeuristicCounter()
    if instructions and log and hasattr(log[-1], 'instructions'):
        log = [*log[:-1], dataclasses.replace(log[-1], instructions=prose(instructions, seed=instructions))]
    definitions = [
        ToolDefinition(
            name=f'tool_{i}', description=prose(20, seed=i), parameters_json_schema={'type': 'object'}
        )
        for i in range(tools)
    ]
    parameters = ModelRequestParameters(function_tools=definitions)
    summariser = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart('Summary.')]))
    ctx_profile = profile(name, context_window=window, counter=counter, summary_model=summariser)
    try:
        view = await ctx_profile.compile_request(log, parameters=parameters)
    except ContextBudgetExceeded as exc:
        refused: ContextBudgetExceeded | None = exc
    else:
        refused = None
    if refused is not None:
        assert refused.used > refused.limit
        return
    if not log:
        return
    assert_valid(view)
    usage = ctx_profile.last_usage
    assert usage is not None
    budget = ctx_profile.budget_for(None, overhead=ctx_profile.last_overhead)
    assert counter.count_messages(view) + budget.reserved_system <= window - budget.reserved_output
