"""`PYDANTIC_AI_CONTEXT_*` settings: precedence (keywords > environment > preset defaults) and errors."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Literal

import pytest

from pydantic_ai_context import ContextProfile, profile, profiles
from pydantic_ai_context import settings as settings_module
from pydantic_ai_context.profiles import split_settings
from pydantic_ai_context.settings import ContextSettings, ContextSettingsError


class Opaque:
    """A setting type that cannot come from a string."""


def demo(
    *,
    keep_recent: int = 10,
    mode: Literal['keep', 'drop'] = 'keep',
    ratio: float | None = None,
    opaque: Opaque | None = None,
    **settings: Any,
) -> ContextProfile:
    common, own = split_settings(settings)
    return ContextProfile(
        name='demo',
        settings={'keep_recent': keep_recent, 'mode': mode, 'ratio': ratio, 'opaque': opaque, **own},
        **common,
    )


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith('PYDANTIC_AI_CONTEXT_'):
            monkeypatch.delenv(name)
    monkeypatch.setitem(profiles._PRESETS, 'demo', demo)


def test_defaults_without_environment() -> None:
    p = profile('demo')
    assert p.context_window is None
    assert p.reserved_output is None  # scaled to the window by ContextBudget.for_model
    assert p.settings['keep_recent'] == 10
    assert ContextSettings.load().overrides() == {}


def test_environment_beats_preset_defaults_and_keywords_beat_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW', '64000')
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_SOFT_THRESHOLD', '0.5')
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_RESERVED_SYSTEM', '1200')
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_SUMMARY_MODEL', 'openai:gpt-4o-mini')
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_KEEP_RECENT', '3')
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_MODE', 'drop')
    p = profile('demo')
    assert (p.context_window, p.soft_threshold, p.reserved_system) == (64_000, 0.5, 1_200)
    assert p.summary_model == 'openai:gpt-4o-mini'
    assert p.settings['keep_recent'] == 3  # validated and converted from the string
    assert p.settings['mode'] == 'drop'
    q = profile('demo', context_window=8_000, keep_recent=7)
    assert q.context_window == 8_000
    assert q.settings['keep_recent'] == 7
    assert q.soft_threshold == 0.5


def test_an_invalid_variable_is_not_checked_when_a_keyword_overrides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW', 'abc')
    assert profile('demo', context_window=1_000).context_window == 1_000


def test_replace_keeps_what_the_profile_was_built_with(monkeypatch: pytest.MonkeyPatch) -> None:
    p = profile('demo', keep_recent=4)
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_KEEP_RECENT', '9')
    assert p.replace(context_window=10_000).settings['keep_recent'] == 4


def test_variables_a_preset_does_not_take_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_KEEP_RECENT', '3')
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_SOMETHING_ELSE', 'x')
    assert profile('transparent').settings == {}


@pytest.mark.parametrize(
    ('variable', 'value'),
    [
        ('PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW', 'abc'),
        ('PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW', '0'),
        ('PYDANTIC_AI_CONTEXT_SOFT_THRESHOLD', '1.5'),
        ('PYDANTIC_AI_CONTEXT_RESERVED_OUTPUT', '-1'),
        ('PYDANTIC_AI_CONTEXT_KEEP_RECENT', 'many'),
        ('PYDANTIC_AI_CONTEXT_MODE', 'sometimes'),
    ],
)
def test_invalid_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ContextSettingsError, match=variable) as info:
        profile('demo')
    assert repr(value) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_setting_that_takes_an_object_cannot_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_OPAQUE', 'x')
    with pytest.raises(ContextSettingsError, match='PYDANTIC_AI_CONTEXT_OPAQUE'):
        profile('demo')
    assert isinstance(profile('demo', opaque=Opaque()).settings['opaque'], Opaque)


def test_default_profile_name_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert profile().name == 'transparent'
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_PROFILE', 'demo')
    assert profile().name == 'demo'
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_PROFILE', 'nope')
    with pytest.raises(ValueError, match='unknown profile'):
        profile()


def test_for_profile_lists_the_preset_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_RATIO', '0.25')
    settings = ContextSettings.for_profile('demo')
    assert settings.overrides() == {'ratio': 0.25}
    assert {'keep_recent', 'mode', 'ratio', 'context_window'} <= set(type(settings).model_fields)
    assert ContextSettings.variable('keep_recent') == 'PYDANTIC_AI_CONTEXT_KEEP_RECENT'
    with pytest.raises(ValueError, match='unknown profile'):
        ContextSettings.for_profile('nope')


# --- checked when the profile is built ---------------------------------------------------------


@pytest.mark.parametrize(
    ('settings', 'named'),
    [
        ({'context_window': -5}, 'context_window=-5'),
        ({'context_window': '32k'}, "context_window='32k'"),
        ({'context_window': '32000'}, "context_window='32000'"),  # a keyword takes the int itself
        ({'soft_threshold': 1.5}, 'soft_threshold=1.5'),
        ({'reserved_output': -1}, 'reserved_output=-1'),
        ({'keep_recent': -3}, 'keep_recent=-3'),
        ({'step': 0}, 'step=0'),
        ({'trim_threshold': 0}, 'trim_threshold=0'),
        ({'isolate_mode': 'sometimes'}, "isolate_mode='sometimes'"),
        ({'summary_threshold': 2.0}, 'summary_threshold=2.0'),
    ],
)
def test_invalid_keywords_are_rejected_when_the_profile_is_built(
    settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ContextSettingsError) as info:
        profile('long_horizon', **settings)
    assert named in str(info.value)
    assert "profile 'long_horizon'" in str(info.value)


@pytest.mark.parametrize(
    ('variable', 'value'),
    [
        ('PYDANTIC_AI_CONTEXT_KEEP_RECENT', '-3'),
        ('PYDANTIC_AI_CONTEXT_STEP', '0'),
        ('PYDANTIC_AI_CONTEXT_TRIM_THRESHOLD', '-1'),
        ('PYDANTIC_AI_CONTEXT_SUMMARY_THRESHOLD', '0'),
    ],
)
def test_a_preset_setting_from_the_environment_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ContextSettingsError, match=f"{variable}='{value}'"):
        profile('long_horizon')


def test_a_window_too_small_for_what_it_reserves_names_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW', '1000')
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_RESERVED_OUTPUT', '5000')
    with pytest.raises(ContextSettingsError, match='leaves no room') as info:
        profile('coding')
    assert "PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW='1000'" in str(info.value)
    assert "PYDANTIC_AI_CONTEXT_RESERVED_OUTPUT='5000'" in str(info.value)
    # The same values as keywords: the same check, and no variable to name.
    with pytest.raises(ContextSettingsError, match='leaves no room') as keywords:
        profile('coding', context_window=1_000, reserved_output=5_000)
    assert 'PYDANTIC_AI_CONTEXT' not in str(keywords.value)


def test_an_unknown_preset_from_the_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_PROFILE', 'nope')
    with pytest.raises(ContextSettingsError, match=r"PYDANTIC_AI_CONTEXT_PROFILE='nope'.*unknown profile"):
        profile()


def test_a_profile_built_directly_is_checked_too() -> None:
    with pytest.raises(ContextSettingsError, match='context_window=-5'):
        ContextProfile(context_window=-5)
    with pytest.raises(ContextSettingsError, match='soft_threshold=0'):
        ContextProfile(soft_threshold=0)
    with pytest.raises(ContextSettingsError, match='leaves no room'):
        ContextProfile(context_window=100, reserved_output=200)
    assert ContextProfile(context_window=8_000, reserved_output=1_000).context_window == 8_000


def test_settings_do_not_import_profiles() -> None:
    # Dependencies run one way: profiles read settings, never the reverse (not even lazily).
    source = Path(settings_module.__file__).read_text(encoding='utf-8')
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module or '')
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not {name for name in imported if 'profiles' in name or 'presets' in name}


# --- collections, objects and flags --------------------------------------------------------------


@pytest.mark.parametrize('preset', ['coding', 'long_horizon'])
def test_exclude_tools_is_a_collection_of_names_never_a_string(preset: str) -> None:
    # A string is iterable: it used to exclude the tools named 't', 'h', 'i', 'n' and 'k'.
    with pytest.raises(ContextSettingsError, match="exclude_tools='think'"):
        profile(preset, exclude_tools='think')
    for names in (['think'], ('think',), {'think'}, frozenset({'think'})):
        mask = next(s for s in profile(preset, exclude_tools=names).steps if s.name == 'mask_observations')
        assert mask.exclude_tools == frozenset({'think'})


def test_mask_observations_rejects_a_string_of_tool_names() -> None:
    from pydantic_ai_context import mask_observations

    with pytest.raises(TypeError, match=r"exclude_tools=\['think'\]"):
        mask_observations(exclude_tools='think')


def test_exclude_tools_from_the_environment_is_a_json_list_and_survives_replace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_EXCLUDE_TOOLS', '["think", "plan"]')
    built = profile('coding')
    rebuilt = built.replace(keep_recent=3)  # rebuilt from the recorded settings
    for p in (built, rebuilt):
        mask = next(s for s in p.steps if s.name == 'mask_observations')
        assert mask.exclude_tools == frozenset({'think', 'plan'})
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_EXCLUDE_TOOLS', 'think')
    with pytest.raises(ContextSettingsError, match="PYDANTIC_AI_CONTEXT_EXCLUDE_TOOLS='think'"):
        profile('coding')


def test_readback_is_a_flag_from_keywords_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ContextSettingsError, match="readback='no'"):
        profile('coding', readback='no')  # a truthy string used to turn read-back on
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_READBACK', 'false')
    assert profile('coding').readback is False
    assert profile('coding', readback=True).readback is True


def test_a_counter_that_is_not_a_token_counter_is_rejected_when_the_profile_is_built() -> None:
    with pytest.raises(ContextSettingsError, match="counter='tiktoken'"):
        profile('coding', counter='tiktoken')


@pytest.mark.parametrize('handlers', [3, 'print'])
def test_an_event_handler_that_is_not_callable_is_named(handlers: Any) -> None:
    with pytest.raises(TypeError, match='an event handler must be callable'):
        profile('coding', on_event=handlers)
