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
import functools
import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset

from . import _registry, registry
from ._cache_points import CachePointPlan
from ._compaction import window as compaction_window
from ._markers import conversation_identity
from ._offload import OFFLOAD_MESSAGES, StepRunner, new_messages, warm_off_loop
from ._scope import MemoScope, compiling
from ._warm import WARM_MESSAGES, warm_prefixes
from .budget import DEFAULT_RESERVED_OUTPUT as _DEFAULT_RESERVED_OUTPUT
from .budget import DEFAULT_SAFETY_MARGIN as _SAFETY_MARGIN
from .budget import ContextBudget, resolve_context_window, resolve_input_limit
from .dispatch import EventDispatch, run_events
from .errors import ContextBudgetExceeded
from .events import CompactionEvent, ContextEvent, ContextUsageEvent, EventHandler
from .gauge import ContextGauge
from .integration import processors
from .integration._learned_limits import LearnedLimits
from .integration.recovery import OverflowRecovery, tightened_window
from .integration.request_path import HAS_PREPARE_HOOK, RequestPath
from .integration.toolset import ReadbackTools
from .overhead import OverheadMemo, RequestOverhead
from .policies.summarize._summary_ahead import BackgroundSummaries
from .policies.summarize._summary_tasks import compile_running
from .readback.archive import ContextArchive, ReadbackStore
from .registry import split_settings
from .tokens import TokenCounter, _MessageCounter, default_counter
from .views import CompileContext, Step, compile_view, step_name

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

__all__ = (
    'ContextProfile',
    'PresetFactory',
    'available_profiles',
    'preset_factory',
    'profile',
    'register_profile',
    'split_settings',
)

_EVENTS_KEPT = 200


