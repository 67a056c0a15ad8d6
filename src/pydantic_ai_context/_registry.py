"""The preset registry: names `profile(name)` accepts and the factories that build them.

It sits below both `profiles` (which builds presets) and `settings` (which reads their settings from
the environment), so neither has to import the other's caller: settings are read by profiles,
never the reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PRESETS: dict[str, Callable[..., Any]] = {}
"""Every registered preset factory by name (`profiles.register_profile` fills it)."""


def register(name: str, factory: Callable[..., Any]) -> None:
    PRESETS[name] = factory


def names() -> list[str]:
    return sorted(PRESETS)


def factory(name: str) -> Callable[..., Any]:
    """The factory registered as `name`; `ValueError` listing the known presets if there is none."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f'unknown profile {name!r}; known profiles: {", ".join(names())}') from None
