"""What the profile tells observers: a compaction event for every step that changed the view."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from .integrity import Repair

__all__ = ('CompactionEvent', 'EventHandler')


@dataclass(frozen=True, kw_only=True)
class CompactionEvent:
    """One policy changed the view: what it did, why, and the sizes before and after.

    Example:
        ```python
        from pydantic_ai_context import CompactionEvent

        event = CompactionEvent(
            policy='mask_observations', reason='12 old tool results masked',
            messages_before=40, messages_after=40, tokens_before=52_000, tokens_after=9_800,
        )
        assert event.tokens_saved == 42_200
        ```
    """

    policy: str
    """Name of the step that changed the view."""
    reason: str = ''
    """Why it acted (trigger and what it did), in a few words."""
    messages_before: int
    messages_after: int
    tokens_before: int | None = None
    """Tokens of the view before the step, when tokens were counted."""
    tokens_after: int | None = None
    repairs: tuple[Repair, ...] = ()
    """Repairs `normalize` made after this step (or on the input, for the `normalize` step)."""
    details: dict[str, Any] = field(default_factory=dict[str, Any])
    """Policy-specific numbers (e.g. parts masked, summariser usage)."""
    run_id: str | None = None

    @property
    def tokens_saved(self) -> int | None:
        if self.tokens_before is None or self.tokens_after is None:
            return None
        return self.tokens_before - self.tokens_after


EventHandler: TypeAlias = Callable[[CompactionEvent], Awaitable[None] | None]
"""A callback receiving each `CompactionEvent`; may be sync or async."""
