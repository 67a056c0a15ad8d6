"""The fourth cache breakpoint on Anthropic and Bedrock: where the next compaction step starts, or on
the entry a step's request can still read (`_cache_points`, issue 31)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    CachePoint,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from pydantic_ai_context import ContextBudgetExceeded, HeuristicCounter, TiktokenCounter, profile
from pydantic_ai_context._cache_points import (
    CachePointPlan,
    add_cache_point,
    breakpoint_ttl,
    holds_cache_point,
    with_cache_point,
    write_position,
)
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR
from pydantic_ai_context.replay import load_history, replay

from . import data
from ._examples import examples
from .invariants import assert_valid
from .strategies import histories

COUNTER = HeuristicCounter()
MASKED = {'pydantic_ai_context': {'kind': 'masked'}}


class _System:
    def __init__(self, system: str) -> None:
        self.system = system


def step(i: int, content: str = 'output', *, masked: bool = False) -> list[ModelMessage]:
    return [
        ModelResponse(parts=[ToolCallPart('cat', {'path': f'f{i}.py'}, tool_call_id=f'c{i}')]),
        ModelRequest(
            parts=[ToolReturnPart('cat', content, tool_call_id=f'c{i}', metadata=MASKED if masked else None)]
        ),
    ]


_PROMPT = ModelRequest.user_text_prompt('Fix the bug.')
_STEPS: dict[tuple[int, bool], list[ModelMessage]] = {}


def view_of(masked: int, fresh: int) -> list[ModelMessage]:
    """The prompt, `masked` masked steps, then `fresh` whole ones: the views of one log (the same
    message objects from one call to the next, as a compile gives them)."""
    out: list[ModelMessage] = [_PROMPT]
    for i in range(masked + fresh):
        key = (i, i < masked)
        if key not in _STEPS:
            _STEPS[key] = step(i, '[masked]', masked=True) if i < masked else step(i)
        out += _STEPS[key]
    return out


# --- when a point is placed at all ---------------------------------------------------------------


@pytest.mark.parametrize(
    ('system', 'settings', 'ttl'),
    [
        ('anthropic', {'cache': True}, '5m'),
        ('anthropic', {'cache': '1h'}, '1h'),
        ('anthropic', {'cache': '12h'}, '1h'),
        ('anthropic', {'cache': '30m'}, '5m'),
        ('anthropic', {'cache': {'messages': False}}, None),
        ('anthropic', {'cache': {'retention': '1h'}}, '1h'),
        ('anthropic', {'cache': False}, None),
        ('anthropic', {}, None),
        ('anthropic', None, None),
        # The provider's own settings take precedence over the unified one.
        ('anthropic', {'cache': True, 'anthropic_cache_instructions': True}, None),
        ('anthropic', {'anthropic_cache_messages': '1h'}, '1h'),
        ('anthropic', {'anthropic_cache': True}, '5m'),
        ('bedrock', {'cache': True}, '5m'),
        ('bedrock', {'bedrock_cache_messages': True}, '5m'),
        ('bedrock', {'cache': True, 'bedrock_cache_instructions': True}, None),
        # Automatic prefix caching: a point would be an empty user message (OpenAI) or dropped.
        ('openai', {'cache': True}, None),
        ('google-gla', {'cache': True}, None),
        ('function', {'cache': True}, None),
        # A `FallbackModel` (2.62-2.63 see it, not the model serving the attempt): it may be OpenAI.
        ('fallback:anthropic,openai', {'cache': True}, None),
    ],
)
def test_a_point_is_placed_only_where_the_conversation_is_cached_at_breakpoints(
    system: str, settings: dict[str, Any] | None, ttl: str | None
) -> None:
    assert breakpoint_ttl(_System(system), settings) == ttl


def test_a_request_that_holds_the_applications_own_point_gets_none_of_ours() -> None:
    view = view_of(3, 3)
    own = with_cache_point(view, 1)
    assert holds_cache_point(own)
    assert not holds_cache_point(view)
    sent = add_cache_point(
        CachePointPlan(), own, model=_System('anthropic'), settings={'cache': True}, conversation='c'
    )
    assert sent == own
    sent = add_cache_point(
        CachePointPlan(), view, model=_System('anthropic'), settings={'cache': True}, conversation='c'
    )
    assert sent != view
    assert holds_cache_point(sent)


# --- where it goes ---------------------------------------------------------------------------


def test_the_point_follows_the_newest_compacted_message() -> None:
    view = view_of(4, 3)
    assert write_position(view) == 9  # the prompt, then four masked steps
    assert write_position(view_of(0, 5)) == 0  # nothing compacted: no point
    sent = with_cache_point(view, 9, '1h')
    assert sent[:8] == view[:8]
    assert sent[9:] == view[9:]
    last = sent[8]
    assert isinstance(last, ModelRequest)
    assert last.parts[:-1] == view[8].parts
    point = last.parts[-1]
    assert isinstance(point, UserPromptPart)
    assert point.content == [CachePoint(ttl='1h')]


def test_a_summary_or_an_isolated_run_counts_as_compacted_but_a_clamp_does_not() -> None:
    summary = ModelRequest(
        parts=[UserPromptPart('Summary of the earlier work.')],
        metadata={'pydantic_ai_context': {'kind': 'summary'}},
    )
    view: list[ModelMessage] = [ModelRequest.user_text_prompt('go'), summary, *step(1), *step(2)]
    assert write_position(view) == 2
    clamped = ToolReturnPart(
        'cat', 'x', tool_call_id='c9', metadata={'pydantic_ai_context': {'kind': 'clamped'}}
    )
    view += [ModelResponse(parts=[ToolCallPart('cat', {}, tool_call_id='c9')]), ModelRequest(parts=[clamped])]
    assert write_position(view) == 2  # the newest result's clamp is inside the recency window


def test_steady_requests_write_where_the_next_step_starts_and_the_step_reads_it() -> None:
    plan = CachePointPlan()
    # Steady: the frontier stays after 4 masked steps while new steps append.
    for fresh in range(3, 20):
        assert plan.place(view_of(4, fresh), 'c') == 9
    # The step: 15 more results masked. The first change is at message 10, beyond the end's reach
    # (about 30 blocks back), so the point goes on the entry the steady requests wrote.
    assert plan.place(view_of(19, 5), 'c') == 9
    # Then steady again: the point moves to the new frontier.
    assert plan.place(view_of(19, 6), 'c') == 39


def test_a_change_within_the_ends_reach_leaves_the_point_free_to_write() -> None:
    plan = CachePointPlan()
    assert plan.place(view_of(4, 3), 'c') == 9
    # 2 more masked: the first change is 4 blocks from the end, which its lookback reaches.
    assert plan.place(view_of(6, 2), 'c') == 13


def test_a_view_that_shares_no_entry_gets_the_write_point() -> None:
    plan = CachePointPlan()
    plan.place(view_of(4, 20), 'c')
    other: list[ModelMessage] = [ModelRequest.user_text_prompt('Another task.'), *view_of(4, 20)[1:]]
    assert plan.place(other, 'c') == 9


def test_conversations_are_remembered_apart_and_the_least_recent_is_forgotten() -> None:
    plan = CachePointPlan(conversations=2)
    for key in ('a', 'b'):
        for fresh in range(3, 20):
            plan.place(view_of(4, fresh), key)
    plan.place(view_of(0, 1), 'c')  # a third conversation: 'a' is forgotten
    assert plan.place(view_of(19, 5), 'b') == 9  # reads its entry
    assert plan.place(view_of(19, 5), 'a') == 39  # nothing remembered: the write point
    with pytest.raises(ValueError, match='conversations'):
        CachePointPlan(conversations=0)


def test_no_point_where_pydantic_ai_takes_the_fourth_breakpoint_at_the_previous_end() -> None:
    # A turn of 25 parallel calls: pydantic-ai marks the previous request's end too.
    wide: list[ModelMessage] = [
        ModelResponse(parts=[ToolCallPart('cat', {}, tool_call_id=f'w{j}') for j in range(25)]),
        ModelRequest(parts=[ToolReturnPart('cat', 'x', tool_call_id=f'w{j}') for j in range(25)]),
    ]
    assert CachePointPlan().place(view_of(4, 2) + wide, 'c') is None


def test_a_cache_point_counts_no_tokens() -> None:
    view = view_of(4, 3)
    sent = with_cache_point(view, 9)
    for counter in (HeuristicCounter(), TiktokenCounter()):
        assert counter.count_messages(sent) == counter.count_messages(view)
        assert counter.count_message(sent[8]) == counter.count_message(view[8])


# --- through the agent ------------------------------------------------------------------------


def _cat_agent(
    model: FunctionModel, ctx_profile: Any, *, settings: dict[str, Any] | None = None
) -> Agent[None, str]:
    agent = Agent(model, capabilities=[ctx_profile], model_settings=settings)  # type: ignore[arg-type]

    @agent.tool_plain
    def cat(path: str) -> str:
        return f'contents of {path}\n' + 'line\n' * 300

    return agent


def _scripted(seen: list[list[ModelMessage]], system: str) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        if len(seen) < 25:
            return ModelResponse(parts=[ToolCallPart('cat', {'path': f'f{len(seen)}.py'})])
        return ModelResponse(parts=[TextPart('done')])

    return _NamedFunctionModel(respond, system=system)


class _NamedFunctionModel(FunctionModel):
    """A `FunctionModel` that says it is served by `system` (as `AnthropicModel` says 'anthropic')."""

    def __init__(self, function: Callable[..., ModelResponse], *, system: str) -> None:
        super().__init__(function)
        self._named_system = system

    @property
    def system(self) -> str:
        return self._named_system


def _points(messages: list[ModelMessage]) -> list[int]:
    return [
        i
        for i, m in enumerate(messages)
        if isinstance(m, ModelRequest)
        and any(
            isinstance(p, UserPromptPart) and not isinstance(p.content, str) and CachePoint() in p.content
            for p in m.parts
        )
    ]


@pytest.mark.skipif(PYDANTIC_AI_MAJOR < 2, reason='1.x: the view becomes the history, so no point is added')
async def test_the_capability_adds_the_point_to_the_request_only() -> None:
    seen: list[list[ModelMessage]] = []
    p = profile('coding', context_window=200_000, counter=COUNTER, keep_recent=2, step=3)
    result = await _cat_agent(_scripted(seen, 'anthropic'), p, settings={'cache': True}).run('read them all')
    with_points = [_points(messages) for messages in seen]
    assert sum(1 for points in with_points if points) >= 15
    assert all(len(points) <= 1 for points in with_points)
    # Each point follows a masked result: where the next step starts.
    for messages, points in zip(seen, with_points, strict=True):
        for i in points:
            assert any(
                (getattr(p, 'metadata', None) or {}).get('pydantic_ai_context', {}).get('kind') == 'masked'
                for p in messages[i].parts
            )
    # The history, and so the next run and the store, never holds one.
    assert not _points(result.all_messages())


@pytest.mark.skipif(PYDANTIC_AI_MAJOR < 2, reason='1.x: the view becomes the history, so no point is added')
@pytest.mark.parametrize(
    ('system', 'settings', 'option'),
    [('openai', {'cache': True}, True), ('anthropic', None, True), ('anthropic', {'cache': True}, False)],
)
async def test_no_point_without_a_breakpoint_cache_or_when_turned_off(
    system: str, settings: dict[str, Any] | None, option: bool
) -> None:
    seen: list[list[ModelMessage]] = []
    p = profile('coding', context_window=200_000, counter=COUNTER, keep_recent=2, step=3, cache_points=option)
    await _cat_agent(_scripted(seen, system), p, settings=settings).run('read them all')
    assert len(seen) == 25
    assert not any(_points(messages) for messages in seen)


# --- the wire: pydantic-ai's Anthropic model maps it ---------------------------------------------


def _anthropic_model(bodies: list[dict[str, Any]], *, rounds: int) -> Any:
    """An `AnthropicModel` on an offline transport that answers with tool calls, then text, and keeps
    each request body."""
    anthropic = pytest.importorskip('anthropic')
    # The HTTP client the SDK is built on (httpx, or its successor httpx2 in the SDK 2.x).
    base = anthropic._base_client
    httpx = getattr(base, 'httpx2', None) or base.httpx
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    def handler(request: Any) -> Any:
        bodies.append(json.loads(request.content))
        n = len(bodies)
        start = {
            'id': f'msg_{n}',
            'type': 'message',
            'role': 'assistant',
            'model': 'claude-sonnet-4-6',
            'content': [],
            'stop_reason': None,
            'stop_sequence': None,
            'usage': {'input_tokens': 100, 'output_tokens': 1},
        }
        if n < rounds:
            block = {'type': 'tool_use', 'id': f'toolu_{n}', 'name': 'cat', 'input': {}}
            delta = {'type': 'input_json_delta', 'partial_json': json.dumps({'path': f'f{n}.py'})}
            stop = 'tool_use'
        else:
            block, delta, stop = (
                {'type': 'text', 'text': ''},
                {'type': 'text_delta', 'text': 'done'},
                'end_turn',
            )
        events = [
            ('message_start', {'type': 'message_start', 'message': start}),
            ('content_block_start', {'type': 'content_block_start', 'index': 0, 'content_block': block}),
            ('content_block_delta', {'type': 'content_block_delta', 'index': 0, 'delta': delta}),
            ('content_block_stop', {'type': 'content_block_stop', 'index': 0}),
            (
                'message_delta',
                {
                    'type': 'message_delta',
                    'delta': {'stop_reason': stop, 'stop_sequence': None},
                    'usage': {'output_tokens': 10},
                },
            ),
            ('message_stop', {'type': 'message_stop'}),
        ]
        sse = ''.join(f'event: {e}\ndata: {json.dumps(d)}\n\n' for e, d in events)
        return httpx.Response(200, content=sse.encode(), headers={'content-type': 'text/event-stream'})

    client = anthropic.AsyncAnthropic(
        api_key='offline',
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
        max_retries=0,
    )
    return AnthropicModel('claude-sonnet-4-6', provider=AnthropicProvider(anthropic_client=client))


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message['content']
    return [{'type': 'text', 'text': content}] if isinstance(content, str) else content


def _without_marks(messages: list[dict[str, Any]]) -> list[str]:
    return [
        json.dumps([{k: v for k, v in b.items() if k != 'cache_control'} for b in _blocks(m)])
        for m in messages
    ]


@pytest.mark.skipif(PYDANTIC_AI_MAJOR < 2, reason='1.x: the view becomes the history, so no point is added')
async def test_on_anthropic_every_compaction_step_reads_an_entry_an_earlier_request_wrote() -> None:
    """Through pydantic-ai's own Anthropic mapping (offline): the point lands as `cache_control` on a
    tool result, and every request whose messages changed reads the longest prefix it shares with an
    earlier request through one of its breakpoints (the 20-block lookback)."""
    from pydantic_ai.capabilities import Caching

    bodies: list[dict[str, Any]] = []
    # Steps of 12 results: 24 messages, out of the end breakpoint's reach.
    p = profile('coding', context_window=200_000, counter=COUNTER, keep_recent=2, step=12)
    agent = Agent(_anthropic_model(bodies, rounds=80), capabilities=[p, Caching()])

    @agent.tool_plain
    def cat(path: str) -> str:
        return f'contents of {path}\n' + 'line\n' * 300

    await agent.run('read them all', usage_limits=UsageLimits(request_limit=None))
    written: set[tuple[str, ...]] = set()
    steps = reads = 0
    previous: list[str] | None = None
    for body in bodies:
        sent = _without_marks(body['messages'])
        marks = [i for i, m in enumerate(body['messages']) for b in _blocks(m) if 'cache_control' in b]
        # The end is marked at the top level (automatic caching) or on its last block; the point
        # marks one message before it.
        assert len([i for i in marks if i != len(sent) - 1]) <= 1
        assert all(
            b['type'] == 'tool_result'
            for i in marks
            for b in _blocks(body['messages'][i])
            if 'cache_control' in b
        )
        ends = [len(sent), *(i + 1 for i in marks)]
        if previous is not None and sent[: len(previous)] != previous:
            steps += 1
            common = next(k for k in range(len(previous) + 1) if k == len(previous) or sent[k] != previous[k])
            shared = max(k for k in range(len(sent) + 1) if tuple(sent[:k]) in written)
            if steps > 1:  # before the first step no message stands for compacted content
                # All it shares with the previous request but the call whose result is now masked.
                assert common - shared <= 1, (common, shared)
                # One block per message here (a call, or one result): the lookback is 20 messages.
                assert any(0 <= end - shared <= 20 for end in ends), 'no breakpoint reaches the entry'
                reads += len(sent) - shared > 20  # read through the point, not the end
        written.update(tuple(sent[:end]) for end in ends)
        previous = sent
    assert steps >= 5
    assert reads >= 4


# --- the replay models it ------------------------------------------------------------------------


async def test_replay_counts_the_point_on_a_provider_with_explicit_breakpoints() -> None:
    log = load_history(data.TRAJECTORY_DIR / 'oh_sdk_sonnet4_sympy_matrixsymbol_difference.json')
    counter = TiktokenCounter()
    results = {}
    for option in (True, False):
        p = profile('coding', context_window=32_000, counter=counter, cache_points=option)
        results[option] = await replay(log, p, context_window=32_000, counter=counter)
    with_point, without = results[True], results[False]
    # The views are the same; only what a breakpoint cache reads differs.
    assert [r.view_tokens for r in with_point.records] == [r.view_tokens for r in without.records]
    assert with_point.cost == without.cost
    assert with_point.breakpoint_cost < 0.6 * without.breakpoint_cost
    # Never more than the longest common prefix with the previous request, save older entries.
    assert with_point.breakpoint_cost <= 1.1 * with_point.cost


# --- on any history ---------------------------------------------------------------------------


@pytest.mark.parametrize('name', ['coding', 'chat', 'long_horizon'])
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    logs=st.lists(histories(max_runs=3, max_steps=8), min_size=1, max_size=3),
    window=st.sampled_from([4_000, 16_000, 128_000]),
)
async def test_the_request_sent_is_the_view_and_at_most_one_point_on_any_history(
    name: str, logs: list[list[ModelMessage]], window: int
) -> None:
    """Each log's growing prefixes compiled in turn, as a run's requests: the request the point is
    added to is the view with one user-prompt part holding only a `CachePoint`, in a request before
    the last message; it counts no tokens and the view is still valid."""
    p = profile(name, context_window=window, counter=COUNTER, reserved_output=400, summary_model=None)
    plan = CachePointPlan(conversations=2)
    for n, log in enumerate(logs):
        ends = [i + 1 for i, m in enumerate(log) if isinstance(m, ModelRequest)]
        for end in ends[-6:]:
            try:
                view = await p.compile(log[:end])
            except ContextBudgetExceeded:
                continue
            sent = add_cache_point(
                plan, view, model=_System('anthropic'), settings={'cache': True}, conversation=n
            )
            assert_valid(sent)
            assert len(sent) == len(view)
            changed = [i for i, (a, b) in enumerate(zip(view, sent, strict=True)) if a is not b]
            assert len(changed) <= 1
            for i in changed:
                assert i < len(view) - 1
                before, after = view[i], sent[i]
                assert isinstance(before, ModelRequest)
                assert isinstance(after, ModelRequest)
                assert after.parts[:-1] == before.parts
                assert after.parts[-1].content == [CachePoint()]  # type: ignore[union-attr]
            assert COUNTER.count_messages(sent) == COUNTER.count_messages(view)
            # Never where automatic prefix caching would send it as an empty user message.
            assert (
                add_cache_point(plan, view, model=_System('openai'), settings={'cache': True}, conversation=n)
                == view
            )


def test_the_setting_is_a_common_one_read_from_the_environment_and_kept_by_replace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    off = profile('coding', cache_points=False)
    assert off.cache_points is False
    assert off.replace(context_window=8_000).cache_points is False
    assert profile('chat').cache_points is True
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_CACHE_POINTS', 'false')
    assert profile('long_horizon').cache_points is False
    assert profile('long_horizon', cache_points=True).cache_points is True  # the keyword wins
