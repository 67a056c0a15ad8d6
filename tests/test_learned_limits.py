"""Limits learned from provider rejections are evidence, not verdicts (issue 23, item 2).

One 413 made the profile cap the model's input at 0.8x the rejected request for good: for a small
request that cap was below the reserved output plus the instructions and tools, so every later run
failed with `ContextBudgetExceeded` ("over by -51", the cap called a "window") without calling the
model. A stated limit of 1 token stuck the same way.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, exceptions
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import ContextBudgetExceeded, ContextProfile, HeuristicCounter, profile
from pydantic_ai_context.integration._learned_limits import MIN_INPUT_CAP, LearnedLimits
from pydantic_ai_context.integration._overflow import Overflow


def rejects_first(error: Exception) -> tuple[Any, list[int]]:
    calls: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(len(messages))
        if len(calls) == 1:
            raise error
        return ModelResponse(parts=[TextPart('hello')])

    return model, calls


@pytest.mark.parametrize(
    'error',
    [
        exceptions.ModelHTTPError(413, 'm', body='Request too large'),
        exceptions.ModelHTTPError(400, 'm', body="This model's maximum context length is 1 tokens."),
    ],
    ids=['413-unstated', 'stated-1-token'],
)
def test_one_rejection_of_a_small_request_never_locks_the_profile_out(error: Exception) -> None:
    # The reproducer: all three runs failed and the model was called once.
    model, calls = rejects_first(error)
    p = profile('coding', context_window=128_000)
    agent = Agent(FunctionModel(model), capabilities=[p])
    for _ in range(3):
        assert agent.run_sync('hi').output == 'hello'
    assert len(calls) == 4  # the rejected attempt, its retry, then one request per later run
    (rejection,) = [e for e in p.events if e.policy == 'provider_rejected']
    assert rejection.reason.endswith('retrying as is: the rejection teaches no plausible limit')


def test_a_learned_cap_is_bounded_by_what_a_request_needs() -> None:
    limits = LearnedLimits()
    unstated = Overflow(limit=None, requested=None, message='ModelHTTPError (HTTP 413)')
    assert limits.learn('m', unstated, 300, fixed=100, reserved_output=4096, shrink=0.8) is None
    learned = limits.learn('m', unstated, 20_000, fixed=6_000, reserved_output=4096, shrink=0.8)
    assert learned is not None
    assert learned.cap == 16_000
    again = limits.learn('m', unstated, 7_500, fixed=6_000, reserved_output=4096, shrink=0.8)
    assert again is not None
    assert again.cap == 6_000 + 1_024  # the fixed part plus room for messages, never 0.8 x 7,500
    floored = limits.learn('n', unstated, 2_100, fixed=10, reserved_output=0, shrink=0.5)
    assert floored is not None
    assert floored.cap == MIN_INPUT_CAP  # a sane floor, never 0.5 x 2,100


@pytest.mark.parametrize('stated', [1, 50, 900, 5_000])
def test_an_implausible_stated_window_is_ignored(stated: int) -> None:
    limits = LearnedLimits()
    said = Overflow(limit=stated, requested=None, message='ModelHTTPError (HTTP 400)')
    learned = limits.learn('m', said, 200_000, fixed=4_500, reserved_output=4096, shrink=0.8)
    assert learned is not None
    assert learned.stated is None  # smaller than a request's fixed part + reserved output: not believed
    assert learned.cap == 160_000


def test_a_learned_limit_is_retested_after_n_requests_or_t_seconds() -> None:
    now = [0.0]
    limits = LearnedLimits(retest_requests=5, retest_seconds=60.0, clock=lambda: now[0])
    unstated = Overflow(limit=None, requested=None, message='ModelHTTPError (HTTP 413)')
    limits.learn('m', unstated, 50_000, fixed=1_000, reserved_output=4096, shrink=0.8)
    assert all(limits.in_force('m') is not None for _ in range(5))
    assert limits.in_force('m') is None  # the 6th request tries the known window again
    # Rejected again while re-testing: learned anew, and the next re-test waits twice as long.
    learned = limits.learn('m', unstated, 60_000, fixed=1_000, reserved_output=4096, shrink=0.8)
    assert learned is not None
    assert (learned.cap, learned.strikes) == (48_000, 2)
    now[0] = 100.0
    assert limits.in_force('m') is not None
    now[0] = 121.0
    assert limits.in_force('m') is None
    # A success above the cap lifts it.
    limits.succeeded('m', 55_000)
    assert limits.get('m') is None


async def test_a_success_above_the_cap_lifts_it_in_a_live_run() -> None:
    state = {'limit': 15_000}
    counter = HeuristicCounter()
    sent: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        total = counter.count_messages(messages)
        if total > state['limit']:
            raise exceptions.ModelHTTPError(413, 'm', body='Request too large')
        sent.append(total)
        return ModelResponse(parts=[TextPart('ok')])

    ctx_profile = profile('coding', context_window=128_000, counter=counter)
    ctx_profile._limits.retest_requests = 2
    agent = Agent(FunctionModel(model), capabilities=[ctx_profile])
    big = 'word ' * 20_000
    with pytest.raises(ContextBudgetExceeded, match='learned from a ModelHTTPError'):
        await agent.run(big)  # the task framing alone is over the hidden limit: it cannot shrink
    (learned,) = ctx_profile._limits._limits.values()
    cap = learned.cap
    assert cap is not None
    state['limit'] = 1_000_000  # the provider's limit was a bad moment
    assert (await agent.run('hi')).output == 'ok'
    assert (await agent.run('hi')).output == 'ok'
    assert (await agent.run(big)).output == 'ok'  # re-tested: the known window is tried again
    assert max(sent) > cap
    assert not ctx_profile._limits._limits, 'a success above the learned cap lifts it'


async def test_errors_name_a_learned_window_and_never_a_negative_overage() -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise exceptions.ModelHTTPError(400, 'm', body="This model's maximum context length is 6000 tokens.")

    p = ContextProfile(context_window=128_000, reserved_output=1_000, counter=HeuristicCounter())
    agent = Agent(FunctionModel(model), capabilities=[p])
    with pytest.raises(ContextBudgetExceeded) as caught:
        await agent.run('x ' * 12_000)
    text = str(caught.value)
    assert 'over by -' not in text
    assert 'learned from a ModelHTTPError (HTTP 400) rejection of a' in text
    assert 'stating a 6,000-token window' in text
    assert 'over by -' not in str(ContextBudgetExceeded(100, 200, detail='no room'))
