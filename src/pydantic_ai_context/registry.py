"""The preset registry at work: building a preset by name from keywords, the environment and its defaults.

`_registry` holds the names and factories; this module builds from them: it checks settings (unknown
ones, their types and values, naming the keyword or the environment variable a bad value came from),
reads the preset's own settings from `PYDANTIC_AI_CONTEXT_*` variables, separates the common settings
(the `ContextProfile` fields) from a preset's own (`split_settings`), and gives the settings a profile
is rebuilt from (`preset_settings`, for `ContextProfile.replace`).

The typed public entry points, `profile()`, `register_profile`, `available_profiles` and
`preset_factory`, are in `profiles` (they name `ContextProfile`); this module never imports it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from . import _registry
from .dispatch import handler_list, only_kind
from .errors import ContextSettingsError
from .events import CompactionEvent, ContextUsageEvent, EventHandler
from .settings import check_keywords, default_profile_name, environment_overrides, environment_sources

__all__ = ('COMMON_SETTINGS', 'build', 'check_fields', 'preset_settings', 'register', 'split_settings')

COMMON_SETTINGS: Final = frozenset(
    {
        'context_window',
        'reserved_output',
        'reserved_system',
        'soft_threshold',
        'max_overflow_retries',
        'overflow_shrink',
        'counter',
        'summary_model',
        'on_event',
        'on_compaction',
        'on_usage',
        'readback',
        'readback_store',
        'cache_points',
    }
)
"""The settings every preset accepts (the `ContextProfile` fields, and the event handlers)."""


class ProfileFields(Protocol):
    """The fields of a `ContextProfile` that the registry reads."""

    name: str
    context_window: int | None
    reserved_output: int | None
    reserved_system: int | None
    soft_threshold: float
    max_overflow_retries: int
    overflow_shrink: float
    counter: Any
    summary_model: Any
    event_handlers: Sequence[EventHandler]
    settings: dict[str, Any]
    readback: bool
    readback_store: Any
    cache_points: bool


def register(name: str, factory: Callable[..., Any]) -> None:
    """The checks and the registration behind `profiles.register_profile`."""
    if not isinstance(name, str) or not name:
        raise TypeError(f'a profile name must be a non-empty str, got {name!r}')
    if not callable(factory):
        raise TypeError(f'profile {name!r}: the factory must be callable, got {factory!r}')
    _registry.register(name, factory)


def build(name: str | None, overrides: dict[str, Any]) -> Any:
    """The body of `profiles.profile` (see there): the preset `name` built with its settings."""
    if name is None:
        name = default_profile_name()
    factory = _registry.factory(name)
    own = _own_settings(factory)
    unknown = sorted(set(overrides) - COMMON_SETTINGS - own)
    if unknown:
        raise TypeError(
            f'profile {name!r} got unknown setting(s) {", ".join(map(repr, unknown))}; '
            f'accepted: {", ".join(sorted(COMMON_SETTINGS | own))}'
        )
    check_keywords(factory, overrides, preset=name)
    environment = environment_overrides(factory, skip=overrides.keys())
    settings = {**environment, **overrides}
    try:
        built = factory(**settings)
    except ValueError as exc:
        # A combination no single setting's check catches (a window too small for what it
        # reserves), or a preset's own check: say which values came from the environment.
        sources = environment_sources(environment)
        where = f' (from the environment: {", ".join(sources.values())})' if sources else ''
        detail = str(exc).removeprefix(f'profile {name!r}: ')
        raise ContextSettingsError(f'profile {name!r}: {detail}{where}') from exc
    if not built.settings:
        # The preset's own settings as resolved (defaults included), derived from its signature,
        # so `replace()` can rebuild it and a user can print what it runs with.
        bound = inspect.signature(factory).bind_partial(**settings)
        bound.apply_defaults()
        built.settings = {k: v for k, v in bound.arguments.items() if k in own}
    return built


def _own_settings(factory: Callable[..., Any]) -> frozenset[str]:
    params = inspect.signature(factory).parameters.values()
    return frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY) - COMMON_SETTINGS


def split_settings(settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate the common settings (as `ContextProfile` fields) from a preset's own.

    Example:
        ```python
        from pydantic_ai_context.profiles import split_settings

        fields, own = split_settings({'context_window': 32_000, 'keep_recent': 2})
        assert fields == {'context_window': 32_000} and own == {'keep_recent': 2}
        ```
    """
    common = {k: v for k, v in settings.items() if k in COMMON_SETTINGS}
    own = {k: v for k, v in settings.items() if k not in COMMON_SETTINGS}
    handlers: list[EventHandler] = handler_list(common.pop('on_event', None))
    handlers += [only_kind(CompactionEvent, h) for h in handler_list(common.pop('on_compaction', None))]
    handlers += [only_kind(ContextUsageEvent, h) for h in handler_list(common.pop('on_usage', None))]
    if handlers:
        common['event_handlers'] = tuple(handlers)
    return common, own


def preset_settings(fields: ProfileFields) -> dict[str, Any]:
    """The settings a preset profile is rebuilt from: its common settings, then its own."""
    base = {
        'readback': fields.readback,
        'readback_store': fields.readback_store,
        'cache_points': fields.cache_points,
        'context_window': fields.context_window,
        'reserved_output': fields.reserved_output,
        'reserved_system': fields.reserved_system,
        'soft_threshold': fields.soft_threshold,
        'max_overflow_retries': fields.max_overflow_retries,
        'overflow_shrink': fields.overflow_shrink,
        'counter': fields.counter,
        'summary_model': fields.summary_model,
        'on_event': tuple(fields.event_handlers),
    }
    return {**base, **fields.settings}


def check_fields(fields: ProfileFields, check_window: Callable[[], object]) -> None:
    """Check a profile's settings when it is built, not at its first model request.

    `check_window` resolves the budget of an explicit `context_window` (it must leave room for
    messages after what is reserved). Raises `ContextSettingsError` naming the profile.
    """
    try:
        check_keywords(_common_settings_factory, _common_values(fields), preset=fields.name)
        if fields.context_window is not None:
            check_window()
        if fields.counter is not None and not all(
            callable(getattr(fields.counter, method, None)) for method in ('count_text', 'count_message')
        ):
            raise ContextSettingsError(
                f'profile {fields.name!r}: invalid setting counter={fields.counter!r}: expected a '
                'TokenCounter (such as TiktokenCounter() or HeuristicCounter())'
            )
    except ContextSettingsError:
        raise
    except (TypeError, ValueError) as exc:
        raise ContextSettingsError(f'profile {fields.name!r}: {exc}') from None


def _common_values(fields: ProfileFields) -> dict[str, Any]:
    return {
        'context_window': fields.context_window,
        'reserved_output': fields.reserved_output,
        'reserved_system': fields.reserved_system,
        'soft_threshold': fields.soft_threshold,
    }


def _common_settings_factory(
    *,
    context_window: int | None = None,
    reserved_output: int | None = None,
    reserved_system: int = 0,
    soft_threshold: float = 0.75,
) -> None:
    """Stands for "a preset with only the common settings" when checking `ContextProfile` fields."""
