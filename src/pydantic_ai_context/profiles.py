"""`ContextProfile`: settings plus an ordered chain of policies, and the named presets.

One object serves every integration:

- pydantic-ai 2.x: `Agent(capabilities=[profile])`. Before each model request the profile
  compiles the view and replaces only that request's messages; `result.all_messages()` keeps
  the whole log.
- pydantic-ai 1.x: `Agent(history_processors=profile.history_processors)`. The view replaces
  the run's history (pydantic-ai 1.x has no request-only hook that every version honours).
- Anywhere: `await profile.compile(messages)`.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import RunContext

from .budget import ContextBudget
from .events import CompactionEvent, EventHandler
from .tokens import TiktokenCounter, TokenCounter
from .views import CompileContext, Step, compile_view, step_name

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

__all__ = ('ContextProfile', 'available_profiles', 'profile', 'register_profile')

_EVENTS_KEPT = 200


@dataclass(kw_only=True, repr=False)
class ContextProfile(AbstractCapability[Any]):
    """Settings plus an ordered chain of policies that compiles the model's view of a conversation.

    Print a profile to see its chain. Use it as a pydantic-ai capability (2.x, non-destructive),
    through `history_processors` (1.x), or call `compile` directly.

    Example:
        ```python
        from pydantic_ai import Agent
        from pydantic_ai.models.test import TestModel

        from pydantic_ai_context import profile

        ctx_profile = profile('transparent', context_window=32_000)
        agent = Agent(TestModel(), capabilities=[ctx_profile])
        result = agent.run_sync('hello')
        assert result.output
        ```
    """

    name: str = 'custom'
    """The preset this profile came from, or `'custom'`."""
    steps: Sequence[Step] = ()
    """The chain, in order. `normalize` runs before the first step and after every step."""
    context_window: int | None = None
    """Tokens the model accepts. `None`: the model's profile, then genai-prices, then a conservative default."""
    reserved_output: int = 4_096
    """Tokens kept free for the model's answer."""
    reserved_system: int = 0
    """Tokens the instructions and tool schemas take, which the message view cannot use."""
    soft_threshold: float = 0.75
    """Share of the usable budget at which budget-driven policies start compacting."""
    counter: TokenCounter | None = None
    """Counts tokens; default: `TiktokenCounter` for the run's model."""
    summary_model: Any = None
    """Model for summarising policies (a cheaper one); `None` uses the run's model."""
    event_handlers: Sequence[EventHandler] = ()
    """Callbacks (sync or async) receiving a `CompactionEvent` for each step that changed the view.

    `profile(name, on_event=...)` fills it (one callable or a sequence). The field is not called
    `on_event` because that name is a pydantic-ai capability hook for agent stream events.
    """
    settings: dict[str, Any] = field(default_factory=dict[str, Any])
    """The preset's own settings, as given (for display and `replace`)."""
    events: collections.deque[CompactionEvent] = field(
        default_factory=lambda: collections.deque(maxlen=_EVENTS_KEPT), compare=False
    )
    """The most recent compaction events (newest last)."""

    def __repr__(self) -> str:
        chain = ' -> '.join(['normalize', *(step_name(s) for s in self.steps)])
        return f'ContextProfile(name={self.name!r}, chain=[{chain}], context_window={self.context_window!r})'

    # --- compiling ----------------------------------------------------------------------------

    def budget_for(self, model: Any = None) -> ContextBudget:
        """The budget for a request to `model`, from this profile's settings."""
        return ContextBudget.for_model(
            model,
            context_window=self.context_window,
            reserved_output=self.reserved_output,
            reserved_system=self.reserved_system,
            soft_threshold=self.soft_threshold,
        )

    def counter_for(self, model: Any = None) -> TokenCounter:
        if self.counter is not None:
            return self.counter
        return _default_counter(_model_name(model))

    async def compile(
        self, messages: Sequence[ModelMessage], ctx: RunContext[Any] | None = None
    ) -> list[ModelMessage]:
        """Compile the view of `messages` the model should receive. Works without a `RunContext`.

        Never mutates `messages`; the same input gives the same view.
        """
        model = getattr(ctx, 'model', None) if ctx is not None else None
        context = CompileContext(
            counter=self.counter_for(model),
            budget=self.budget_for(model),
            run_id=getattr(ctx, 'run_id', None) if ctx is not None else None,
            run_context=ctx,
            model=self.summary_model if self.summary_model is not None else model,
            log=messages,
        )
        return await compile_view(
            messages,
            self.steps,
            context,
            on_event=self._dispatch,
            count_tokens=bool(self.event_handlers),
        )

    async def _dispatch(self, event: CompactionEvent) -> None:
        self.events.append(event)
        for handler in self.event_handlers:
            result = handler(event)
            if inspect.isawaitable(result):
                await result

    # --- pydantic-ai integration --------------------------------------------------------------

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Replace this request's messages with the compiled view; the run's history is untouched."""
        request_context.messages = await self.compile(list(request_context.messages), ctx)
        return request_context

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def capability(self) -> ContextProfile:
        """This profile as a pydantic-ai capability (it already is one): `Agent(capabilities=[p.capability()])`."""
        return self

    @property
    def history_processors(
        self,
    ) -> list[Callable[[RunContext[Any], list[ModelMessage]], Awaitable[list[ModelMessage]]]]:
        """For `Agent(history_processors=...)` on pydantic-ai 1.x: the view replaces the run's history."""

        async def compile_history(ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
            return await self.compile(messages, ctx)

        compile_history.__name__ = f'{self.name}_profile'
        return [compile_history]

    def process_history(self) -> AbstractCapability[Any]:
        """Opt-in destructive mode on 2.x: `ProcessHistory` that makes the view the run's history."""
        from pydantic_ai.capabilities import ProcessHistory

        return ProcessHistory(self.history_processors[0])

    def replace(self, **changes: Any) -> ContextProfile:
        """A copy with some settings changed (presets are rebuilt from their settings)."""
        if self.name in _PRESETS and not ({'steps'} & changes.keys()):
            merged = {**self._overrides(), **changes}
            return profile(self.name, **merged)
        return dataclasses.replace(self, **changes)

    def _overrides(self) -> dict[str, Any]:
        base = {
            'context_window': self.context_window,
            'reserved_output': self.reserved_output,
            'reserved_system': self.reserved_system,
            'soft_threshold': self.soft_threshold,
            'counter': self.counter,
            'summary_model': self.summary_model,
            'on_event': tuple(self.event_handlers),
        }
        return {**base, **self.settings}


def _model_name(model: Any) -> str | None:
    if model is None:
        return None
    if isinstance(model, str):
        return model
    return getattr(model, 'model_name', None)


_COUNTERS: dict[str | None, TokenCounter] = {}


def _default_counter(model_name: str | None) -> TokenCounter:
    # One counter per model name: its per-message memo is what makes repeated compiles cheap.
    found = _COUNTERS.get(model_name)
    if found is None:
        found = _COUNTERS[model_name] = TiktokenCounter(model=model_name)
    return found


# --- presets ----------------------------------------------------------------------------------

_COMMON = frozenset(
    {
        'context_window',
        'reserved_output',
        'reserved_system',
        'soft_threshold',
        'counter',
        'summary_model',
        'on_event',
    }
)

PresetFactory = Callable[..., ContextProfile]
_PRESETS: dict[str, PresetFactory] = {}


def register_profile(name: str, factory: PresetFactory) -> None:
    """Make `profile(name, ...)` build profiles with `factory(**settings)`."""
    _PRESETS[name] = factory


def available_profiles() -> list[str]:
    """Names accepted by `profile()`."""
    return sorted(_PRESETS)


def profile(name: str, **overrides: Any) -> ContextProfile:
    """Build the preset called `name`, with settings overridden by keyword.

    Every preset accepts `context_window`, `reserved_output`, `reserved_system`,
    `soft_threshold`, `counter`, `summary_model` and `on_event`, plus its own documented
    settings. An unknown setting raises `TypeError` naming it; an unknown preset raises
    `ValueError` listing the known ones.

    Example:
        ```python
        from pydantic_ai_context import profile

        p = profile('transparent', context_window=64_000)
        assert p.name == 'transparent' and p.context_window == 64_000
        ```
    """
    try:
        factory = _PRESETS[name]
    except KeyError:
        raise ValueError(
            f'unknown profile {name!r}; known profiles: {", ".join(available_profiles())}'
        ) from None
    own = _own_settings(factory)
    unknown = sorted(set(overrides) - _COMMON - own)
    if unknown:
        raise TypeError(
            f'profile {name!r} got unknown setting(s) {", ".join(map(repr, unknown))}; '
            f'accepted: {", ".join(sorted(_COMMON | own))}'
        )
    return factory(**overrides)


def _own_settings(factory: PresetFactory) -> frozenset[str]:
    params = inspect.signature(factory).parameters.values()
    return frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY) - _COMMON


def split_settings(settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate the common settings (as `ContextProfile` fields) from a preset's own."""
    common = {k: v for k, v in settings.items() if k in _COMMON}
    own = {k: v for k, v in settings.items() if k not in _COMMON}
    handlers = common.pop('on_event', None)
    if handlers is not None:
        common['event_handlers'] = (handlers,) if callable(handlers) else tuple(handlers)
    return common, own
