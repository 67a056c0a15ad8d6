"""Settings from the environment: `PYDANTIC_AI_CONTEXT_*` variables, read by `profile()`.

This module knows the settings and their constraints; `profiles` reads them (never the reverse).

Precedence, inside `profile(name, **overrides)`: keyword arguments, then environment variables,
then the preset's defaults. The common settings have fixed variables
(`PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW`, `..._RESERVED_OUTPUT`, `..._RESERVED_SYSTEM`,
`..._SOFT_THRESHOLD`, `..._MAX_OVERFLOW_RETRIES`, `..._OVERFLOW_SHRINK`, `..._SUMMARY_MODEL`,
`..._READBACK`, and
`..._PROFILE` for the default preset name). A
preset's own keyword settings come from the variable named after the keyword
(`keep_recent` -> `PYDANTIC_AI_CONTEXT_KEEP_RECENT`), validated against the annotation of the
preset factory's parameter. Variables a preset does not take are ignored, so one environment can
serve several presets.

The same constraints check keyword arguments when the profile is built (`check_keywords`), and
every error names where the bad value came from: the keyword, or the environment variable.
"""

from __future__ import annotations

import functools
import inspect
import os
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Annotated, Any, Final

import pydantic
from pydantic import Field, NonNegativeInt, PositiveInt, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from . import _registry
from .errors import ContextSettingsError

__all__ = (
    'ENV_PREFIX',
    'ContextSettings',
    'ContextSettingsError',
    'check_keywords',
    'environment_overrides',
    'environment_sources',
)

ENV_PREFIX: Final = 'PYDANTIC_AI_CONTEXT_'
"""Prefix of every environment variable this package reads."""

DEFAULT_PROFILE: Final = 'transparent'
"""The preset `profile()` builds when no name is given and `PYDANTIC_AI_CONTEXT_PROFILE` is unset."""

# Settings read here that are not `profile()` keyword arguments.
_NOT_PROFILE_SETTINGS: Final = frozenset({'profile', 'store_url'})
# Settings that are objects (a counter, callbacks) cannot come from a string.
_NOT_FROM_ENV: Final = frozenset({'counter', 'on_event', 'on_compaction', 'on_usage'})
# Settings whose keyword takes more than the environment's string form (a model object, not just a name).
_KEYWORD_UNCHECKED: Final = frozenset({'summary_model'})
# Preset settings whose type cannot be parsed from a string, per generated settings class.
_UNSUPPORTED: dict[type[Any], tuple[str, ...]] = {}


