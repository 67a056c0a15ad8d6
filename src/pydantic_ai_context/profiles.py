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
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import RunContext

from . import _tracing
from ._scope import MemoScope, compiling, suspended
from .budget import ContextBudget
from .events import CompactionEvent, ContextEvent, ContextUsageEvent, EventHandler
from .settings import default_profile_name, environment_overrides
from .tokens import TokenCounter, default_counter, measure_context
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
    reserved_output: int | None = None
    """Tokens kept free for the model's answer; `None`: 4,096, or a quarter of a smaller window."""
    reserved_system: int = 0
    """Tokens the instructions and tool schemas take, which the message view cannot use."""
    soft_threshold: float = 0.75
    """Share of the usable budget at which budget-driven policies start compacting."""
    counter: TokenCounter | None = None
    """Counts tokens; default: `TiktokenCounter` for the run's model."""
    summary_model: Any = None
    """Model for summarising policies (a cheaper one); `None` uses the run's model."""
    event_handlers: Sequence[EventHandler] = ()
    """Callbacks (sync or async) receiving a `CompactionEvent` for each step that changed the view,
    then one `ContextUsageEvent` (the context gauge) per compile. Filter with `isinstance`.

    `profile(name, on_event=...)` fills it (one callable or a sequence). The field is not called
    `on_event` because that name is a pydantic-ai capability hook for agent stream events.
    """
    settings: dict[str, Any] = field(default_factory=dict[str, Any])
    """The preset's own settings, as given (for display and `replace`)."""
    events: collections.deque[CompactionEvent] = field(
        default_factory=lambda: collections.deque(maxlen=_EVENTS_KEPT), compare=False
    )
    """The most recent compaction events (newest last); see `last_compile_events` and `run_events`."""
    last_usage: ContextUsageEvent | None = field(default=None, init=False, compare=False)
    """The context gauge of the latest compile, or `None` before the first."""
    _compiles: int = field(default=0, init=False, compare=False)
    _last_compile_id: int = field(default=0, init=False, compare=False)
    # The latest view and its run id: what that request was sent, to anchor the next gauge on the
    # provider's usage (see `tokens.measure_context`).
    _last_sent: tuple[str | None, list[ModelMessage]] | None = field(default=None, init=False, compare=False)
    # The incremental state of the chain (see `_scope.MemoScope`): released with the profile.
    _scope: MemoScope = field(default_factory=MemoScope, init=False, compare=False)

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
        return default_counter(model)

    async def compile(
        self,
        messages: Sequence[ModelMessage],
        ctx: RunContext[Any] | None = None,
        *,
        model: Any = None,
        budget: ContextBudget | None = None,
    ) -> list[ModelMessage]:
        """Compile the view of `messages` the model should receive. Works without a `RunContext`.

        `model` (default: the run's model) picks the token encoding and the context window;
        `budget` overrides the budget this profile would resolve for it.

        Never mutates `messages`; the same input gives the same view. Steps that change the view
        send `CompactionEvent`s to the handlers, a compile that changed the view records a
        `compact_messages` span on the run's tracer, and every compile ends with a
        `ContextUsageEvent` (also kept as `last_usage`).
        """
        start_time = time.time_ns()
        if model is None and ctx is not None:
            model = getattr(ctx, 'model', None)
        run_id = getattr(ctx, 'run_id', None) if ctx is not None else None
        self._compiles += 1
        compile_id = self._compiles
        context = CompileContext(
            counter=self.counter_for(model),
            budget=budget if budget is not None else self.budget_for(model),
            run_id=run_id,
            run_context=ctx,
            model=self.summary_model if self.summary_model is not None else model,
            log=messages,
        )
        happened: list[CompactionEvent] = []

        async def on_event(event: CompactionEvent) -> None:
            event = dataclasses.replace(event, profile=self.name, compile_id=compile_id)
            happened.append(event)
            self.events.append(event)
            await self._dispatch(event)

        with compiling(self._scope, messages) as generation:
            view = await compile_view(
                messages, self.steps, context, on_event=on_event, count_tokens=bool(self.event_handlers)
            )
            self._last_compile_id = compile_id
            counter = context.counter
            _tracing.record_compaction(
                _tracing.tracer_for(ctx),
                start_time=start_time,
                profile=self.name,
                events=happened,
                messages_before=len(messages),
                messages_after=len(view),
                count_tokens=lambda: (counter.count_messages(messages), counter.count_messages(view)),
                run_id=run_id,
                compile_id=compile_id,
            )
            assert context.budget is not None
            usage = self._measure(
                view, messages, context.budget, counter, run_id=run_id, compile_id=compile_id
            )
            self._scope.seal(generation, view)
        self.last_usage = usage
        self._last_sent = (run_id, view)
        await self._dispatch(usage)
        return view

    def _measure(
        self,
        view: list[ModelMessage],
        log: Sequence[ModelMessage],
        budget: ContextBudget,
        counter: TokenCounter,
        *,
        run_id: str | None,
        compile_id: int,
    ) -> ContextUsageEvent:
        reading = None
        if self._last_sent is not None and self._last_sent[0] == run_id:
            reading = measure_context(
                view, counter=counter, sent=self._last_sent[1], reserved_system=budget.reserved_system
            )
        if reading is None or not reading.anchored:
            reading = measure_context(view, counter=counter, log=log, reserved_system=budget.reserved_system)
        return ContextUsageEvent(
            message_tokens=reading.tokens,
            used_tokens=reading.tokens + budget.reserved_system,
            window_tokens=budget.context_window,
            limit_tokens=budget.limit,
            soft_limit_tokens=budget.soft_limit,
            window_source=budget.window_source,
            anchored=reading.anchored,
            estimated_tokens=reading.estimated_tokens,
            messages=len(view),
            log_messages=len(log),
            compacted=len(view) != len(log) or any(a is not b for a, b in zip(view, log, strict=False)),
            run_id=run_id,
            profile=self.name,
            compile_id=compile_id,
        )

    async def _dispatch(self, event: ContextEvent) -> None:
        for handler in self.event_handlers:
            # The handler is the application's code: the profile's incremental state is not for it.
            with suspended():
                result = handler(event)
                if inspect.isawaitable(result):
                    await result

    @property
    def last_compile_events(self) -> list[CompactionEvent]:
        """The compaction events of the latest finished compile (empty if it changed nothing)."""
        return [e for e in self.events if e.compile_id == self._last_compile_id]

    def run_events(self, run_id: str | None = None) -> list[CompactionEvent]:
        """The kept compaction events of agent run `run_id` (default: the run of the newest event)."""
        if run_id is None:
            if not self.events:
                return []
            run_id = self.events[-1].run_id
        return [e for e in self.events if e.run_id == run_id]

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
        # A copy observes its own compiles: it must not share the event history.
        return dataclasses.replace(self, **{'events': collections.deque(maxlen=_EVENTS_KEPT), **changes})

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


