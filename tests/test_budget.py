from __future__ import annotations

import dataclasses
import socket
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from pydantic_ai_context import budget as budget_module
from pydantic_ai_context.budget import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_RESERVED_OUTPUT,
    ContextBudget,
    ContextWindow,
    resolve_context_window,
)
from pydantic_ai_context.errors import ContextBudgetExceeded


def echo(messages: list[Any], info: AgentInfo) -> Any:  # pragma: no cover - never called
    raise NotImplementedError


def profile_has_context_window() -> bool:
    try:
        return 'context_window' in TestModel(profile={'context_window': 1}).profile
    except Exception:  # 1.x profiles are dataclasses that reject a dict
        return False


# --- arithmetic ---------------------------------------------------------------------------------


def test_limit_is_the_window_less_everything_reserved() -> None:
    budget = ContextBudget(
        context_window=100_000, reserved_output=4_000, reserved_system=1_500, safety_margin=0.05
    )
    assert budget.safety_tokens == 5_000
    assert budget.limit == 100_000 - 4_000 - 1_500 - 5_000 == 89_500


def test_the_safety_margin_rounds_up() -> None:
    assert ContextBudget(context_window=1_001, reserved_output=0, safety_margin=0.01).safety_tokens == 11


def test_defaults() -> None:
    budget = ContextBudget(context_window=200_000)
    assert budget.reserved_output == DEFAULT_RESERVED_OUTPUT == 4_096
    assert budget.reserved_system == 0
    assert budget.safety_tokens == 4_000  # 2% of the window
    assert budget.soft_threshold == 0.75
    assert budget.used == 0
    assert budget.window_source == 'explicit'
    assert budget.limit == 200_000 - 4_096 - 4_000


def test_remaining_headroom_and_the_soft_threshold() -> None:
    budget = ContextBudget(context_window=10_000, reserved_output=1_000, safety_margin=0, soft_threshold=0.8)
    assert budget.limit == 9_000
    assert budget.soft_limit == 7_200
    assert budget.remaining() == 9_000
    assert budget.headroom == 1.0

    at_soft = budget.with_used(7_200)
    assert not at_soft.over_soft_threshold()
    assert budget.with_used(7_201).over_soft_threshold()

    over = budget.with_used(9_900)
    assert over.remaining() == -900
    assert over.headroom == pytest.approx(-0.1)
    assert not over.fits()
    assert budget.with_used(9_000).fits()
    assert budget.fits(9_001) is False


def test_the_soft_limit_rounds_down() -> None:
    budget = ContextBudget(context_window=1_000, reserved_output=1, safety_margin=0, soft_threshold=0.5)
    assert budget.limit == 999
    assert budget.soft_limit == 499
    assert budget.with_used(500).over_soft_threshold()


def test_min_headroom_also_triggers_compaction() -> None:
    budget = ContextBudget(context_window=10_000, reserved_output=0, safety_margin=0, min_headroom=3_000)
    assert not budget.with_used(5_000).needs_compaction()
    assert budget.with_used(7_001).needs_compaction()  # below the soft limit (7,500) but 2,999 left
    assert not budget.with_used(7_001).over_soft_threshold()
    assert (
        ContextBudget(context_window=10_000, reserved_output=0, safety_margin=0)
        .with_used(7_501)
        .needs_compaction()
    )


def test_check_raises_with_the_numbers() -> None:
    budget = ContextBudget(context_window=10_000, reserved_output=1_000, safety_margin=0)
    budget.with_used(9_000).check()
    with pytest.raises(ContextBudgetExceeded) as raised:
        budget.with_used(9_500).check(detail='one message is too big', policy='fit_to_budget')
    assert (raised.value.used, raised.value.limit, raised.value.over_by) == (9_500, 9_000, 500)
    assert raised.value.policy == 'fit_to_budget'
    assert 'one message is too big' in str(raised.value)