class ContextSettings(BaseSettings):
    """The common profile settings, read from `PYDANTIC_AI_CONTEXT_*` environment variables.

    Unset variables stay `None` and leave the preset's default alone. `for_profile(name)` adds the
    preset's own settings; `overrides()` gives what `profile()` applies.

    Example:
        ```python
        import os

        from pydantic_ai_context import profile
        from pydantic_ai_context.settings import ContextSettings

        os.environ['PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW'] = '64000'
        try:
            assert ContextSettings().overrides() == {'context_window': 64_000}
            assert profile('transparent').context_window == 64_000  # the environment
            assert profile('transparent', context_window=8_000).context_window == 8_000  # keyword wins
        finally:
            del os.environ['PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW']
        ```
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra='ignore', frozen=True)

    profile: str | None = None
    """`PYDANTIC_AI_CONTEXT_PROFILE`: the preset `profile()` builds when called without a name."""
    context_window: PositiveInt | None = None
    """`PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW`: tokens the model accepts."""
    reserved_output: NonNegativeInt | None = None
    """`PYDANTIC_AI_CONTEXT_RESERVED_OUTPUT`: tokens kept free for the answer."""
    reserved_system: NonNegativeInt | None = None
    """`PYDANTIC_AI_CONTEXT_RESERVED_SYSTEM`: tokens of instructions and tool schemas."""
    soft_threshold: Annotated[float, Field(gt=0, le=1)] | None = None
    """`PYDANTIC_AI_CONTEXT_SOFT_THRESHOLD`: share of the budget at which compaction starts, in (0, 1]."""
    max_overflow_retries: NonNegativeInt | None = None
    """`PYDANTIC_AI_CONTEXT_MAX_OVERFLOW_RETRIES`: tighter retries of a request the provider rejects as too long."""
    overflow_shrink: Annotated[float, Field(gt=0, lt=1)] | None = None
    """`PYDANTIC_AI_CONTEXT_OVERFLOW_SHRINK`: share of a rejected input a retry may send, in (0, 1)."""
    summary_model: str | None = None
    """`PYDANTIC_AI_CONTEXT_SUMMARY_MODEL`: model name for summarising policies (e.g. `openai:gpt-4o-mini`)."""
    readback: bool | None = None
    """`PYDANTIC_AI_CONTEXT_READBACK`: contribute the `read_context` / `search_context` tools (`false` turns them off)."""
    cache_points: bool | None = None
    """`PYDANTIC_AI_CONTEXT_CACHE_POINTS`: add the fourth cache breakpoint on Anthropic and Bedrock (`false`: off)."""
    store_url: Annotated[SecretStr | None, Field(repr=False)] = None
    """`PYDANTIC_AI_CONTEXT_STORE_URL`: the store `open_store()` opens without a URL (`sqlite:///…`,
    `postgresql://…`, `memory://`); not a profile setting. A `SecretStr`, since it may hold a
    password: `repr`, `model_dump()` and `model_dump_json()` mask it; `store_url.get_secret_value()`
    reads it."""

    @classmethod
    def load(cls, *, skip: Collection[str] = ()) -> ContextSettings:
        """Read the environment, raising `ContextSettingsError` that names an invalid variable.

        Settings in `skip` (given as keyword arguments, which win) are neither read nor checked.
        """
        for name in _UNSUPPORTED.get(cls, ()):
            variable = _find_variable(name, os.environ)
            if variable is not None and name not in skip:
                raise ContextSettingsError(
                    f'environment variable {variable} is set, but setting {name!r} cannot be read '
                    'from the environment (it takes an object); pass it as a keyword argument'
                )
        # Init values take priority over the environment in pydantic-settings, so `None` hides a variable.
        hidden = {name: None for name in skip if name in cls.model_fields}
        try:
            return cls(**hidden)
        except pydantic.ValidationError as exc:
            raise _settings_error(exc) from None

    @classmethod
    def for_profile(cls, name: str) -> ContextSettings:
        """The settings of preset `name`: the common ones plus its own keyword settings.

        Raises `ValueError` for an unknown preset and `ContextSettingsError` for an invalid variable.
        """
        return preset_settings_class(_registry.factory(name)).load()

    def overrides(self) -> dict[str, Any]:
        """The settings the environment sets (not `None`), as `profile()` keyword arguments."""
        return {k: v for k, v in self if v is not None and k not in _NOT_PROFILE_SETTINGS}

    @staticmethod
    def variable(setting: str) -> str:
        """The environment variable of a setting: `variable('keep_recent') == 'PYDANTIC_AI_CONTEXT_KEEP_RECENT'`."""
        return f'{ENV_PREFIX}{setting.upper()}'


def environment_overrides(factory: Callable[..., Any], *, skip: Collection[str] = ()) -> dict[str, Any]:
    """What the environment sets for a preset built by `factory` (common and own settings), but `skip`."""
    return preset_settings_class(factory).load(skip=skip).overrides()


def default_profile_name(default: str = DEFAULT_PROFILE) -> str:
    """`PYDANTIC_AI_CONTEXT_PROFILE`, else `default`; `ContextSettingsError` if the variable names no preset."""
    name = ContextSettings.load().profile
    if name is None:
        return default
    if name not in _registry.PRESETS:
        variable = _find_variable('profile', os.environ) or ContextSettings.variable('profile')
        raise ContextSettingsError(
            f'invalid environment variable {variable}={name!r}: unknown profile; '
            f'known profiles: {", ".join(_registry.names())}'
        )
    return name


def environment_sources(settings: Mapping[str, Any]) -> dict[str, str]:
    """For settings that came from the environment: the variable and its raw value, as `VAR='value'`."""
    sources: dict[str, str] = {}
    for name in settings:
        variable = _find_variable(name, os.environ)
        if variable is not None:
            sources[name] = f'{variable}={os.environ[variable]!r}'
    return sources


def check_keywords(factory: Callable[..., Any], values: Mapping[str, Any], *, preset: str) -> None:
    """Check keyword settings for preset `factory` against the constraints their variables have.

    Strict: `context_window='32k'` or `'32000'` is an error (a keyword takes the type itself), and so
    is `context_window=-5`. Raises `ContextSettingsError` naming the keyword and the problem.
    Settings that take objects (a counter, callbacks, a summary cache, a model) are not checked here.
    """
    cls = preset_settings_class(factory)
    problems = []
    for name, value in values.items():
        if value is None or name not in cls.model_fields or name in _KEYWORD_UNCHECKED:
            continue
        try:
            _field_adapter(cls, name).validate_python(value, strict=True)
        except pydantic.ValidationError as exc:
            problems.append(f'{name}={value!r}: {exc.errors()[0].get("msg", "invalid value")}')
    if problems:
        raise ContextSettingsError(f'profile {preset!r}: invalid setting ' + '; '.join(problems))


@functools.cache
def _field_adapter(cls: type[ContextSettings], name: str) -> pydantic.TypeAdapter[Any]:
    info = cls.model_fields[name]
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[(annotation, *info.metadata)]  # type: ignore[valid-type]
    return pydantic.TypeAdapter(annotation)


@functools.cache
def preset_settings_class(factory: Callable[..., Any]) -> type[ContextSettings]:
    """A `ContextSettings` subclass with a field per keyword-only setting of `factory`."""
    fields: dict[str, Any] = {}
    unsupported: list[str] = []
    hints = _type_hints(factory)
    for param in inspect.signature(factory).parameters.values():
        name = param.name
        if param.kind is not param.KEYWORD_ONLY or name in ContextSettings.model_fields:
            continue
        if name in _NOT_FROM_ENV:
            continue
        annotation = hints.get(name, Any)
        try:
            pydantic.TypeAdapter(annotation)
        except (pydantic.PydanticSchemaGenerationError, TypeError, NameError):
            unsupported.append(name)
            continue
        fields[name] = (annotation | None if annotation is not Any else Any, None)
    model = pydantic.create_model(  # type: ignore[call-overload]
        f'{getattr(factory, "__name__", "Preset").title()}Settings', __base__=ContextSettings, **fields
    )
    _UNSUPPORTED[model] = tuple(unsupported)
    return typing.cast(type[ContextSettings], model)


def _find_variable(setting: str, environ: Mapping[str, str]) -> str | None:
    wanted = ContextSettings.variable(setting)
    # pydantic-settings reads variables case-insensitively; so does this check.
    return next((k for k in environ if k.upper() == wanted), None)


def _type_hints(factory: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(factory, include_extras=True)
    except Exception:  # unresolvable forward references: treat the settings as untyped
        return {}


def _settings_error(exc: pydantic.ValidationError) -> ContextSettingsError:
    problems = []
    for error in exc.errors():
        loc = error.get('loc', ())
        setting = str(loc[0]) if loc else '?'
        variable = _find_variable(setting, os.environ) or ContextSettings.variable(setting)
        value = os.environ.get(variable, error.get('input'))
        problems.append(f'{variable}={value!r}: {error.get("msg", "invalid value")}')
    return ContextSettingsError('invalid environment variable ' + '; '.join(problems))
