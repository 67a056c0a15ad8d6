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
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import RunContext

from . import _registry, _tracing
from .budget import ContextBudget
from .errors import ContextSettingsError
from .events import CompactionEvent, ContextEvent, ContextUsageEvent, EventHandler
from .settings import (
    check_keywords,
    default_profile_name,
    environment_overrides,
    environment_sources,
)
from .tokens import TokenCounter, default_counter, measure_context
from .views import CompileContext, Step, compile_view, step_name

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

__all__ = ('ContextProfile', 'available_profiles', 'profile', 'register_profile')

_EVENTS_KEPT = 200

logger = logging.getLogger(__name__)


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
    then one `ContextUsageEvent` (the context gauge) per compile. Filter with `isinstance`, or use
    `profile(name, on_compaction=..., on_usage=...)`, which receive one kind each.

    `profile(name, on_event=...)` fills it (one callable or a sequence). The field is not called
    `on_event` because that name is a pydantic-ai capability hook for agent stream events. A
    handler that raises is logged (once per handler, on the `pydantic_ai_context.profiles`
    logger) and never breaks the run.
    """
    settings: dict[str, Any] = field(default_factory=dict[str, Any])
    """The preset's own settings, as given (for display and `replace`)."""
    events: collections.deque[CompactionEvent] = field(
        default_factory=lambda: collections.deque(maxlen=_EVENTS_KEPT), compare=False
    )
    """The most recent compaction events (newest last); see `last_compile_events` and `run_events`."""
    last_usage: ContextUsageEvent | None = field(default=None, init=False, compare=False)
    """The context gauge of the latest compile, or `None` before the first."""
    # Numbers compiles; shared with the profile a copy records into (`recording_into`), so the
    # events there never show two compiles with the same id.
    _compile_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1), init=False, compare=False)
    _records_into: ContextProfile | None = field(default=None, init=False, compare=False)
    _last_compile_id: int = field(default=0, init=False, compare=False)
    # Handlers whose failure was logged with its traceback; later failures log one line at DEBUG.
    _failed_handlers: set[int] = field(default_factory=set[int], init=False, compare=False)
    # The latest view and its run id: what that request was sent, to anchor the next gauge on the
    # provider's usage (see `tokens.measure_context`).
    _last_sent: tuple[str | None, list[ModelMessage]] | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        # Settings are checked when the profile is built, not at its first model request.
        try:
            check_keywords(_common_settings_factory, self._common_values(), preset=self.name)
            if self.context_window is not None:
                self.budget_for(None)  # the window leaves room for messages after what is reserved
        except ContextSettingsError:
            raise
        except (TypeError, ValueError) as exc:
            raise ContextSettingsError(f'profile {self.name!r}: {exc}') from None

    def _common_values(self) -> dict[str, Any]:
        return {
            'context_window': self.context_window,
            'reserved_output': self.reserved_output,
            'reserved_system': self.reserved_system,
            'soft_threshold': self.soft_threshold,
        }

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
        compile_id = next(self._compile_ids)
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
            self._record(event)
            await self._dispatch(event)

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
        usage = self._measure(view, messages, context.budget, counter, run_id=run_id, compile_id=compile_id)
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
        """Send `event` to every handler; a handler that raises is logged, never propagated."""
        for handler in self.event_handlers:
            try:
                result = handler(event)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                self._handler_failed(handler, event)

    def _handler_failed(self, handler: EventHandler, event: ContextEvent) -> None:
        name = _handler_name(handler)
        if id(handler) in self._failed_handlers:
            logger.debug('event handler %s raised again on a %s event', name, event.kind, exc_info=True)
            return
        self._failed_handlers.add(id(handler))
        logger.exception(
            'event handler %s of profile %r raised on a %s event; the run goes on (further errors '
            'of this handler are logged at DEBUG)',
            name,
            self.name,
            event.kind,
        )

    def _record(self, event: CompactionEvent) -> None:
        self.events.append(event)
        if self._records_into is not None:
            self._records_into._record(event)

    def recording_into(self, original: ContextProfile) -> ContextProfile:
        """Also record this profile's compaction events in `original.events` (and number compiles
        with its counter); returns `self`. A `ContextSession` compiles with a copy of the profile it
        was given, so that `original.run_events()` still shows what happened in a run."""
        self._records_into = original
        self._compile_ids = original._compile_ids
        return self

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