@dataclass(kw_only=True, repr=False)
class ContextProfile(AbstractCapability[Any]):
    """Settings plus an ordered chain of policies that compiles the model's view of a conversation.

    Print a profile to see its chain. Use it as a pydantic-ai capability (2.x, non-destructive),
    through `history_processors` (1.x), or call `compile` directly. Its markers name refs that
    the `read_context` / `search_context` tools read back: the capability contributes them,
    `toolset` carries them for the other integrations (see `readback`).

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
    """Tokens the model accepts. `None`: the model's, as `resolve_context_window` finds it."""
    reserved_output: int | None = None
    """Tokens kept free for the model's answer; `None`: 4,096, or a quarter of a smaller window."""
    reserved_system: int | None = None
    """Tokens the request sends besides its messages (tool definitions, instructions the messages do not
    carry). `None`: measured from each request (see `pydantic_ai_context.overhead`); an int overrides."""
    soft_threshold: float = 0.75
    """Share of the usable budget at which budget-driven policies start compacting."""
    counter: TokenCounter | None = None
    """Counts tokens; default: `TiktokenCounter` for the run's model."""
    max_overflow_retries: int = 2
    """Times one request is compiled again, tighter, after the provider rejects it as too long; then
    `ContextBudgetExceeded`."""
    overflow_shrink: float = 0.8
    """When a rejection states no limit: the retried request sends at most this share of the rejected input
    (never less than its instructions and tool definitions plus 1,024 tokens, nor 2,048; see
    `on_model_request_error`)."""
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
    readback: bool = True
    """Contribute `read_context` and `search_context` (the capability's toolset, or `toolset`), and
    the instruction that tells the model about them once its view holds a marker."""
    readback_store: ReadbackStore | None = None
    """The side store for originals the log the tools read cannot give (see `readback`); `None`: in memory."""
    cache_points: bool = True
    """On Anthropic and Amazon Bedrock, with the conversation cached (`Caching`, or the provider's own
    `*_cache_messages` setting), add the fourth cache breakpoint to each request: where the next
    compaction step will start, or on the entry a step's request can still read (see
    [Prompt caching](the-whole-request.md#prompt-caching)). Only the request sent has it, never the
    view or the history; on pydantic-ai 1.x, where the view becomes the history, it is not added."""
    events: collections.deque[CompactionEvent] = field(
        default_factory=lambda: collections.deque(maxlen=_EVENTS_KEPT), compare=False
    )
    """The most recent compaction events (newest last); see `last_compile_events` and `run_events`."""
    last_usage: ContextUsageEvent | None = field(default=None, init=False, compare=False)
    """The context gauge of the latest compile, or `None` before the first."""
    last_overhead: RequestOverhead | None = field(default=None, init=False, compare=False)
    """What the latest request sent besides its messages (instructions, tool definitions), or `None`."""
    _overhead_memo: OverheadMemo = field(default_factory=OverheadMemo, init=False, compare=False)
    # The incremental state of the chain (see `_scope.MemoScope`): released with the profile.
    _scope: MemoScope = field(default_factory=MemoScope, init=False, compare=False)
    _work_lock: threading.Lock = field(default_factory=threading.Lock, init=False, compare=False, repr=False)
    """Held while this profile's synchronous work runs (see `_offload.StepRunner`)."""
    _archive: ContextArchive | None = field(default=None, init=False, compare=False)
    _tools: ReadbackTools = field(default_factory=ReadbackTools, init=False, compare=False)
    # Summaries written ahead in the background (see `policies.summarize._summary_ahead`): cancelled at the
    # end of their run (unless a session owns them), and when the profile is collected.
    _background: BackgroundSummaries = field(default_factory=BackgroundSummaries, init=False, compare=False)
    _background_outlives_runs: bool = field(default=False, init=False, compare=False, repr=False)
    # The rooms of the ideas the profile delegates to (see `gauge`, `dispatch` and `integration`).
    _gauge: ContextGauge = field(default_factory=ContextGauge, init=False, compare=False)
    _events_room: EventDispatch = field(default_factory=EventDispatch, init=False, compare=False)
    _request_path: RequestPath = field(default_factory=RequestPath, init=False, compare=False)
    _recovery: OverflowRecovery = field(default_factory=OverflowRecovery, init=False, compare=False)
    _cache_plan: CachePointPlan = field(default_factory=CachePointPlan, init=False, compare=False)

    def __post_init__(self) -> None:
        weakref.finalize(self, self._background.cancel_now)  # no summary task outlives its profile
        # Settings are checked when the profile is built, not at its first model request.
        registry.check_fields(self, lambda: self.budget_for(None))

    def __repr__(self) -> str:
        chain = ' -> '.join(['normalize', *(step_name(s) for s in self.steps)])
        return f'ContextProfile(name={self.name!r}, chain=[{chain}], context_window={self.context_window!r})'

    # --- compiling ----------------------------------------------------------------------------

    def budget_for(self, model: Any = None, *, overhead: RequestOverhead | None = None) -> ContextBudget:
        """The budget for a request to `model`, from this profile's settings.

        `reserved_system` is the explicit setting, else what `overhead` measured the request sends
        besides its messages, else 0. Limits learned when the provider rejected a request to the
        same model (see `on_model_request_error`) tighten the window while they are in force.
        Raises `ContextBudgetExceeded` when the instructions and tool definitions alone leave no
        room for messages.
        """
        reserved_system = self.reserved_system
        if reserved_system is None:
            reserved_system = overhead.reserve if overhead is not None else 0
        window = resolve_context_window(model, explicit=self.context_window)
        tokens, source = window.tokens, window.source
        reserved_output = self.reserved_output
        if reserved_output is None:
            reserved_output = min(_DEFAULT_RESERVED_OUTPUT, tokens // 4)
        learned = self._recovery.in_force(model)
        if learned is not None:
            tokens, source = tightened_window(tokens, source, learned, reserved_output=reserved_output)
        try:
            return ContextBudget(
                context_window=tokens,
                reserved_output=reserved_output,
                reserved_system=reserved_system,
                soft_threshold=self.soft_threshold,
                window_source=source,
                input_limit=None if window.source == 'explicit' else resolve_input_limit(model),
            )
        except ValueError as exc:
            if reserved_system <= 0:
                raise
            learned_text = learned.describe() if learned is not None and source == 'provider' else None
            raise _no_room(reserved_system, reserved_output, tokens, learned_text) from exc

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
        parameters: Any = None,
        whole_log: bool = False,
        conversation: str | None = None,
    ) -> list[ModelMessage]:
        """Compile the view of `messages` the model should receive. Works without a `RunContext`.

        `model` (default: the run's model) picks the token encoding and the context window;
        `budget` overrides the budget this profile would resolve for it. `parameters` is the
        request's `ModelRequestParameters`, when known: its instructions and tool definitions are
        measured and reserved (see `budget_for`); without it, a `ctx` with a tool manager (a
        history processor's) supplies the run's tool definitions.
        `whole_log`: `messages`
        is the whole canonical log, and the read-back tools will read it (the 2.x capability);
        otherwise the tool results the view shortens are kept in the side store for them.
        `conversation` names the conversation `messages` belong to, for the originals the view's
        markers name (pass the same to `read_context`/`search_context`): needed only to read back
        across processes a log that carries no pydantic-ai ids (see `ContextArchive`).

        Never mutates `messages`; the same input gives the same view. Steps that change the view
        send `CompactionEvent`s to the handlers, a compile that changed the view records a
        `compact_messages` span on the run's tracer, and every compile ends with a
        `ContextUsageEvent` (also kept as `last_usage`).
        """
        return await _compile(
            self,
            messages,
            ctx,
            model=model,
            budget=budget,
            parameters=parameters,
            whole_log=whole_log,
            conversation=conversation,
        )

    # --- summaries made ahead (see `policies.summarize._summary_ahead`) ----------------------------------

    async def deliver_background_events(self) -> None:
        """Record and send the `summary_discarded` events of summaries made ahead and never used."""
        await self._events_room.deliver(self, self._background.take_events())

    async def settle_background(self) -> None:
        """Wait until the summaries this profile is writing ahead have landed (or failed).

        `replay` calls it between requests: a recorded run's model answered before its next
        request, so a summary that was on its way has landed by then (`bench/replay.py
        --summary-latency` models a summariser slower than that).
        """
        await self._background.settle()

    async def close_background(self) -> None:
        """Cancel the summaries this profile is writing ahead; report the unused ones as discarded.

        A run's tasks end with the run (the capability) and a session's when it closes; call this
        when a profile used through `compile` alone (a replay, a custom loop) is done.
        """
        await self._background.close()
        await self.deliver_background_events()

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        """pydantic-ai 2.x: the run's summary in flight is cancelled when the run ends."""
        try:
            return await handler()
        finally:
            if not self._background_outlives_runs:
                await self._background.end_run(getattr(ctx, 'run_id', None))
                await self.deliver_background_events()

    # --- events (see `dispatch`) ----------------------------------------------------------------

    async def _dispatch(self, event: ContextEvent) -> None:
        """Send `event` to every handler; a handler that raises is logged, never propagated."""
        await self._events_room.send(self, event)

    def _record(self, event: CompactionEvent) -> None:
        self._events_room.record(self, event)

    def _set_gauge(self, usage: ContextUsageEvent | None, overhead: RequestOverhead | None) -> None:
        """Keep the latest gauge, here and on the profile this copy records into (a session's)."""
        self._events_room.set_gauge(self, usage, overhead)

    def recording_into(self, original: ContextProfile) -> ContextProfile:
        """Also record this profile's compaction events in `original.events`, and its gauge in
        `original.last_usage` and `original.last_overhead` (and number compiles with its counter);
        returns `self`. A `ContextSession` compiles with a copy of the profile it was given, so that
        `original.run_events()` and `original.last_usage` still show what happened in a run."""
        self._events_room.record_into(original, original._events_room)
        return self

    @property
    def last_compile_events(self) -> list[CompactionEvent]:
        """The compaction events of the latest finished compile (empty if it changed nothing)."""
        return [e for e in self.events if e.compile_id == self._events_room.last_compile_id]

    def run_events(self, run_id: str | None = None) -> list[CompactionEvent]:
        """The kept compaction events of agent run `run_id` (default: the run of the newest event)."""
        return run_events(self.events, run_id)

    # --- reading back ---------------------------------------------------------------------------

    @property
    def archive(self) -> ContextArchive:
        """The side store of originals this profile's markers name, behind `read_context`."""
        if self._archive is None:
            self._archive = ContextArchive(self.readback_store)
        return self._archive

    def get_toolset(self) -> FunctionToolset[Any] | None:
        """As a capability: `read_context` and `search_context` (the instruction comes with the view)."""
        return self._tools.toolset(self.archive, instructions=False) if self.readback else None

    @property
    def toolset(self) -> FunctionToolset[Any]:
        """`read_context` and `search_context` for an agent that compiles through `history_processors`
        (pydantic-ai 1.x), `process_history()` or `compile()`: `Agent(..., toolsets=[p.toolset])`.

        It carries the read-back instruction for requests whose history holds a marker. Not needed
        (and a name clash) with the profile as a capability, which contributes the same tools.
        """
        return self._tools.toolset(self.archive, instructions=True)

    # --- the pydantic-ai integration (see `integration`): the hooks delegate to its rooms ------

    async def compile_request(
        self,
        messages: Sequence[ModelMessage],
        ctx: RunContext[Any] | None = None,
        *,
        model: Any = None,
        parameters: Any = None,
        whole_log: bool = False,
    ) -> list[ModelMessage]:
        """`compile`, then refuse to send what cannot fit: the view every integration sends.

        Raises `ContextBudgetExceeded` (before anything is sent) when the compiled view, with the
        instructions and tool definitions it travels with, is over the budget.
        """
        return await self._request_path.compile_request(
            self, messages, ctx, model=model, parameters=parameters, whole_log=whole_log
        )

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """pydantic-ai 2.62–2.63 and 1.x: this request's messages become the compiled view (on >= 2.64,
        `prepare_model_request` compiles per attempt instead; see `integration.request_path`)."""
        if not HAS_PREPARE_HOOK:
            request_context.messages = await self._request_path.compile_attempt(self, ctx, request_context)
        return request_context

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """pydantic-ai >= 2.64: this attempt's messages (only) become the view compiled for the model that
        serves it: a fallback to a model with a smaller window gets a view that fits it."""
        request_context.messages = await self._request_path.compile_attempt(self, ctx, request_context)
        return request_context

    async def on_model_request_error(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        error: Exception,
    ) -> ModelResponse:
        """When the provider rejects the request as too long: learn its limit, compile tighter and try again
        (at most `max_overflow_retries` times, then `ContextBudgetExceeded`; see `integration.recovery`)."""
        return await self._recovery.on_error(self, ctx, request_context, error)

    @property
    def _limits(self) -> LearnedLimits:  # the limits learned from provider rejections
        return self._recovery.limits

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        """A request the provider accepted: a learned limit it went past is lifted."""
        self._recovery.accepted(self, request_context)
        return response

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def capability(self) -> ContextProfile:
        """This profile as a pydantic-ai capability (it already is one): `Agent(capabilities=[p.capability()])`."""
        return self

    @property
    def history_processors(self) -> list[processors.HistoryProcessor]:
        """For `Agent(history_processors=...)` on pydantic-ai 1.x: the view replaces the run's history.

        A history processor sees the run's tool definitions but not native tools, a native output
        schema or prompted-output instructions (set `reserved_system` for those), and cannot
        retry a request the provider rejects as too long: use the capability where you can.
        """
        return [processors.history_processor(self)]

    def process_history(self) -> AbstractCapability[Any]:
        """Opt-in destructive mode on 2.x: `ProcessHistory` that makes the view the run's history."""
        return processors.process_history(self)

    def replace(self, **changes: Any) -> ContextProfile:
        """A copy with some settings changed (presets are rebuilt from their settings).

        A copy with other `steps` is no longer its preset: unless `name` is given it is named
        `'custom'`, so a later `replace` keeps its chain instead of rebuilding the preset's.
        """
        if self.name in _PRESETS and not ({'steps'} & changes.keys()):
            merged = {**registry.preset_settings(self), **changes}
            return profile(self.name, **merged)
        if 'steps' in changes and 'name' not in changes and self.name in _PRESETS:
            changes = {**changes, 'name': 'custom'}
        # A copy observes its own compiles: it must not share the event history.
        return dataclasses.replace(self, **{'events': collections.deque(maxlen=_EVENTS_KEPT), **changes})


