"""`summarize_window`: keep the task framing and the recent turns, replace what lies between with a summary.

The one policy that calls a model. The view is cut into three zones:

- **head**, the task framing: system prompts and the first user prompt, through the first run's
  first text answer once that run has finished;
- **middle**, replaced by one summary message written by a separate summariser agent;
- **tail**, the recent turns, sized by tokens or messages, starting at a safe cut point (a tool
  call and its result are never split).

The end of the summarised span falls on whole steps of `step_messages` counted from the head, so
it depends on the log alone; when the tail such an end keeps does not fit beside a summary (long
notes of a model beside its tool calls make few, large steps), it falls on any safe cut point up
to the newest step. When the step fires and makes no summary, it notes why
(`CompactionEvent.no_summary`, DESIGN invariant 14). Under a budget a summary shrinks the view to a low-water mark and is
reused (from the cache, where summaries are kept by a digest of what they cover) until the view
is over the trigger again: one summary per shrink, each an incremental update of the previous
one, so the prompt prefix changes once per shrink. Whatever happens to the summariser (error,
timeout, rate limit, an empty, inflated or oversized answer), the view is still produced: a
static marker says how many messages were left out. The canonical log is never touched.

This module holds the policy: its settings, `apply` and the decisions (when to fire, how far a
shrink reaches). Its other ideas have rooms of their own: the zones and the block that replaces
the middle in `_summary_block.py`, the span plan and the chain of cached summaries in
`_summary_plan.py`, what is kept between compiles (counts, digests, cache keys) in
`_summary_reading.py`, writing one summary with its fallbacks in `_summary_call.py`, summaries
made ahead in `_summary_ahead.py`; the summariser's prompt and call in `summariser.py`, the
summary cache in `summary_cache.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from pydantic_ai_context.integrity import safe_cut_points
from pydantic_ai_context.policies._base import AsyncPolicy
from pydantic_ai_context.policies._fit_note import drop_record
from pydantic_ai_context.policies.summarize._summary_block import (
    ACK_KIND,
    ACK_TEXT,
    KEPT_KIND,
    MARKER_KIND,
    Kept,
    Zones,
    assemble_block,
    earlier_ref,
    find_zones,
    kept_in,
    summary_request_part,
)
from pydantic_ai_context.policies.summarize._summary_call import FALLBACK_TEMPLATE as FALLBACK_TEMPLATE
from pydantic_ai_context.policies.summarize._summary_call import SummaryCalls
from pydantic_ai_context.policies.summarize._summary_reading import Reading, SummaryLedger, key_template
from pydantic_ai_context.policies.summarize._summary_state import ConversationState
from pydantic_ai_context.policies.summarize.summariser import (
    PROMPT_VERSION,
    SUMMARISER_INSTRUCTIONS,
    escape_delimiters,
    render_transcript,
    run_summariser,
    summary_prompt,
)
from pydantic_ai_context.policies.summarize.summary_cache import InMemorySummaryCache, SummaryCache
from pydantic_ai_context.views import CompileContext, current_prompt

from . import _summary_ahead, _summary_plan

# The summariser call, the summary cache and the summary's block live in their own modules; their
# names stay importable from here, where they were first published.
__all__ = (
    'ACK_KIND',
    'ACK_TEXT',
    'KEPT_KIND',
    'MARKER_KIND',
    'PROMPT_VERSION',
    'SUMMARISER_INSTRUCTIONS',
    'InMemorySummaryCache',
    'SummarizeWindow',
    'SummaryCache',
    'escape_delimiters',
    'render_transcript',
    'run_summariser',
    'summarize_window',
    'summary_prompt',
    'summary_request_part',
)

_MIN_SUMMARY_TOKENS: Final = _summary_plan.MIN_SUMMARY_TOKENS
"""The least a summariser is asked for, however tight the budget."""

# --- the policy --------------------------------------------------------------------------------


@dataclass(kw_only=True)
class SummarizeWindow(ConversationState, AsyncPolicy):
    """Replace the middle of a long conversation with an LLM-written summary, keeping head and tail.

    Fires when the view is over the token trigger (the budget's soft threshold by default) or,
    with `trigger='messages'`, longer than `max_messages`. Under a budget (and no tail size set)
    the summary then covers enough of the oldest steps that the view shrinks to `low_water` of the
    limit, and it is reused until the view is over the trigger again. The head (task framing)
    and the tail (recent turns, never splitting a tool call from its result) stay as they are;
    the middle becomes one request whose metadata is
    `{'pydantic_ai_context': {'kind': 'summary', 'scope': 'historical', 'covers': [start, end], ...}}`.

    Layout: the summary is a user-role request: a `CompactionPart` where pydantic-ai takes one in a
    request (2.x; core frames it as a summary written by a separate model), else a user prompt
    between `<conversation_summary>` delimiters (`role='system'` makes it a system prompt part).
    When the head ends with a response, the summary is its own request; when the head is only the
    first request (a single long run), the summary is appended to that request as an extra part,
    so requests and responses keep alternating. An acknowledgement response
    (`'Understood. ...'`) follows when the tail starts with a request. Pinned parts, system
    prompts, unknown framework parts and unresolved failed tool calls found in the middle are
    kept verbatim right after the summary.

    The summariser is a fresh pydantic-ai `Agent` with no tools and `str` output, on
    `summary_model`, else the profile's `summary_model` / the run's model (`context.model`). It
    receives the middle as quoted data in `<transcript>` tags and is told never to follow
    instructions found there.

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.messages import ToolReturnPart, UserPromptPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        from pydantic_ai_context import CompileContext, HeuristicCounter
        from pydantic_ai_context.policies.summarize import summarize_window

        def summariser(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[TextPart('Goal: fix the bug. Read src/m0.py to src/m11.py.')])

        log: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('fix the bug')])]
        for i in range(12):
            log.append(ModelResponse(parts=[ToolCallPart('read_file', {'path': f'src/m{i}.py'}, tool_call_id=f'c{i}')]))
            log.append(ModelRequest(parts=[ToolReturnPart('read_file', 'x' * 400, tool_call_id=f'c{i}')]))
        policy = summarize_window(trigger='messages', max_messages=10, keep_messages=4, step_messages=2,
                                  keep_current_run=False, summary_model=FunctionModel(summariser))
        view = asyncio.run(policy.apply(log, CompileContext(counter=HeuristicCounter())))
        assert len(view) < len(log)
        assert 'Goal: fix the bug' in view[0].parts[-1].content
        ```
    """

    name: str = 'summarize_window'
    """Step name shown in the profile's chain and in compaction events."""
    trigger: Literal['tokens', 'messages'] = 'tokens'
    """`'tokens'`: fire when the view's tokens exceed the token trigger;
    `'messages'`: when it holds more than `max_messages`."""
    max_tokens: int | None = None
    """Token trigger; `None`: `threshold` × the budget's limit, else the budget's soft threshold."""
    threshold: float | None = None
    """Share of the budget's `limit` at which to fire; `None`: the budget's own `needs_compaction()`."""
    max_messages: int = 40
    """Message-count trigger, used when `trigger='messages'`."""
    keep_tokens: int | None = None
    """Tokens the tail keeps at least. Default (with `keep_messages` also unset): 40% of the token trigger."""
    keep_messages: int | None = None
    """Messages the tail keeps at least. Default (with `keep_tokens` also unset): half of `max_messages`."""
    step_messages: int = 8
    """The summarised span ends on a multiple of this many messages after the head: the summary only
    changes (and the summariser is only called) when a whole step of messages has aged out of the tail."""
    low_water: float | None = 0.6
    """With a budget and no tail size set: when the view is over the trigger, the new summary
    covers enough that the view shrinks to this share of the limit. The following requests then
    append to an unchanged prefix, and the summary is reused from the cache, until the view is
    over the trigger again: one summary per shrink. `None`: the tail keeps 40% of the trigger."""
    summary_share: float = 0.1
    """The size a summary is planned at, as a share of the room the task framing leaves under the
    limit; the summariser is asked to stay within it, or within the room the task framing and the
    tail kept leave under the trigger when that is less. Only when the task framing and the newest step leave no
    room for a summary (`_summary_plan.MIN_SUMMARY_TOKENS`) is none made (`fit_to_budget` drops
    steps instead, and the step's event says why)."""
    keep_current_run: bool = True
    """Never summarise the run in progress (the tail starts at or before its user prompt), unless the
    view is over the budget's limit (its oldest steps would be dropped otherwise). Set `False` for
    single long runs (coding agents), where only unresolved failures of the run are kept verbatim."""
    role: Literal['user', 'system'] = 'user'
    """Role of the summary. User-role by default: a system prompt in mid-conversation breaks
    prompt caching on several providers."""
    summary_model: Any = None
    """Model for the summariser (a cheaper one); `None`: `context.model` (the profile's `summary_model`,
    else the run's model)."""
    instructions: str | None = None
    """Extra guidance appended to the summariser's instructions (part of the cache key)."""
    timeout: float | None = 60.0
    """Seconds the summariser may take; then the static marker is used."""
    max_part_chars: int = 4_000
    """Characters of one part sent to the summariser; longer parts are clipped in the middle."""
    breaker_threshold: int = 3
    """Consecutive summariser failures after which calls stop for `breaker_cooldown` seconds."""
    breaker_cooldown: float = 300.0
    """Seconds to wait, once the breaker opened, before one probe call."""
    clock: Callable[[], float] = time.monotonic
    """Time source for the circuit breaker (inject a fake one in tests)."""
    cache: SummaryCache = field(default_factory=InMemorySummaryCache)
    """Where summaries are kept by digest; share one cache between profiles to share summaries."""
    ahead: bool = False
    """Summarise ahead, in the background (on in every summarising preset): from `ahead_lead` on,
    the next shrink's summary is written while the model answers, and no request waits for the
    summariser unless its view is over the limit even then (see `ahead_waits`). Needs a profile (its background tasks)
    and a budget; see `pydantic_ai_context.policies.summarize._summary_ahead`."""
    ahead_waits: bool = True
    """With `ahead`: when the view is over the limit even with every summary already made, make the
    summary now, as without `ahead` (the request waits for it), rather than send a view whose
    oldest steps `fit_to_budget` drops until the summary lands. `False`: never wait; the drops say
    "a summary is on its way"."""
    ahead_lead: float = 0.0
    """How early a summary ahead starts. 0: when the view crosses the trigger (the summariser is never
    called where the synchronous path would not call it; the band between the trigger and the limit
    is its time). More: once the view is within this many times the room a shrink leaves for the
    recent steps (the low-water mark less the task framing and the summary) of the limit; started
    there with 1.0 the summary still brings the view back to the low-water mark when it reaches
    the limit. Earlier gives a slow summariser more time, for smaller shrinks and summaries made
    for runs that end before they are needed."""

    _calls: SummaryCalls = field(default_factory=SummaryCalls, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.step_messages < 1:
            raise ValueError(f'step_messages must be >= 1, got {self.step_messages}')
        if self.max_messages < 2:
            raise ValueError(f'max_messages must be >= 2, got {self.max_messages}')
        if self.threshold is not None and not 0 < self.threshold <= 1:
            raise ValueError(f'threshold must be in (0, 1], got {self.threshold}')
        if self.low_water is not None and not 0 < self.low_water < 1:
            raise ValueError(f'low_water must be in (0, 1), got {self.low_water}')
        if not 0 < self.summary_share < 1:
            raise ValueError(f'summary_share must be in (0, 1), got {self.summary_share}')
        if self.ahead_lead < 0:
            raise ValueError(f'ahead_lead must be >= 0, got {self.ahead_lead}')

    # --- deciding ---------------------------------------------------------------------------

    def trigger_tokens(self, context: CompileContext) -> int | None:
        """The token trigger: `max_tokens`, else `threshold` of the limit, else the soft threshold."""
        if self.max_tokens is not None:
            return self.max_tokens
        if context.budget is None:
            return None
        if self.threshold is not None:
            return int(context.budget.limit * self.threshold)
        return context.budget.soft_limit

    def _fires(
        self, messages: Sequence[ModelMessage], context: CompileContext, reading: Reading | None
    ) -> str | None:
        if self.trigger == 'messages':
            if len(messages) > self.max_messages:
                return f'{len(messages)} messages > {self.max_messages}'
            return None
        counter = context.counter
        used = reading.count(0, len(messages), counter) if reading else counter.count_messages(messages)
        if self.max_tokens is None and self.threshold is None and context.budget is not None:
            budget = context.budget.with_used(used)
            return f'{used:,} tokens over the soft threshold' if budget.needs_compaction() else None
        limit = self.trigger_tokens(context)
        if limit is not None and used > limit:
            return f'{used:,} tokens > {limit:,}'
        return None

    def _tail_sizes(self, context: CompileContext) -> tuple[int | None, int | None]:
        if self.keep_tokens is not None or self.keep_messages is not None:
            return self.keep_tokens, self.keep_messages
        if self.trigger == 'messages':
            return None, self.max_messages // 2
        limit = self.trigger_tokens(context)
        return (int(limit * 0.4) if limit is not None else None), 2

    # --- applying -----------------------------------------------------------------------------

    async def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        return await _settled(self, messages, context)

    async def _pass(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        if len(messages) < 3 or not isinstance(messages[-1], ModelRequest):
            return messages
        # What this compile reads of its input, resumed from the previous compile's reading: the
        # trigger's count, the zones, the plan and the block are read off it.
        reading = self._ledger.read(messages, context.counter) if self.trigger == 'tokens' else None
        why = self._fires(messages, context, reading)
        model = self.summary_model if self.summary_model is not None else context.model
        if why is None:
            if self.ahead:  # --- summary ahead (see _summary_ahead) ---
                _summary_ahead.start_if_due(self, messages, None, model, context)
            return messages
        if reading is None:
            reading = self._ledger.read(messages, context.counter)
        zones = find_zones(
            messages, summaries=reading.summaries, cuts=reading.cut_points, spans=reading.run_spans
        )
        if zones is None:
            return _no_summary(messages, context, why, 'nothing between the framing and the recent turns')
        if _fitted_by_a_drop(self._ledger, messages, zones, context):
            return _no_summary(messages, context, why, 'the view was fitted by dropping steps before')
        reuse: tuple[int, str] | None = None
        interim: str | None = None  # summary ahead: a marker while the summary is on its way
        asked: int | None = None
        made_now = False  # summary ahead: over the limit, the summary is made in this request
        made_from_ahead = False  # summary ahead: the reuse or marker stands in for the planned summary
        planned: _summary_plan.Shrink | str | None = None
        if self.plans_by_budget(context):
            if self.ahead:  # --- summary ahead: file what landed under this view's keys ---
                _summary_ahead.adopt(self, messages, zones, model, context)
            planned = _plan_shrink(self, messages, zones, model, context)
            if isinstance(planned, str):
                return _no_summary(messages, context, why, planned)
            end, reuse, asked = planned.end, planned.reuse, planned.asked
            if self.ahead and reuse is not None:  # --- summary ahead: the next one, in time ---
                _summary_ahead.start_if_due(self, messages, zones, model, context)
                held = _summary_ahead.interim_held(self, messages, zones, reuse, model, context)
                if held is not None:
                    end, interim = held.end, held.text
            elif self.ahead:  # --- summary ahead: no wait while the view fits ---
                instead = await _summary_ahead.instead_of_waiting(self, messages, zones, model, context)
                made_now = instead is None
                if instead == _summary_ahead.KEEP:
                    return _no_summary(messages, context, why, 'the summary made ahead has not landed yet')
                if isinstance(instead, _summary_ahead.Interim):
                    end, interim = instead.end, instead.text
                elif instead is not None:
                    end, reuse = instead[0], instead
                made_from_ahead = True
        else:
            end = _summary_plan.span_end(
                messages,
                zones,
                context,
                tail_sizes=self._tail_sizes(context),
                keep_current_run=self.keep_current_run,
                step_messages=self.step_messages,
            )
        shortcut = self.ahead and (interim is not None or (reuse is not None and made_from_ahead))
        plan = _Plan(end, reuse, interim, asked, made_now)
        out, end = await _summarised(
            self, messages, zones, reading, plan, why, model, context, settle=not shortcut
        )
        if not shortcut:
            return out
        if (
            self.ahead_waits
            and isinstance(planned, _summary_plan.Shrink)
            and context.budget is not None
            and context.counter.count_messages(out) > context.budget.limit
        ):
            # The ahead path's projection (the framing, the text, the tail, what a summary keeps)
            # is a few tokens off the block it builds; counted, this view is over the limit: the
            # summary is made now, as `instead_of_waiting` does for a view projected over it.
            await _summary_ahead.give_up_in_flight(self, zones, context)
            context._take_notes()
            plan = _Plan(planned.end, planned.reuse, None, planned.asked, True)
            return (await _summarised(self, messages, zones, reading, plan, why, model, context))[0]
        if out is not messages:
            _summary_ahead.settle(self, messages, zones, end, model, context)
        return out

    # --- what the planning and the summaries made ahead ask (see `_summary_ahead.AheadPolicy`) ---

    @property
    def ledger(self) -> SummaryLedger:
        """What this policy keeps between compiles: its counts, message digests and cache keys."""
        return self._ledger

    def plans_by_budget(self, context: CompileContext) -> bool:
        """Whether a shrink is planned by the budget (to the low-water mark) rather than by tail size."""
        return (
            self.trigger == 'tokens'
            and self.low_water is not None
            and context.budget is not None
            and self.keep_tokens is None
            and self.keep_messages is None
        )

    def summary_tokens(self, context: CompileContext, zones: Zones) -> int | None:
        """The size the summariser is asked to stay within: `summary_share` of the room the task
        framing leaves under the limit (it depends on the budget and the head alone)."""
        if context.budget is None:
            return None
        room = context.budget.limit - context.counter.count_messages(zones.head)
        return max(int(room * self.summary_share), _MIN_SUMMARY_TOKENS)

    def kept(
        self, messages: Sequence[ModelMessage], zones: Zones, context: CompileContext
    ) -> Callable[[int], int]:
        """The tokens a summary of `messages[zones.start:end]` keeps verbatim beside it, by `end`
        (see `_summary_block.KeptTokens`): a plan counts them with the tail."""
        # This compile's reading (reading the list again would start a new one, and what was
        # worked out on this one, such as span hashes, would be worked out again).
        reading = self._ledger.reading_of(messages) or self._ledger.read(messages, context.counter)
        return self._kept.of(
            messages,
            zones.start,
            reading,
            lambda: current_prompt(messages, run_id=context.run_id),
            context.counter,
            run_id=context.run_id,
        )

    def key_template(self, previous: str | None, model: Any, size: int | None) -> tuple[str, str]:
        """The cache key's payload around the span's digest (see `_summary_reading.key_template`)."""
        return key_template(
            previous, model, size, instructions=self.instructions, max_part_chars=self.max_part_chars
        )

    def key(
        self,
        messages: Sequence[ModelMessage],
        start: int,
        end: int,
        previous: str | None,
        model: Any,
        size: int | None,
    ) -> str:
        """The cache key of the summary of `messages[start:end]` after the summary digested `previous`."""
        return self._ledger.keys_from(messages, start, self.key_template(previous, model, size))(end)

    def candidates(
        self,
        messages: Sequence[ModelMessage],
        zones: Zones,
        context: CompileContext,
        *,
        enter_run: bool = False,
        fine: bool = False,
    ) -> list[int]:
        """Where the summarised span may end (see `_summary_plan.candidates`); with `fine`, followed
        by the cuts off the step grid up to the newest step (`_summary_plan.fine_ends`)."""
        return _summary_plan.candidates(
            self._ledger,
            messages,
            zones,
            context,
            step_messages=self.step_messages,
            keep_current_run=self.keep_current_run,
            enter_run=enter_run,
            fine=fine,
        )

    def walk_chain(
        self,
        messages: Sequence[ModelMessage],
        zones: Zones,
        ends: Sequence[int],
        model: Any,
        size: int | None,
    ) -> tuple[int, str | None, str | None]:
        """Where the chain of cached summaries stops, its text and digest (see `_summary_plan.walk_chain`)."""

        def keys_from(start: int, previous_digest: str | None) -> Callable[[int], str]:
            return self._ledger.keys_from(messages, start, self.key_template(previous_digest, model, size))

        def missed(start: int, previous_digest: str | None) -> set[int] | None:
            template = self.key_template(previous_digest, model, size)
            return self._ledger.missed(messages, start, template, self.cache)

        near = _summary_plan.near_cuts(self._ledger.cut_points(messages), ends, self.step_messages)
        return _summary_plan.walk_chain(self.cache, zones, ends, keys_from, missed, near)

    async def summary(
        self,
        messages: Sequence[ModelMessage],
        zones: Zones,
        end: int,
        model: Any,
        context: CompileContext,
        why: str,
        *,
        asked: int | None = None,
    ) -> tuple[str, str]:
        """The text of the summary covering the log up to `end`, and 'summary' or 'fallback';
        `asked`: the size to ask for when less than `summary_tokens` (a short tail's room)."""
        return await self._calls.summary(self, messages, zones, end, model, context, why, asked=asked)


_MAX_PASSES: Final = 8
"""Passes of one compile when summaries made ahead are made in it (see `_settled`)."""


async def _settled(
    policy: SummarizeWindow, messages: list[ModelMessage], context: CompileContext
) -> list[ModelMessage]:
    """The view of `messages` once no pass makes a summary in the compile.

    A summary made in the compile (summaries made ahead, a view over the limit) lands in the cache,
    and a profile compiling this log afresh would start from it: the next pass does, so that the view
    stays a function of the log, the budget and the cache (DESIGN section 1). The passes' notes are
    kept (their summariser usage summed)."""
    registry = context.background
    if registry is not None:
        registry.made_in_compile()
    view = await policy._pass(messages, context)
    for _ in range(_MAX_PASSES - 1):
        if registry is None or not registry.made_in_compile():
            break
        notes, details = context._take_notes()
        view = await policy._pass(messages, context)
        again, more = context._take_notes()
        for name, value in more.items():
            earlier = details.get(name)
            summed = isinstance(value, int) and isinstance(earlier, int) and name.startswith('summary_')
            details[name] = earlier + value if summed else value
        context.note('; '.join(n for n in (notes, again) if n), **details)
    return view


def _plan_shrink(
    policy: SummarizeWindow,
    messages: Sequence[ModelMessage],
    zones: Zones,
    model: Any,
    context: CompileContext,
) -> _summary_plan.Shrink | str:
    """The end of the span to summarise, the cached summary to reuse for it (if any) and the size
    to ask for (see `_summary_plan.shrink_end`); else why no summary is planned."""
    budget = context.budget
    assert budget is not None
    assert policy.low_water is not None
    grid = len(policy.candidates(messages, zones, context))
    candidates = policy.candidates(messages, zones, context, fine=True)
    if not candidates:
        return _nothing_to_summarise(policy.keep_current_run)
    size = policy.summary_tokens(context, zones)
    start, previous, _ = policy.walk_chain(messages, zones, candidates, model, size)
    high = policy.trigger_tokens(context) or budget.limit
    return _summary_plan.shrink_end(
        policy.ledger,
        messages,
        zones,
        context,
        candidates,
        (start, previous),
        size or 0,
        high,
        policy.low_water,
        grid,
        kept=policy.kept(messages, zones, context),
    )


@dataclass(frozen=True)
class _Plan:
    """What a pass settled on: the span's end, the cached summary or interim marker standing for it,
    the size to ask for, and whether the summary is made in this request."""

    end: int
    reuse: tuple[int, str] | None
    interim: str | None
    asked: int | None
    made_now: bool


async def _summarised(
    policy: SummarizeWindow,
    messages: list[ModelMessage],
    zones: Zones,
    reading: Reading,
    plan: _Plan,
    why: str,
    model: Any,
    context: CompileContext,
    *,
    settle: bool = True,
) -> tuple[list[ModelMessage], int]:
    """The view with the span up to `plan.end` replaced by its summary block, and where the span
    ended (a kept response may move it back). `settle`: note the usage of the summaries made ahead
    the block uses (`_summary_ahead.settle`)."""
    end, reuse, interim, asked, made_now = plan.end, plan.reuse, plan.interim, plan.asked, plan.made_now
    unresolved = reading.unresolved_failures()
    prompt_at = current_prompt(messages, run_id=context.run_id)  # the task at hand stays verbatim
    kept = _kept(messages, zones.start, end, unresolved, reading, prompt_at)
    while (
        kept.loose_response_at is not None and isinstance(messages[end], ModelResponse) and end > zones.start
    ):
        # A kept response part with no call to pair with cannot sit before a tail that starts with a
        # response; leave that message in the tail instead.
        end = max([c for c in safe_cut_points(messages) if zones.start <= c <= kept.loose_response_at])
        kept = _kept(messages, zones.start, end, unresolved, reading, prompt_at)
    if end <= zones.start:
        return _no_summary(messages, context, why, 'nothing new to summarise before the recent turns'), end
    if interim is not None:
        text, status = interim, 'fallback'
    elif reuse is not None and reuse[0] == end:
        covered = zones.log_index(end) - zones.head_log
        context.note(f'{why}: reused the cached summary of {covered} messages', summary_calls=0)
        text, status = reuse[1], 'summary'
    else:
        started, filed = time.perf_counter(), policy._calls.filed
        text, status = await policy.summary(messages, zones, end, model, context, why, asked=asked)
        if made_now and context.background is not None:
            context.background.waited(time.perf_counter() - started, filed=policy._calls.filed > filed)
    if policy.ahead and settle:  # --- summary ahead: report the usage of the summaries made ahead ---
        _summary_ahead.settle(policy, messages, zones, end, model, context)
    earlier = earlier_ref(messages, zones.start)
    view = assemble_block(
        messages,
        zones,
        end,
        kept,
        text,
        status,
        policy.role,
        originals=context.originals,
        ref=reading.span_ref(zones.start, end, earlier),
        observations=reading.observations[end] - reading.observations[zones.start],
        reuse=policy._block,
        reading=reading,
    )
    return view, end


def _no_summary(
    messages: list[ModelMessage], context: CompileContext, why: str, reason: str
) -> list[ModelMessage]:
    """Say why the step fired and wrote or used no summary (DESIGN invariant 14): the note becomes
    a `CompactionEvent` whose `no_summary` is `reason`, though the view is unchanged."""
    context.note(f'{why}: no summary: {reason}', no_summary=reason)
    return messages


def _nothing_to_summarise(keep_current_run: bool) -> str:
    if keep_current_run:
        return 'no whole step to summarise before the run in progress (kept while the view fits)'
    return 'no whole step to summarise between the task framing and the newest step'


def _fitted_by_a_drop(
    ledger: SummaryLedger, messages: Sequence[ModelMessage], zones: Zones, context: CompileContext
) -> bool:
    """The input is a view `fit_to_budget` already fitted by dropping the steps after the summary
    (or the head), because no summary made it fit: a view of that view keeps it as it is.

    Only views carry a drop note (a log never does), so a view compiled again (or a history a
    destructive mode replaced) stays the same view until it is over the limit again; without
    this, the smaller dropped view let a summary plan that the log had not, and a view of the
    view differed from it (found by the idempotence property test).
    """
    budget = context.budget
    return (
        budget is not None
        and zones.start < len(messages)
        # The note opens the dropped stretch, or is merged into a request of the head (a pinned
        # first request and the note make one request).
        and any(drop_record(m) is not None for m in messages[: zones.start + 1])
        and ledger.count(messages, 0, len(messages), context.counter) <= budget.limit
    )


def _kept(
    messages: Sequence[ModelMessage],
    start: int,
    end: int,
    unresolved: set[str],
    reading: Reading,
    prompt_at: int | None,
) -> Kept:
    """`kept_in` of the span, reading only the messages that may keep something (and the current prompt)."""
    return kept_in(
        messages, start, end, unresolved, candidates=reading.may_keep(start, end), prompt_at=prompt_at
    )


def summarize_window(**settings: Any) -> SummarizeWindow:
    """Build a `SummarizeWindow` policy; see its attributes for the settings.

    Example:
        ```python
        from pydantic_ai_context.policies.summarize import summarize_window

        policy = summarize_window(trigger='messages', max_messages=40, summary_model='openai:gpt-4o-mini')
        assert policy.name == 'summarize_window'
        ```
    """
    return SummarizeWindow(**settings)