def test_a_budget_is_a_value() -> None:
    budget = ContextBudget(context_window=10_000)
    used = budget.with_used(123)
    assert used.used == 123
    assert budget.used == 0
    assert used == dataclasses.replace(budget, used=123)
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget.used = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        ContextBudget(10_000)  # type: ignore[misc]


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('kwargs', 'error', 'message'),
    [
        ({'context_window': 0}, ValueError, 'context_window must be >= 1'),
        ({'context_window': -5}, ValueError, 'context_window'),
        ({'context_window': 1.5e5}, TypeError, 'context_window must be an int'),
        ({'context_window': True}, TypeError, 'context_window must be an int'),
        ({'context_window': 10_000, 'reserved_output': -1}, ValueError, 'reserved_output must be >= 0'),
        ({'context_window': 10_000, 'reserved_system': -1}, ValueError, 'reserved_system must be >= 0'),
        ({'context_window': 10_000, 'used': -1}, ValueError, 'used must be >= 0'),
        ({'context_window': 10_000, 'min_headroom': -1}, ValueError, 'min_headroom must be >= 0'),
        ({'context_window': 10_000, 'soft_threshold': 0}, ValueError, r'soft_threshold must be in \(0, 1\]'),
        ({'context_window': 10_000, 'soft_threshold': 1.2}, ValueError, 'soft_threshold'),
        ({'context_window': 10_000, 'safety_margin': 1.0}, ValueError, r'safety_margin must be in \[0, 1\)'),
        ({'context_window': 10_000, 'safety_margin': -0.1}, ValueError, 'safety_margin'),
        ({'context_window': 10_000, 'window_source': 'guess'}, ValueError, 'window_source'),
        ({'context_window': 4_000}, ValueError, 'leaves no room for messages'),
        (
            {'context_window': 10_000, 'reserved_output': 5_000, 'reserved_system': 4_800},
            ValueError,
            'leaves no room',
        ),
    ],
)
def test_invalid_budgets_are_rejected(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        ContextBudget(**kwargs)


def test_the_smallest_valid_budget() -> None:
    budget = ContextBudget(context_window=2, reserved_output=1, safety_margin=0, soft_threshold=1)
    assert budget.limit == 1
    assert budget.soft_limit == 1


# --- resolving the window -----------------------------------------------------------------------


def test_explicit_wins() -> None:
    assert resolve_context_window('openai:gpt-4o', explicit=50_000) == (50_000, 'explicit')
    assert resolve_context_window(None, explicit=50_000) == ContextWindow(50_000, 'explicit')
    with pytest.raises(ValueError, match='explicit'):
        resolve_context_window('openai:gpt-4o', explicit=0)


@pytest.mark.parametrize('model', ['openai:gpt-4o', 'gpt-4o', 'gateway/openai:gpt-4o'])
def test_a_model_name_resolves_through_genai_prices(model: str) -> None:
    assert resolve_context_window(model) == (128_000, 'genai-prices')


def test_a_model_object_resolves_through_genai_prices_by_its_name() -> None:
    window = resolve_context_window(FunctionModel(echo, model_name='gpt-4o'))
    assert window == (128_000, 'genai-prices')


def test_a_model_profile_is_preferred_to_genai_prices() -> None:
    fake = SimpleNamespace(
        model_name='gpt-4o', system='openai', profile=SimpleNamespace(context_window=64_000)
    )
    assert resolve_context_window(fake) == (64_000, 'model-profile')  # type: ignore[arg-type]
    as_dict = SimpleNamespace(model_name='gpt-4o', system='openai', profile={'context_window': 96_000})
    assert resolve_context_window(as_dict) == (96_000, 'model-profile')  # type: ignore[arg-type]


@pytest.mark.skipif(
    not profile_has_context_window(), reason='pydantic-ai 1.x profiles have no context_window'
)
def test_a_pydantic_ai_profile_context_window_is_used() -> None:
    assert resolve_context_window(TestModel(profile={'context_window': 1_000})) == (1_000, 'model-profile')


def test_a_profile_that_cannot_resolve_is_skipped() -> None:
    class Broken:
        model_name = 'gpt-4o'
        system = 'openai'

        @property
        def profile(self) -> Any:
            raise ImportError('provider SDK missing')

    assert resolve_context_window(Broken()) == (128_000, 'genai-prices')  # type: ignore[arg-type]


@pytest.mark.parametrize('model', [None, 'my-local-model', 'ollama:my-local-model', TestModel()])
def test_an_unknown_model_gets_the_conservative_default(model: Any) -> None:
    assert resolve_context_window(model) == (DEFAULT_CONTEXT_WINDOW, 'default')
    assert DEFAULT_CONTEXT_WINDOW == 32_000


def test_resolving_never_touches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError('network access')

    monkeypatch.setattr(socket, 'create_connection', no_network)
    monkeypatch.setattr(socket.socket, 'connect', no_network)
    budget_module._genai_prices_context_window.cache_clear()
    assert resolve_context_window('anthropic:claude-sonnet-4-0').source == 'genai-prices'
    assert resolve_context_window('openai:gpt-5').tokens == 400_000


def test_lookups_are_memoised() -> None:
    budget_module._genai_prices_context_window.cache_clear()
    resolve_context_window('openai:gpt-4o')
    resolve_context_window('openai:gpt-4o')
    info = budget_module._genai_prices_context_window.cache_info()
    assert (info.hits, info.misses) == (1, 1)


# --- for_model ----------------------------------------------------------------------------------


def test_for_model_resolves_the_window() -> None:
    budget = ContextBudget.for_model('openai:gpt-4o', reserved_system=2_000, used=10)
    assert budget.context_window == 128_000
    assert budget.window_source == 'genai-prices'
    assert budget.reserved_output == DEFAULT_RESERVED_OUTPUT
    assert (budget.reserved_system, budget.used) == (2_000, 10)


def test_for_model_with_an_explicit_window() -> None:
    budget = ContextBudget.for_model(TestModel(), context_window=50_000, soft_threshold=0.5, safety_margin=0)
    assert (budget.context_window, budget.window_source) == (50_000, 'explicit')
    assert budget.soft_limit == (50_000 - DEFAULT_RESERVED_OUTPUT) // 2


def test_for_model_shrinks_the_default_output_reserve_for_small_windows() -> None:
    assert ContextBudget.for_model(None, context_window=8_000).reserved_output == 2_000
    assert ContextBudget.for_model(None, context_window=8_000, reserved_output=500).reserved_output == 500
    assert ContextBudget.for_model(None).window_source == 'default'