# --- presets: the typed entry points of the registry (see `registry`) ----------------------------

PresetFactory = Callable[..., ContextProfile]
_PRESETS = _registry.PRESETS  # the same dict: tests and plugins may register through either


def register_profile(name: str, factory: PresetFactory) -> None:
    """Make `profile(name, ...)` build profiles with `factory(**settings)`.

    The factory's keyword-only parameters are the preset's own settings (checked against their
    annotations, and read from `PYDANTIC_AI_CONTEXT_*` variables like the built-in presets'); the
    common settings arrive in `**common`. Registering an existing name replaces its factory.

    Example:
        ```python
        from typing import Any

        from pydantic_ai_context import ContextProfile, available_profiles, profile, register_profile
        from pydantic_ai_context.policies import fit_to_budget, mask_observations
        from pydantic_ai_context.profiles import split_settings


        def lean(*, keep_recent: int = 1, **common: Any) -> ContextProfile:
            fields, _ = split_settings(common)
            steps = (mask_observations(keep_recent=keep_recent, step=1), fit_to_budget())
            return ContextProfile(name='lean', steps=steps, **fields)


        register_profile('lean', lean)
        assert 'lean' in available_profiles()
        print(profile('lean', context_window=32_000))
        # ContextProfile(name='lean', chain=[normalize -> mask_observations -> fit_to_budget], context_window=32000)
        ```
    """
    registry.register(name, factory)


