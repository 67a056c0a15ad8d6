from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from pydantic_ai_context import CompileContext, ContextBudget, HeuristicCounter, normalize
from pydantic_ai_context.policies._frontier import (
    Frontier,
    compaction_frontier,
    frontier_from,
    observation_indices,
    unresolved_failures,
)
from pydantic_ai_context.policies.mask import mask_observations
from pydantic_ai_context.policies.trim import trim_tool_outputs

from ._examples import examples
from .builders import History, Tool
from .strategies import any_histories, histories

PROPS = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
COUNTER = HeuristicCounter(chars_per_token=4.0)


def context(budget: ContextBudget | None = None) -> CompileContext:
    return CompileContext(counter=COUNTER, budget=budget)


def steps(n: int, *, size: int = 10) -> History:
    history = History().user('fix the bug', system='sys')
    for i in range(n):
        history.step(Tool('bash', {'command': f'cmd {i}'}, 'o' * size))
    return history


def test_count_window_moves_in_whole_steps() -> None:
    frontier = Frontier(keep_recent=3, step=4)
    located = []
    for n in range(1, 16):
        log = steps(n).build()
        located.append(frontier.locate(log, context()))
    # Observation k (1-based) is the request at index 2k; the frontier sits right after one.
    assert located == [0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 17, 17, 17, 17, 25]


def test_frontier_sits_right_after_an_observation_request() -> None:
    log = steps(12).build()
    f = Frontier(keep_recent=2, step=3).locate(log, context())
    assert isinstance(log[f - 1], ModelRequest)
    assert isinstance(log[f], ModelResponse)


def test_newest_observation_is_always_protected() -> None:
    log = steps(5).build()
    f = compaction_frontier(log, keep_recent=0, step=1)
    assert f == observation_indices(log)[-2] + 1  # the newest result and its call stay


def test_token_window_protects_recent_tool_output() -> None:
    log = steps(10, size=400).build()  # 100 tokens per observation
    # 250 tokens: the newest three observations are protected (the third crosses the limit).
    f = Frontier(keep_recent=None, keep_recent_tokens=250, step=1).locate(log, context())
    assert f == observation_indices(log)[-4] + 1
    # Both limits: the larger window wins.
    both = Frontier(keep_recent=5, keep_recent_tokens=250, step=1).locate(log, context())
    assert both == observation_indices(log)[-6] + 1


def test_token_window_reads_original_sizes_from_markers() -> None:
    log = steps(10, size=400).build()
    window = Frontier(keep_recent=None, keep_recent_tokens=250, step=1)
    view = normalize(mask_observations(frontier=window)(log))
    assert view != log
    assert window.locate(view, context()) == window.locate(log, context())


def test_budget_escalation_follows_the_budget_in_chunks_and_keeps_min_recent() -> None:
    log = steps(20, size=4_000).build()  # 1,000 tokens per observation
    frontier = Frontier(keep_recent=10, step=2, min_recent=3)
    relaxed = frontier.locate(log, context(ContextBudget(context_window=1_000_000)))
    assert relaxed == observation_indices(log)[9] + 1
    tight_budget = ContextBudget(context_window=12_000, reserved_output=0)
    tight = frontier.locate(log, context(tight_budget))
    obs = observation_indices(log)
    assert tight > relaxed
    assert tight in {i + 1 for i in obs}  # right after an observation
    assert tight <= obs[-3]  # three observations stay
    off = Frontier(keep_recent=10, step=2, escalate=False)
    assert off.locate(log, context(tight_budget)) == relaxed


def test_budget_escalation_is_counted_in_tokens_not_observations() -> None:
    """Issue 14: a few large outputs are masked as soon as they no longer fit, although far fewer
    than a whole count step (10) have left the recency window."""
    log = steps(6, size=20_000).build()  # 5,000 tokens per observation
    budget = ContextBudget(context_window=24_000, reserved_output=0)  # soft limit about 17k
    frontier = Frontier(keep_recent=2, step=10)
    located = frontier.locate(log, context(budget))
    obs = observation_indices(log)
    assert located > 0, 'whole count steps alone would mask nothing'
    kept = sum(1 for i in obs if i >= located)
    assert 1 <= kept <= 3