def _handler_name(handler: Any) -> str:
    inner = getattr(handler, 'handler', handler)  # an `_OnlyKind` wrapper names the user's function
    name = getattr(inner, '__qualname__', None) or getattr(inner, '__name__', None)
    return str(name) if name else repr(inner)


@dataclass(frozen=True)
class _OnlyKind:
    """An event handler that passes one kind of event to `handler` (`on_compaction=`, `on_usage=`)."""

    kind: type[CompactionEvent] | type[ContextUsageEvent]
    handler: Callable[[Any], Awaitable[None] | None]

    def __call__(self, event: ContextEvent) -> Awaitable[None] | None:
        if isinstance(event, self.kind):
            return self.handler(event)
        return None


def _common_settings_factory(
    *,
    context_window: int | None = None,
    reserved_output: int | None = None,
    reserved_system: int = 0,
    soft_threshold: float = 0.75,
) -> None:
    """Stands for "a preset with only the common settings" when checking `ContextProfile` fields."""


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
        'on_compaction',
        'on_usage',
    }
)

PresetFactory = Callable[..., ContextProfile]
_PRESETS = _registry.PRESETS  # the same dict: tests and plugins may register through either


def register_profile(name: str, factory: PresetFactory) -> None:
    """Make `profile(name, ...)` build profiles with `factory(**settings)`."""
    _registry.register(name, factory)


def available_profiles() -> list[str]:
    """Names accepted by `profile()`."""
    return _registry.names()


def preset_factory(name: str) -> PresetFactory:
    """The factory registered as `name`; `ValueError` listing the known presets if there is none."""
    return _registry.factory(name)  # type: ignore[no-any-return]


def profile(name: str | None = None, **overrides: Any) -> ContextProfile:
    """Build the preset called `name`, with settings from keywords, then the environment, then its defaults.

    Every preset accepts `context_window`, `reserved_output`, `reserved_system`,
    `soft_threshold`, `counter`, `summary_model`, and the event handlers `on_event` (every event),
    `on_compaction` (`CompactionEvent`s only) and `on_usage` (`ContextUsageEvent`s only), plus its
    own documented settings. Settings not given as keywords come from `PYDANTIC_AI_CONTEXT_*`
    environment variables (see `ContextSettings`); without a `name`, `PYDANTIC_AI_CONTEXT_PROFILE`
    names the preset (default `'transparent'`).

    Settings are checked here, not at the first model request: an unknown setting raises
    `TypeError` naming it; an unknown preset raises `ValueError` listing the known ones; a value a
    setting does not accept (`context_window=-5`, `context_window='32k'`, a window too small for
    what it reserves) raises `ContextSettingsError`, naming the keyword, or the environment
    variable when the value came from one.

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


def _own_settings(factory: PresetFactory) -> frozenset[str]:
    params = inspect.signature(factory).parameters.values()
    return frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY) - _COMMON


def split_settings(settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate the common settings (as `ContextProfile` fields) from a preset's own."""
    common = {k: v for k, v in settings.items() if k in _COMMON}
    own = {k: v for k, v in settings.items() if k not in _COMMON}
    handlers: list[EventHandler] = _handlers(common.pop('on_event', None))
    handlers += [_OnlyKind(CompactionEvent, h) for h in _handlers(common.pop('on_compaction', None))]
    handlers += [_OnlyKind(ContextUsageEvent, h) for h in _handlers(common.pop('on_usage', None))]
    if handlers:
        common['event_handlers'] = tuple(handlers)
    return common, own


def _handlers(given: Any) -> list[EventHandler]:
    """One callable or a sequence of them, as a list; `TypeError` for anything else."""
    if given is None:
        return []
    items = [given] if callable(given) else list(given)
    for item in items:
        if not callable(item):
            raise TypeError(f'an event handler must be callable, got {item!r}')
    return items