def available_profiles() -> list[str]:
    """Names accepted by `profile()`, sorted.

    Example:
        ```python
        from pydantic_ai_context import available_profiles

        assert {'chat', 'coding', 'long_horizon', 'transparent'} <= set(available_profiles())
        ```
    """
    return _registry.names()


def preset_factory(name: str) -> PresetFactory:
    """The factory registered as `name`; `ValueError` listing the known presets if there is none."""
    return _registry.factory(name)  # type: ignore[no-any-return]


def profile(name: str | None = None, **overrides: Any) -> ContextProfile:
    """Build the preset called `name`, with settings from keywords, then the environment, then its defaults.

    Every preset accepts `context_window`, `reserved_output`, `reserved_system`,
    `soft_threshold`, `counter`, `summary_model`, `readback`, `readback_store`,
    `max_overflow_retries`, `overflow_shrink` (the `ContextProfile` fields of those names), and the
    event handlers `on_event` (every event), `on_compaction` (`CompactionEvent`s only) and
    `on_usage` (`ContextUsageEvent`s only), plus its own documented settings. Settings not given
    as keywords come from `PYDANTIC_AI_CONTEXT_*` environment variables (see `ContextSettings`);
    without a `name`, `PYDANTIC_AI_CONTEXT_PROFILE` names the preset (default `'transparent'`).

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
    return registry.build(name, overrides)  # type: ignore[no-any-return]


def _no_room(
    reserved_system: int, reserved_output: int, tokens: int, learned: str | None
) -> ContextBudgetExceeded:
    """The refusal of a window whose instructions, tool definitions and reserved output leave no room."""
    window_text = f'the {tokens:,}-token window {learned}' if learned else f'a {tokens:,}-token window'
    return ContextBudgetExceeded(
        reserved_system + reserved_output,
        tokens - math.ceil(tokens * _SAFETY_MARGIN),
        detail=(
            f'the instructions and tool definitions ({reserved_system:,} tokens) and the reserved '
            f'output ({reserved_output:,}) leave no room for messages in {window_text}'
        ),
    )


async def _warm_off_loop(
    profile: ContextProfile,
    counter: TokenCounter,
    messages: Sequence[ModelMessage],
    ctx: Any,
    conversation: str | None,
) -> tuple[int, StepRunner]:
    """Measure large new content in a worker thread before the steps (see `_offload`), with the
    archive's fingerprints where the compile will fingerprint the log (no id names its conversation).
    Returns how many of the newest messages the counter had not counted before, and where the
    compile's synchronous work runs: in a worker thread for a long log, a long unread tail or large
    new content, so the loop is never held for long (DESIGN invariant 13)."""
    also: Callable[[ModelMessage], Any] | None = None
    named = conversation is not None or profile.archive.conversation is not None
    if profile.readback and not named and conversation_identity(messages, ctx) is None:
        also = profile.archive._fingerprint
    fresh = new_messages(counter, messages) if isinstance(counter, _MessageCounter) else []
    large = await warm_off_loop(counter, messages, also=also, fresh=fresh)
    off_loop = large or len(fresh) >= WARM_MESSAGES or len(messages) >= OFFLOAD_MESSAGES
    return len(fresh), StepRunner(profile._work_lock, off_loop=off_loop)


async def _compile(
    profile: ContextProfile,
    messages: Sequence[ModelMessage],
    ctx: RunContext[Any] | None,
    *,
    model: Any,
    budget: ContextBudget | None,
    parameters: Any,
    whole_log: bool,
    conversation: str | None,
) -> list[ModelMessage]:
    """`ContextProfile.compile`."""
    start_time = time.time_ns()
    if model is None and ctx is not None:
        model = getattr(ctx, 'model', None)
    run_id = getattr(ctx, 'run_id', None) if ctx is not None else None
    compile_id = profile._events_room.next_id()
    counter = profile.counter_for(model)
    # Inside the compile's scope: what is measured of the log (the newest instructions, the
    # archive's lineage fingerprints, the conversation's identity) resumes from what was measured
    # of the previous one.
    with compiling(profile._scope, messages) as generation, compile_running():
        unread, work = await _warm_off_loop(profile, counter, messages, ctx, conversation)
        overhead, resolved, sink = await work.call(
            functools.partial(
                _prepare, profile, messages, ctx, counter, parameters, model, budget, whole_log, conversation
            )
        )
        context = CompileContext(
            counter=counter,
            budget=resolved,
            run_id=run_id,
            run_context=ctx,
            model=profile.summary_model if profile.summary_model is not None else model,
            log=messages,
            originals=sink,
            # Where the view replaces the run's history (pydantic-ai 1.x, `process_history()`), the
            # next request no longer carries the log a summary made ahead covers: summarise in place.
            background=profile._background
            if whole_log or ctx is None or profile._background_outlives_runs
            else None,
        )
        if unread >= WARM_MESSAGES:  # a long log read for the first time: in pieces
            await warm_prefixes(messages, profile.steps, context, unread=unread, work=work)
        happened, on_event = profile._events_room.collector(profile, compile_id)
        view = await compile_view(
            messages,
            profile.steps,
            context,
            on_event=on_event,
            count_tokens=bool(profile.event_handlers),
            work=work,
        )
        profile._events_room.last_compile_id = compile_id
        ids = (profile.name, run_id, compile_id)

        def finish() -> ContextUsageEvent:
            # What a compile does with its view: keep the originals, trace, measure, seal the scope.
            if sink is not None:
                profile.archive.compiled(sink, view)
            profile._gauge.trace(
                ctx, ids, start_time=start_time, events=happened, log=messages, view=view, counter=counter
            )
            explicit = profile.reserved_system is not None
            usage = profile._gauge.measure(
                ids, view, messages, resolved, counter, overhead=overhead, explicit=explicit
            )
            profile._scope.seal(generation, view)
            return usage

        usage = await work.call(finish)
    profile._set_gauge(usage, overhead)
    profile._gauge.sent(run_id, view)
    await profile.deliver_background_events()
    await profile._dispatch(usage)
    return view


def _prepare(
    profile: ContextProfile,
    messages: Sequence[ModelMessage],
    ctx: Any,
    counter: TokenCounter,
    parameters: Any,
    model: Any,
    budget: ContextBudget | None,
    whole_log: bool,
    conversation: str | None,
) -> tuple[RequestOverhead, ContextBudget, Any]:
    """What a compile measures before its steps: the request's overhead, the budget, the read-back sink."""
    overhead = profile._gauge.overhead(messages, ctx, counter, parameters, profile._overhead_memo)
    resolved = budget if budget is not None else profile.budget_for(model, overhead=overhead)
    sink = _sink(profile, messages, whole_log=whole_log, ctx=ctx, conversation=conversation)
    return overhead, resolved, sink


def _sink(
    profile: ContextProfile,
    messages: Sequence[ModelMessage],
    *,
    whole_log: bool,
    ctx: Any,
    conversation: str | None,
) -> Any:
    """Where the compile keeps originals for read-back, or `None` without read-back."""
    if not profile.readback:
        return None
    # Without the whole log, the reader holds views: after a provider's compaction they open as its
    # window does, so the window names the conversation.
    return profile.archive.sink(
        messages if whole_log else compaction_window(messages),
        results=not whole_log,
        run_context=ctx,
        conversation=conversation,
    )