def test_budget_escalation_moves_in_chunks_while_the_log_grows() -> None:
    log = steps(60, size=2_000).build()  # 500 tokens per observation
    budget = ContextBudget(context_window=16_000, reserved_output=0)
    frontier = Frontier(keep_recent=2, step=10, budget_step=0.2)
    positions = [frontier.locate(log[:end], context(budget)) for end in range(3, len(log) + 1, 2)]
    assert positions == sorted(positions), 'the frontier never moves back'
    moves = sum(1 for a, b in itertools.pairwise(positions) if a != b)
    assert moves <= len(positions) // 3, 'chunks, not one observation per request'
    with pytest.raises(ValueError, match='budget_step'):
        Frontier(budget_step=0)


def test_unresolved_failures_until_a_later_success_of_the_same_tool() -> None:
    fail = Tool('pytest', {}, 'boom', failed=True)
    other = Tool('ls', {}, 'a.py')
    log = History().user('go').step(fail).step(other).build()
    if not hasattr(log[2].parts[0], 'outcome'):
        pytest.skip('pydantic-ai 1.x marks failures with RetryPromptPart only')
    assert unresolved_failures(log) == {fail.id}
    log = History(messages=list(log)).step(Tool('pytest', {}, 'passed')).build()
    assert unresolved_failures(log) == set()


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match='keep_recent'):
        Frontier(keep_recent=None)
    with pytest.raises(ValueError, match='step'):
        Frontier(step=0)
    with pytest.raises(TypeError):
        frontier_from(Frontier(), 3, None, None, default=Frontier())
    assert frontier_from(None, None, 500, None, default=Frontier()).keep_recent is None
    assert frontier_from(None, 4, None, 2, default=Frontier()) == Frontier(keep_recent=4, step=2)


def test_token_window_needs_a_counter() -> None:
    with pytest.raises(ValueError, match='counter'):
        compaction_frontier(steps(3).build(), keep_recent=None, keep_recent_tokens=10)


@PROPS
@given(histories(max_runs=2, max_steps=12), st.integers(0, 6))
def test_frontier_is_monotone_and_jumps_rarely(log: list[ModelMessage], keep: int) -> None:
    step = 3
    frontier = Frontier(keep_recent=keep, step=step)
    previous = 0
    jumps = 0
    for end in range(1, len(log) + 1):
        f = frontier.locate(log[:end], context())
        assert f >= previous
        if f != previous:
            jumps += 1
            assert isinstance(log[f - 1], ModelRequest)
            assert f < len(log[:end])
        previous = f
    assert jumps <= math.ceil(len(observation_indices(log)) / step)


@PROPS
@given(any_histories)
def test_shared_frontier_is_the_same_for_trim_and_mask_output(log: list[ModelMessage]) -> None:
    view = normalize(log)
    frontier = Frontier(keep_recent=1, step=2)
    trimmed = normalize(
        trim_tool_outputs(frontier=frontier, max_tokens=20, keep_tokens=10).apply(view, context())
    )
    masked = normalize(mask_observations(frontier=frontier).apply(trimmed, context()))
    assert frontier.locate(trimmed, context()) == frontier.locate(view, context())
    assert frontier.locate(masked, context()) == frontier.locate(view, context())


def test_budget_escalation_resumed_between_calls_equals_a_fresh_one() -> None:
    """Issue 22: the savings `_escalate` sums are kept in the tally and extended as it grows; a
    list that branches off (other output sizes after the branch) gives what a fresh tally does."""
    from pydantic_ai_context._scope import MemoScope, compiling

    short, large = steps(40, size=400).build(), steps(40, size=4_000).build()
    branch = short[:41] + large[41:]
    budget = ContextBudget(context_window=16_000, reserved_output=0)
    frontier = Frontier(keep_recent=2, step=10, budget_step=0.2)
    scope = MemoScope()
    with compiling(scope, short):
        for messages in (short[:31], short, branch, short[:61], branch, large[:41] + short[41:]):
            assert frontier.locate(messages, context(budget), slot='s') == frontier.locate(
                messages, context(budget)
            )
