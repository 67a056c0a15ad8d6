"""The named presets `profile(name)` builds: each a chain of policies with documented defaults."""

from __future__ import annotations

from typing import Any

from .profiles import ContextProfile, register_profile, split_settings

__all__ = ()


def transparent(**settings: Any) -> ContextProfile:
    """Normalize only: repairs broken histories and changes nothing else."""
    common, own = split_settings(settings)
    return ContextProfile(name='transparent', steps=(), settings=own, **common)


register_profile('transparent', transparent)