def preset_factory(name: str) -> PresetFactory:
    """The factory registered as `name`; `ValueError` listing the known presets if there is none."""
    try:
        return _PRESETS[name]
    except KeyError:
        raise ValueError(
            f'unknown profile {name!r}; known profiles: {", ".join(available_profiles())}'
        ) from None


def profile(name: str | None = None, **overrides: Any) -> ContextProfile:
    """Build the preset called `name`, with settings from keywords, then the environment, then its defaults.

    Every preset accepts `context_window`, `reserved_output`, `reserved_system`,
    `soft_threshold`, `counter`, `summary_model` and `on_event`, plus its own documented
    settings. Settings not given as keywords come from `PYDANTIC_AI_CONTEXT_*` environment
    variables (see `ContextSettings`); without a `name`, `PYDANTIC_AI_CONTEXT_PROFILE` names the
    preset (default `'transparent'`). An unknown setting raises `TypeError` naming it; an unknown
    preset raises `ValueError` listing the known ones; an invalid environment variable raises
    `ContextSettingsError` naming the variable.

    Example:
        ```python
        from pydantic_ai_context import profile

        p = profile('transparent', context_window=64_000)
        assert p.name == 'transparent' and p.context_window == 64_000
        ```
    """
    if name is None:
        name = default_profile_name()
    factory = preset_factory(name)
    own = _own_settings(factory)
    unknown = sorted(set(overrides) - _COMMON - own)
    if unknown:
        raise TypeError(
            f'profile {name!r} got unknown setting(s) {", ".join(map(repr, unknown))}; '
            f'accepted: {", ".join(sorted(_COMMON | own))}'
        )
    settings = {**environment_overrides(factory, skip=overrides.keys()), **overrides}
    built = factory(**settings)
    if not built.settings:
        # The preset's own settings as resolved (defaults included), derived from its signature,
        # so `replace()` can rebuild it and a user can print what it runs with.
        bound = inspect.signature(factory).bind_partial(**settings)
        bound.apply_defaults()
        built.settings = {k: v for k, v in bound.arguments.items() if k in own}
    return built


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
