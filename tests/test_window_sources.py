"""Context windows from the best source (profile, genai-prices, the bundled table), input caps,
and the warning for a model left on the default."""

from __future__ import annotations

import importlib.util
import socket
import sys
import uuid
import warnings
from pathlib import Path
from typing import Any

import pydantic_ai
import pytest
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from pydantic_ai_context import ContextBudget, ContextWarning, profile, resolve_input_limit
from pydantic_ai_context import _window_table as window_table
from pydantic_ai_context.budget import DEFAULT_CONTEXT_WINDOW, resolve_context_window

ROOT = Path(__file__).resolve().parents[1]
_VERSION = tuple(int(p) for p in pydantic_ai.__version__.split('.')[:2])


def _bench_windows() -> Any:
    spec = importlib.util.spec_from_file_location('bench_windows', ROOT / 'bench/windows.py')
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules['bench_windows'] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(
    _VERSION < (2, 0), reason="1.x's names include retired models no source lists (38 of 501 on 1.107)"
)
def test_at_most_five_percent_of_known_model_names_fall_back_to_the_default() -> None:
    bench = _bench_windows()
    names = bench.known_model_names()
    sources, defaults, _ = bench.window_sources(names)
    assert len(names) >= 250
    assert sum(sources.values()) == len(names)
    assert len(defaults) <= 0.05 * len(names), defaults
    assert sources['window-table'] > 0
    assert sources['genai-prices'] > 0


@pytest.mark.parametrize(
    ('model', 'tokens'),
    [
        ('mistral:mistral-large-latest', 262_144),
        ('cohere:command-r-plus-08-2024', 128_000),
        ('google:gemini-3.1-pro-preview', 1_048_576),
        ('bedrock:deepseek.v3.2', 164_000),
    ],
)
def test_the_bundled_table_answers_what_genai_prices_does_not_know(model: str, tokens: int) -> None:
    assert resolve_context_window(model) == (tokens, 'window-table')


def test_genai_prices_comes_before_the_table() -> None:
    # The table knows gpt-4o too; genai-prices is asked first.
    assert window_table.table_window('gpt-4o', 'openai') is not None
    assert resolve_context_window('openai:gpt-4o').source == 'genai-prices'


def test_a_model_object_resolves_through_the_table_by_its_system_and_name() -> None:
    model = FunctionModel(lambda m, i: None, model_name='mistral-large-latest')  # type: ignore[arg-type,return-value]
    model._system = 'mistral'  # what a MistralModel reports
    assert resolve_context_window(model) == (262_144, 'window-table')


def test_the_table_is_read_from_the_package_never_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError('network access')

    monkeypatch.setattr(socket, 'create_connection', no_network)
    monkeypatch.setattr(socket.socket, 'connect', no_network)
    window_table._windows.cache_clear()
    assert window_table.table_window('mistral-large-latest', 'mistral') is not None
    source = (ROOT / 'src/pydantic_ai_context/_window_table.py').read_text()
    assert 'http' not in source.replace('https://', '')  # no client imported
    assert (ROOT / 'src/pydantic_ai_context/_window_table.NOTICE').read_text().count('MIT License') == 3


# --- input caps --------------------------------------------------------------------------------


def test_an_input_cap_below_the_window_bounds_the_limit() -> None:
    budget = ContextBudget.for_model('openai:gpt-5')
    assert (budget.context_window, budget.input_limit) == (400_000, 272_000)
    assert budget.input_tokens == 272_000  # not 400,000 - 4,096
    assert budget.limit == 272_000 - budget.safety_tokens
    assert 'input capped at 272,000' in budget.describe()


def test_a_profile_budget_keeps_the_input_cap_unless_the_window_is_explicit() -> None:
    assert profile('transparent').budget_for('openai:gpt-5').input_limit == 272_000
    explicit = profile('transparent', context_window=400_000).budget_for('openai:gpt-5')
    assert explicit.input_limit is None
    assert explicit.limit == 400_000 - 4_096 - 8_000


def test_a_cap_that_does_not_bind_changes_nothing() -> None:
    free = ContextBudget(context_window=100_000, reserved_output=4_000)
    capped = ContextBudget(context_window=100_000, reserved_output=4_000, input_limit=99_000)
    assert capped.limit == free.limit
    assert capped.describe() == free.describe()


def test_models_without_a_separate_cap() -> None:
    assert resolve_input_limit('anthropic:claude-sonnet-4-6') is None
    assert resolve_input_limit('my-local-model') is None
    assert resolve_input_limit(None) is None


def test_an_invalid_input_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match='input_limit'):
        ContextBudget(context_window=10_000, input_limit=0)
    with pytest.raises(ValueError, match=r'input capped at 100'):
        ContextBudget(context_window=10_000, input_limit=100)


# --- the default's warning ---------------------------------------------------------------------


def _resolved(model: Any) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        resolve_context_window(model)
    return [w for w in caught if issubclass(w.category, ContextWarning)]


def test_a_model_on_the_default_is_warned_about_once_per_name() -> None:
    name = f'ollama:local-{uuid.uuid4().hex[:8]}'
    first = _resolved(name)
    assert len(first) == 1
    text = str(first[0].message)
    assert repr(name) in text
    assert '32,000' in text
    assert 'context_window=' in text
    assert 'PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW' in text
    assert _resolved(name) == []  # once per name
    assert len(_resolved(f'ollama:other-{uuid.uuid4().hex[:8]}')) == 1  # another name is warned about


def test_the_warning_points_at_the_caller() -> None:
    name = f'local-{uuid.uuid4().hex[:8]}'
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        ContextBudget.for_model(name)
    assert [Path(w.filename).name for w in caught if w.category is ContextWarning] == ['budget.py']
    name = f'local-{uuid.uuid4().hex[:8]}'
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        resolve_context_window(name)
    assert [Path(w.filename).name for w in caught if w.category is ContextWarning] == [Path(__file__).name]


def test_known_windows_and_test_models_are_not_warned_about() -> None:
    def answer(messages: Any, info: AgentInfo) -> Any:
        raise AssertionError

    for model in ('openai:gpt-4o', 'mistral:mistral-large-latest', None, TestModel(), FunctionModel(answer)):
        assert _resolved(model) == []
    assert resolve_context_window(TestModel()) == (DEFAULT_CONTEXT_WINDOW, 'default')
