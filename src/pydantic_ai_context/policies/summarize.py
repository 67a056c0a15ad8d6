"""`summarize_window`: keep the task framing and the recent turns, replace what lies between with a summary.

The one policy that calls a model. The view is cut into three zones:

- **head**, the task framing: system prompts and the first user prompt, through the first run's
  first text answer once that run has finished;
- **middle**, replaced by one summary message written by a separate summariser agent;
- **tail**, the recent turns, sized by tokens or messages, starting at a safe cut point (a tool
  call and its result are never split).

The end of the summarised span falls on whole steps of `step_messages` counted from the head, so
it depends on the log alone. Under a budget a summary shrinks the view to a low-water mark and is
reused (from the cache, where summaries are kept by a digest of what they cover) until the view
is over the trigger again: one summary per shrink, each an incremental update of the previous
one, so the prompt prefix changes once per shrink. Whatever happens to the summariser (error,
timeout, rate limit, an empty, inflated or oversized answer), the view is still produced: a
static marker says how many messages were left out. The canonical log is never touched.

The summariser call (prompt, transcript, timeout, circuit breaker) is in `summariser.py`, the
summary cache in `summary_cache.py`.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
)
from pydantic_core import PydanticSerializationError

from pydantic_ai_context import _markers, _parts
from pydantic_ai_context._memo import ObjectMemo
from pydantic_ai_context._prefix import first_difference
from pydantic_ai_context._scope import active_generation
from pydantic_ai_context.budget import resolve_context_window
from pydantic_ai_context.integrity import safe_cut_points
from pydantic_ai_context.policies import _summary_ahead
from pydantic_ai_context.policies._base import AsyncPolicy
from pydantic_ai_context.policies._frontier import counter_key, unresolved_failures
from pydantic_ai_context.policies._summary_block import (
    ACK_KIND,
    ACK_TEXT,
    KEPT_KIND,
    MARKER_KIND,
    SUMMARY_PREFIX,
    BlockMemo,
    Zones,
    assemble_block,
    digest_text,
    earlier_ref,
    find_zones,
    kept_in,
    may_keep,
    summary_request_part,
)
from pydantic_ai_context.policies.summariser import (
    PROMPT_VERSION,
    SUMMARISER_INSTRUCTIONS,
    CircuitBreaker,
    describe_failure,
    escape_delimiters,
    model_name,
    render_transcript,
    run_summariser,
    summary_prompt,
)
from pydantic_ai_context.policies.summary_cache import InMemorySummaryCache, SummaryCache
from pydantic_ai_context.tokens import TokenCounter, _MessageCounter, message_tokens
from pydantic_ai_context.views import CompileContext, current_run

# The summariser call and the summary cache live in their own modules; their names stay
# importable from here, where they were first published.
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

_MIN_SUMMARY_TOKENS: Final = 200
"""The least a summariser is asked for, however tight the budget."""
_OVERSIZE: Final = 2
"""A summary longer than this many times the size asked for is discarded (the static marker is used)."""
_MIN_TAIL_SHARE: Final = 0.1
"""Share of the limit the recent steps need beside the task framing and a summary for a summary to be
worth making."""
_MIN_PART_CHARS: Final = 250
"""The shortest clip of one part when a transcript is cut down to fit the summariser's window."""
_PROMPT_FRAMING_TOKENS: Final = 64
"""Tokens a provider adds around the summariser's instructions and prompt (roles, separators)."""
FALLBACK_TEMPLATE: Final = (
    '[pydantic-ai-context: {n} earlier {messages} removed to fit the context window; '
    'a summary could not be produced]'
)

# --- the policy --------------------------------------------------------------------------------


@dataclass(kw_only=True)
class SummarizeWindow(AsyncPolicy):
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
    """The size a summary is planned at, as a share of the limit; the summariser is asked to stay
    within it. When even the smallest view a summary can give would not fit the limit, no summary
    is made (`fit_to_budget` drops steps instead)."""
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
    summariser. Needs a profile (its background tasks)
    and a budget; see `pydantic_ai_context.policies._summary_ahead`."""
    ahead_waits: bool = False
    """With `ahead`: when the view is over the limit and no summary has landed yet, wait for the one in
    flight (or make one, as without `ahead`). `False` (the presets, whose `fit_to_budget` follows):
    never wait; the oldest steps are dropped from the views sent until the summary lands."""
    ahead_lead: float = 0.0
    """How early a summary ahead starts. 0: when the view crosses the trigger (the summariser is never
    called where the synchronous path would not call it; the band between the trigger and the limit
    is its time). More: once the view is within this many times the room a shrink leaves for the
    recent steps (the low-water mark less the task framing and the summary) of the limit; started
    there with 1.0 the summary still brings the view back to the low-water mark when it reaches
    the limit. Earlier gives a slow summariser more time, for smaller shrinks and summaries made
    for runs that end before they are needed."""

    _breaker: CircuitBreaker = field(default_factory=CircuitBreaker, init=False, repr=False, compare=False)
    _digests: ObjectMemo[str] = field(default_factory=ObjectMemo[str], init=False, repr=False, compare=False)
    _reading: _Reading | None = field(default=None, init=False, repr=False, compare=False)
    _block: BlockMemo = field(default_factory=BlockMemo, init=False, repr=False, compare=False)
    _steps: dict[bool, _StepEnds] = field(
        default_factory=dict[bool, '_StepEnds'], init=False, repr=False, compare=False
    )
    _log_digests: _summary_ahead.LogDigests = field(
        default_factory=_summary_ahead.LogDigests, init=False, repr=False, compare=False
    )
    _oversized: tuple[str, int | None, int | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

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

    def _trigger_tokens(self, context: CompileContext) -> int | None:
        if self.max_tokens is not None:
            return self.max_tokens
        if context.budget is None:
            return None
        if self.threshold is not None:
            return int(context.budget.limit * self.threshold)
        return context.budget.soft_limit

    def _fires(self, messages: Sequence[ModelMessage], context: CompileContext) -> str | None:
        if self.trigger == 'messages':
            if len(messages) > self.max_messages:
                return f'{len(messages)} messages > {self.max_messages}'
            return None
        used = context.counter.count_messages(messages)
        if self.max_tokens is None and self.threshold is None and context.budget is not None:
            budget = context.budget.with_used(used)
            return f'{used:,} tokens over the soft threshold' if budget.needs_compaction() else None
        limit = self._trigger_tokens(context)
        if limit is not None and used > limit:
            return f'{used:,} tokens > {limit:,}'
        return None

    def _tail_sizes(self, context: CompileContext) -> tuple[int | None, int | None]:
        if self.keep_tokens is not None or self.keep_messages is not None:
            return self.keep_tokens, self.keep_messages
        if self.trigger == 'messages':
            return None, self.max_messages // 2
        limit = self._trigger_tokens(context)
        return (int(limit * 0.4) if limit is not None else None), 2

    def _span_end(self, messages: Sequence[ModelMessage], zones: Zones, context: CompileContext) -> int:
        """Input index where the tail starts (== `zones.start` when there is nothing new to summarise)."""
        n = len(messages)
        cuts = [c for c in safe_cut_points(messages) if zones.start < c < n]
        if not cuts:
            return zones.start
        keep_tokens, keep_messages = self._tail_sizes(context)
        limit = n
        if self.keep_current_run:
            run = current_run(messages, run_id=context.run_id)
            if run is not None:
                limit = run.start
        # The latest cut whose tail is big enough ...
        ideal = zones.start
        tail_tokens = 0
        counted = n
        for c in reversed(cuts):
            while counted > c:
                counted -= 1
                if keep_tokens is not None:
                    tail_tokens += message_tokens(context.counter, messages[counted])
            if (keep_messages is None or n - c >= keep_messages) and (
                keep_tokens is None or tail_tokens >= keep_tokens
            ):
                ideal = c
                break
        ideal = min(ideal, limit)
        # ... moved back to a whole step from the head, in log positions, so it depends on the log alone.
        steps = (zones.log_index(ideal) - zones.head_log) // self.step_messages
        quantised = zones.input_index(zones.head_log + steps * self.step_messages)
        return max([c for c in cuts if c <= quantised], default=zones.start)

    def _step_ends(self, messages: Sequence[ModelMessage], zones: Zones, end: int) -> list[int]:
        """Every earlier step end between the start and `end`: where cached summaries may stop."""
        cuts = [c for c in safe_cut_points(messages) if zones.start < c <= end]
        ends: set[int] = set()
        first = (zones.log_index(zones.start) - zones.head_log) // self.step_messages + 1
        last = (zones.log_index(end) - zones.head_log) // self.step_messages
        for k in range(first, last + 1):
            target = zones.input_index(zones.head_log + k * self.step_messages)
            at = bisect.bisect_right(cuts, target)
            if at:
                ends.add(cuts[at - 1])
        ends.add(end)
        return sorted(ends)

    # --- digests ------------------------------------------------------------------------------

    def _message_digest(self, message: ModelMessage) -> str:
        found = self._digests.get(message)
        if found is None:
            try:
                dumped = ModelMessagesTypeAdapter.dump_json([message], warnings=False)
            except PydanticSerializationError:
                # A lone surrogate (a tool that decoded bytes with `surrogateescape`) has no UTF-8 form.
                python = ModelMessagesTypeAdapter.dump_python([message], warnings=False)
                dumped = repr(python).encode('utf-8', 'surrogatepass')
            found = self._digests.put(message, hashlib.sha256(dumped).hexdigest(), size=64)
        return found

    def _key(
        self,
        messages: Sequence[ModelMessage],
        start: int,
        end: int,
        previous: str | None,
        model: Any,
        size: int | None,
    ) -> str:
        return self._keys(messages, start, [end], previous, model, size)[end]

    def _keys(
        self,
        messages: Sequence[ModelMessage],
        start: int,
        ends: Sequence[int],
        previous: str | None,
        model: Any,
        size: int | None,
    ) -> dict[int, str]:
        """The cache key of the span from `start` to each of `ends`."""
        template = self._key_template(previous, model, size)
        return {end: self._key_of(messages, start, end, template) for end in ends}

    def _key_template(self, previous: str | None, model: Any, size: int | None) -> tuple[str, str]:
        """The cache key's JSON payload before and after the span's digest (keys sorted: the same
        text `json.dumps(payload, sort_keys=True)` gives)."""
        payload = {
            'version': PROMPT_VERSION,
            'model': model_name(model),
            'instructions': self.instructions or '',
            'max_part_chars': self.max_part_chars,
            'previous': previous or '',
            'span': '@',
            'size': size or 0,
        }
        # A quote never appears unescaped inside a JSON string, so '"@"' is the span's value only.
        before, after = json.dumps(payload, sort_keys=True).split('"@"')
        return before, after

    def _key_of(
        self, messages: Sequence[ModelMessage], start: int, end: int, template: tuple[str, str]
    ) -> str:
        return self._keys_from(messages, start, template)(end)

    def _keys_from(
        self, messages: Sequence[ModelMessage], start: int, template: tuple[str, str]
    ) -> Callable[[int], str]:
        """The cache key of the span from `start` to a given end (kept in the reading when it is of
        `messages`: a walk down the chain asks for the same keys at every compile)."""
        reading = self._reading
        if reading is not None and reading.reads(messages):
            known = reading.keys_from(start, template)

            def kept(end: int) -> str:
                found = known.get(end)
                if found is None:
                    span = reading.span_digest(start, end, self._message_digest)
                    found = known[end] = _cache_key(template, span)
                return found

            return kept

        def key(end: int) -> str:
            running = hashlib.sha256()
            for i in range(start, end):
                running.update(self._message_digest(messages[i]).encode())
            return _cache_key(template, running.hexdigest())

        return key

    # --- applying -----------------------------------------------------------------------------

    async def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        if len(messages) < 3 or not isinstance(messages[-1], ModelRequest):
            return messages
        why = self._fires(messages, context)
        model = self.summary_model if self.summary_model is not None else context.model
        if why is None:
            if self.ahead:  # --- summary ahead (see _summary_ahead) ---
                _summary_ahead.start_if_due(self, messages, None, model, context)
            return messages
        reading = self._read(messages, context)
        zones = find_zones(messages, summaries=reading.summaries, cuts=reading.cut_points)
        if zones is None:
            return messages
        reuse: tuple[int, str] | None = None
        interim: str | None = None  # summary ahead: a marker while the summary is on its way
        if self._plans_by_budget(context):
            if self.ahead:  # --- summary ahead: file what landed under this view's keys ---
                _summary_ahead.adopt(self, messages, zones, model, context)
            planned = self._plan_shrink(messages, zones, model, context)
            if planned is None:
                return messages
            end, reuse = planned
            if self.ahead and reuse is not None:  # --- summary ahead: the next one, in time ---
                _summary_ahead.start_if_due(self, messages, zones, model, context)
                held = _summary_ahead.interim_held(self, messages, zones, reuse, model, context)
                if held is not None:
                    end, interim = held.end, held.text
            elif self.ahead:  # --- summary ahead: no wait while the view fits ---
                instead = await _summary_ahead.instead_of_waiting(self, messages, zones, model, context)
                if instead == _summary_ahead.KEEP:
                    return messages
                if isinstance(instead, _summary_ahead.Interim):
                    end, interim = instead.end, instead.text
                elif instead is not None:
                    end, reuse = instead[0], instead
        else:
            end = self._span_end(messages, zones, context)
        unresolved = unresolved_failures(messages)
        kept = kept_in(messages, zones.start, end, unresolved, candidates=reading.may_keep(zones.start, end))
        while (
            kept.loose_response_at is not None
            and isinstance(messages[end], ModelResponse)
            and end > zones.start
        ):
            # A kept response part with no call to pair with cannot sit before a tail that starts with a
            # response; leave that message in the tail instead.
            end = max([c for c in safe_cut_points(messages) if zones.start <= c <= kept.loose_response_at])
            kept = kept_in(
                messages, zones.start, end, unresolved, candidates=reading.may_keep(zones.start, end)
            )
        if end <= zones.start:
            return messages
        if interim is not None:
            text, status = interim, 'fallback'
        elif reuse is not None and reuse[0] == end:
            covered = zones.log_index(end) - zones.head_log
            context.note(f'{why}: reused the cached summary of {covered} messages', summary_calls=0)
            text, status = reuse[1], 'summary'
        else:
            text, status = await self._summary(messages, zones, end, model, context, why)
        if self.ahead:  # --- summary ahead: report the usage of the summaries made ahead ---
            _summary_ahead.settle(self, messages, zones, end, model, context)
        earlier = earlier_ref(messages, zones.start)
        return assemble_block(
            messages,
            zones,
            end,
            kept,
            text,
            status,
            self.role,
            originals=context.originals,
            ref=reading.span_ref(zones.start, end, earlier),
            observations=reading.observations[end] - reading.observations[zones.start],
            reuse=self._block,
        )

    def _read(self, messages: Sequence[ModelMessage], context: CompileContext) -> _Reading:
        """What this compile reads of `messages`, resumed from the previous compile's reading."""
        reading = self._reading = _Reading.of(messages, context.counter, self._reading)
        return reading

    # --- planning a shrink under a budget -----------------------------------------------------

    def _summary_tokens(self, context: CompileContext, zones: Zones) -> int | None:
        """The size the summariser is asked to stay within: `summary_share` of the room the task
        framing leaves under the limit (it depends on the budget and the head alone)."""
        if context.budget is None:
            return None
        room = context.budget.limit - context.counter.count_messages(zones.head)
        return max(int(room * self.summary_share), _MIN_SUMMARY_TOKENS)

    def _plans_by_budget(self, context: CompileContext) -> bool:
        return (
            self.trigger == 'tokens'
            and self.low_water is not None
            and context.budget is not None
            and self.keep_tokens is None
            and self.keep_messages is None
        )

    def _candidates(
        self,
        messages: Sequence[ModelMessage],
        zones: Zones,
        context: CompileContext,
        *,
        enter_run: bool = False,
    ) -> list[int]:
        """Where the summarised span may end: safe cut points on whole steps from the head (in log
        positions, so they depend on the log alone), before the current run when it is kept.

        A kept current run is entered only when the view is over the budget's limit: its oldest
        steps would be dropped by `fit_to_budget` otherwise, and a summary of them keeps more.
        """
        n = len(messages)
        limit = n - 1
        over_limit = (
            context.budget is not None and self._count(messages, 0, n, context) > context.budget.limit
        )
        if self.keep_current_run and not (over_limit or enter_run):  # enter_run: a summary ahead
            run = current_run(messages, run_id=context.run_id)
            if run is not None:
                limit = min(limit, run.start)
        reading = self._reading
        every = (
            reading.cut_points()
            if reading is not None and reading.reads(messages)
            else safe_cut_points(messages)
        )
        cuts = every[bisect.bisect_right(every, zones.start) : bisect.bisect_right(every, limit)]
        if not cuts:
            return []
        params = (zones.start, zones.start_log, zones.head_log, self.step_messages)
        # Kept apart for the lists that stop before the current run and the ones that do not.
        steps = self._steps.setdefault(limit == n - 1, _StepEnds())
        return steps.ends(cuts, params, zones)

    def _plan_shrink(
        self, messages: Sequence[ModelMessage], zones: Zones, model: Any, context: CompileContext
    ) -> tuple[int, tuple[int, str] | None] | None:
        """The end of the span to summarise, and the cached summary to reuse for it (if any).

        The cached summary reaching furthest is reused while the view it gives stays within the
        trigger; past that, a new span end is chosen so that the view shrinks to the low-water
        mark. None when no summary could make the view fit the limit.
        """
        budget = context.budget
        assert budget is not None
        assert self.low_water is not None
        candidates = self._candidates(messages, zones, context)
        if not candidates:
            return None
        counter = context.counter
        suffix = self._suffix_tokens(messages, candidates[0], context)
        # The head, the summary's framing and acknowledgement, whatever the summary does not replace.
        fixed = counter.count_messages(zones.head) + counter.count_text(SUMMARY_PREFIX + ACK_TEXT) + 8
        high = self._trigger_tokens(context) or budget.limit
        start, previous, _ = self._walk_chain(
            messages, zones, candidates, model, self._summary_tokens(context, zones)
        )
        if (
            previous is not None
            and start > zones.start
            and fixed + counter.count_text(previous) + suffix[start] <= high
        ):
            return start, (start, previous)
        asked = self._summary_tokens(context, zones) or 0
        if high - fixed - asked < budget.limit * _MIN_TAIL_SHARE:
            # The task framing and a summary leave (next to) no room for the recent steps: a
            # summary would be dropped again at once. Leave the steps to fit_to_budget.
            return None
        # The low-water mark is for what stays beside the summary: the summary's own size is what
        # the previous one took, or half the size asked for.
        planned = counter.count_text(previous) if previous is not None else asked // 2
        low = int(budget.limit * self.low_water)
        reachable = [e for e in candidates if e > start] or candidates[-1:]
        for end in reachable:
            if fixed + planned + suffix[end] <= low:
                return end, None
        if fixed + asked + suffix[reachable[-1]] > budget.limit:
            return None  # no summary makes it fit: better leave the steps to fit_to_budget
        return reachable[-1], None

    def _count(self, messages: Sequence[ModelMessage], start: int, end: int, context: CompileContext) -> int:
        """`count_messages(messages[start:end])`, from this compile's reading when it is of `messages`."""
        reading = self._reading
        if reading is not None and reading.reads(messages):
            return reading.count(start, end, context.counter)
        return context.counter.count_messages(messages[start:end])

    def _suffix_tokens(
        self, messages: Sequence[ModelMessage], first: int, context: CompileContext
    ) -> _Suffix | list[int]:
        """`message_tokens` of `messages[i:]` for each `i` from `first` on."""
        reading = self._reading
        if reading is not None and reading.reads(messages):
            return _Suffix(reading.totals)
        suffix = [0] * (len(messages) + 1)
        for i in range(len(messages) - 1, first - 1, -1):
            suffix[i] = suffix[i + 1] + message_tokens(context.counter, messages[i])
        return suffix

    def _walk_chain(
        self,
        messages: Sequence[ModelMessage],
        zones: Zones,
        ends: Sequence[int],
        model: Any,
        size: int | None,
    ) -> tuple[int, str | None, str | None]:
        """Follow the cached incremental summaries from the span's start as far as they go.

        Returns where the chain stops, its summary text and that text's digest (the start and the
        summary already in the view when nothing is cached).
        """
        start, previous, previous_digest = zones.start, zones.previous, zones.previous_digest
        while True:
            key = self._keys_from(messages, start, self._key_template(previous_digest, model, size))
            found: tuple[int, str] | None = None
            for candidate in sorted((e for e in ends if e > start), reverse=True):
                text = self.cache.get(key(candidate))
                if text:
                    found = (candidate, text)
                    break
            if found is None:
                return start, previous, previous_digest
            start, previous = found
            previous_digest = digest_text(previous)

    async def _summary(
        self,
        messages: Sequence[ModelMessage],
        zones: Zones,
        end: int,
        model: Any,
        context: CompileContext,
        why: str,
    ) -> tuple[str, str]:
        """The text of the summary covering the log up to `end`, and 'summary' or 'fallback'."""
        # Walk the chain of cached incremental summaries as far as it goes, longest link first.
        size = self._summary_tokens(context, zones)
        start, previous, previous_digest = self._walk_chain(
            messages, zones, self._step_ends(messages, zones, end), model, size
        )
        covered = zones.log_index(end) - zones.head_log
        if start == end and previous is not None:
            context.note(f'{why}: reused the cached summary of {covered} messages', summary_calls=0)
            return previous, 'summary'
        key = self._key(messages, start, end, previous_digest, model, size)
        if self.cache.get(key) == '':
            return self._fallback(
                previous, messages, start, end, zones, context, why, 'summary was rejected before'
            )
        if model is None:
            return self._fallback(previous, messages, start, end, zones, context, why, 'no summary model')
        now = self.clock()
        if not self._breaker.allows(now, self.breaker_cooldown):
            return self._fallback(previous, messages, start, end, zones, context, why, 'circuit breaker open')
        instructions = SUMMARISER_INSTRUCTIONS + (f'\n\n{self.instructions}' if self.instructions else '')
        limit = _summariser_input_limit(context, model, instructions, size)
        # A span whose transcript did not fit this limit in this conversation (same generation of
        # the compiling scope: the log's originals are the same) does not fit now either; rendering
        # it again, at every request, would cost a pass over the whole span.
        oversized = (key, limit, active_generation())
        prompt = (
            None
            if oversized[2] is not None and oversized == self._oversized
            else self._fitted_prompt(messages[start:end], context, previous, size, instructions, model, limit)
        )
        if prompt is None:
            self._oversized = oversized
            return self._fallback(
                previous, messages, start, end, zones, context, why, "transcript over the summariser's window"
            )
        if why == _summary_ahead.AHEAD:  # --- summary ahead: what a cancelled call would have cost ---
            context._details['summary_prompt_tokens'] = context.counter.count_text(prompt)
        try:
            text, input_tokens, output_tokens = await run_summariser(
                model, prompt, instructions=instructions, timeout=self.timeout
            )
        except Exception as exc:  # any failure of the summariser degrades to the marker, never breaks the run
            self._breaker.failure(self.clock(), self.breaker_threshold)
            return self._fallback(
                previous,
                messages,
                start,
                end,
                zones,
                context,
                why,
                f'summariser failed: {describe_failure(exc)}',
            )
        self._breaker.success()
        usage = {
            'summary_calls': 1,
            'summary_input_tokens': input_tokens,
            'summary_output_tokens': output_tokens,
        }
        replaced = context.counter.count_messages(messages[start:end]) + (
            context.counter.count_text(previous) if previous else 0
        )
        tokens = context.counter.count_text(text) if text else 0
        problem = None
        if not text:
            problem = 'empty summary'
        elif tokens >= replaced:
            problem = 'summary not smaller than what it replaces'
        elif size is not None and tokens > size * _OVERSIZE:
            # The summary sits beside the task framing, which fit_to_budget never drops: one far
            # over the room asked for would leave no room for the recent steps.
            problem = f'summary of {tokens:,} tokens, over {_OVERSIZE}x the {size:,} asked for'
        if problem is not None:
            self.cache.put(key, '')
            return self._fallback(previous, messages, start, end, zones, context, why, problem, **usage)
        self.cache.put(key, text)
        context.note(f'{why}: summarised {covered} messages', covers=covered, **usage)
        return text, 'summary'

    def _fitted_prompt(
        self,
        span: Sequence[ModelMessage],
        context: CompileContext,
        previous: str | None,
        size: int | None,
        instructions: str,
        model: Any,
        limit: int | None,
    ) -> str | None:
        """The summariser's prompt for `span`, within what its model accepts; `None` if nothing fits.

        The transcript reads the originals of what the view shortened, so it can be far larger
        than the view: parts are clipped shorter (the facts of each original are still listed),
        then the view's own text stands for the originals, until the prompt fits.
        """
        originals = _shortened_originals(span, context.log)
        max_chars = self.max_part_chars
        while True:
            transcript = render_transcript(span, max_part_chars=max_chars, originals=originals)
            prompt = summary_prompt(transcript, previous_summary=previous, max_tokens=size)
            if limit is None or context.counter.count_text(prompt) <= limit:
                return prompt
            if max_chars > _MIN_PART_CHARS:
                max_chars = max(_MIN_PART_CHARS, max_chars // 2)
            elif originals:
                originals, max_chars = {}, self.max_part_chars
            else:
                return None

    def _fallback(
        self,
        previous: str | None,
        messages: Sequence[ModelMessage],
        start: int,
        end: int,
        zones: Zones,
        context: CompileContext,
        why: str,
        problem: str,
        **usage: int,
    ) -> tuple[str, str]:
        removed = end - start
        line = FALLBACK_TEMPLATE.format(
            n=removed, messages='message was' if removed == 1 else 'messages were'
        )
        context.note(
            f'{why}: {problem}; {removed} messages replaced by a marker', summary_fallback=1, **usage
        )
        return (f'{previous}\n\n{line}' if previous else line), 'fallback'


def _cache_key(template: tuple[str, str], span: str) -> str:
    """The cache key of a span whose digest is `span`, from `SummarizeWindow._key_template`."""
    return hashlib.sha256(f'{template[0]}"{span}"{template[1]}'.encode()).hexdigest()


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


def _summariser_input_limit(
    context: CompileContext, model: Any, instructions: str, size: int | None
) -> int | None:
    """Tokens the summariser's prompt may hold: its model's window less its instructions and answer.

    The run's model has the run's budget window (explicit, or tightened by a provider's rejection);
    a summary model of its own has its own window where one is known, else the run's.
    """
    budget = context.budget
    if budget is None:
        return None
    window = budget.context_window
    if model is not None and model is not getattr(context.run_context, 'model', None):
        own = resolve_context_window(model)
        if own.source != 'default':
            window = own.tokens
    answer = max(size or 0, budget.reserved_output)
    usable = math.floor(window * (1 - budget.safety_margin))
    return usable - answer - context.counter.count_text(instructions) - _PROMPT_FRAMING_TOKENS


def _shortened_originals(span: Sequence[ModelMessage], log: Sequence[ModelMessage]) -> dict[str, Any]:
    """The log's originals of the tool results `span` shows shortened (trimmed, masked), by call id."""
    wanted = {p.tool_call_id for m in span for p in _parts.tool_results(m) if _parts.marker(p) is not None}
    found: dict[str, Any] = {}
    if not wanted:
        return found
    for message in log:
        for part in _parts.tool_results(message):
            if part.tool_call_id in wanted and _parts.marker(part) is None:
                found[part.tool_call_id] = part
    return found


# --- what the policy reads of each message, from one compile to the next --------------------------


@dataclass(eq=False)
class _Running:
    """A running hash over the messages from `start`: its state after each of them."""

    start: int
    seed: Any
    """The state before the first message."""
    states: list[Any] = field(default_factory=list[Any])

    def at(self, end: int, piece: Callable[[int], bytes]) -> Any:
        """The state after `messages[start:end]` (a copy, free to finish)."""
        if end <= self.start:
            return self.seed.copy()
        states = self.states
        if len(states) < end - self.start:
            running = (states[-1] if states else self.seed).copy()
            for i in range(self.start + len(states), end):
                running.update(piece(i))
                states.append(running.copy())
        return states[end - self.start - 1].copy()


@dataclass(eq=False)
class _Suffix:
    """Tokens of `messages[i:]`, from running totals."""

    totals: list[int]

    def __getitem__(self, i: int) -> int:
        return self.totals[-1] - self.totals[i]


_RUNNING_STARTS: Final = 4
"""Running hashes kept per kind (by the span's start): the chain of cached summaries has a few links."""


@dataclass(eq=False)
class _Reading:
    """What `summarize_window` reads of each message of its input, kept from one compile to the next.

    Per message: its tokens (running totals), whether it is a tool-result request (running count),
    whether it carries a summary's marker, whether the summary's block may have to keep something
    of it, its digest; and running hashes of spans (the cache key's digest and the span's ref). The
    next compile of the same conversation (same generation of the compiling scope: no message
    edited in place since) reads only the messages from the first one that changed, so zones,
    plans, keys and refs cost the new messages plus a few passes over plain lists.
    """

    messages: tuple[ModelMessage, ...]
    generation: int | None
    counter: Hashable
    totals: list[int]
    """`message_tokens` of the messages before each one, and of all."""
    observations: list[int]
    """Tool-result requests before each message, and of all."""
    summaries: list[int]
    """Messages that carry a summary's marker."""
    own: list[int]
    """Messages the block may keep something of whatever their neighbours (`may_keep`)."""
    pinned: list[int]
    """Requests that are pinned or hold a pinned result (the response before may keep its calls)."""
    failed: list[int]
    """Requests that hold a failed result (the response before may keep an unresolved call)."""
    instructed: list[int]
    """Requests whose `instructions` are set (`count_messages` counts the newest of a list's once)."""
    exact: bool
    """`count` gives `count_messages` from the totals (the counter's own per-message counts)."""
    digests: list[str] = field(default_factory=list[str])
    """Digests of the first messages (read as the cache keys need them)."""
    keys: dict[Any, _Running] = field(default_factory=dict[Any, _Running])
    """Running hashes of message digests (cache keys), by the span's start."""
    refs: dict[Any, _Running] = field(default_factory=dict[Any, _Running])
    """Running hashes of message signatures (span refs), by the span's start and earlier ref."""
    cache_keys: dict[Any, dict[int, str]] = field(default_factory=dict[Any, dict[int, str]])
    """Cache keys of spans, by the span's start and key template, then by the span's end."""
    instruction_tokens: dict[int, int] = field(default_factory=dict[int, int])
    """Tokens of the instructions of the requests in `instructed`, as read."""
    cuts: list[int] | None = None
    """`safe_cut_points` of the messages, once asked for."""

    @classmethod
    def of(
        cls, messages: Sequence[ModelMessage], counter: TokenCounter, previous: _Reading | None
    ) -> _Reading:
        generation = active_generation()
        key = counter_key(counter)
        same = 0
        if (
            previous is not None
            and generation is not None
            and previous.generation == generation
            and previous.counter == key
        ):
            same = first_difference(previous.messages, messages)
        if previous is None or same == 0:
            reading = cls(
                (), generation, key, [0], [0], [], [], [], [], [], isinstance(counter, _MessageCounter)
            )
        else:
            # A copy: a compile suspended in the summariser call still reads the one it made.
            reading = previous.truncated(same)
        reading._read(messages, counter)
        return reading

    def reads(self, messages: Sequence[ModelMessage]) -> bool:
        """This reading is of `messages` (the list the policy is applied to)."""
        return len(self.messages) == len(messages) and (not messages or self.messages[-1] is messages[-1])

    def truncated(self, n: int) -> _Reading:
        """What this reading holds of its first `n` messages (a new reading: this one is unchanged)."""

        def below(positions: list[int]) -> list[int]:
            return positions[: bisect.bisect_left(positions, n)]

        def kept(runnings: dict[Any, _Running]) -> dict[Any, _Running]:
            return {
                key: _Running(r.start, r.seed, r.states[: n - r.start])
                for key, r in runnings.items()
                if r.start < n
            }

        return _Reading(
            self.messages[:n],
            self.generation,
            self.counter,
            self.totals[: n + 1],
            self.observations[: n + 1],
            below(self.summaries),
            below(self.own),
            below(self.pinned),
            below(self.failed),
            below(self.instructed),
            self.exact,
            self.digests[:n],
            kept(self.keys),
            kept(self.refs),
            {
                key: {end: k for end, k in ends.items() if end <= n}
                for key, ends in self.cache_keys.items()
                if key[0] < n
            },
            {i: t for i, t in self.instruction_tokens.items() if i < n},
        )

    def _read(self, messages: Sequence[ModelMessage], counter: TokenCounter) -> None:
        start = len(self.messages)
        total, count = self.totals[-1], self.observations[-1]
        for i in range(start, len(messages)):
            message = messages[i]
            total += message_tokens(counter, message)
            self.totals.append(total)
            results = _parts.tool_results(message)
            if results:
                count += 1
                if _parts.is_pinned(message) or any(_parts.is_pinned(p) for p in results):
                    self.pinned.append(i)
                if any(_parts.is_failed_result(p) for p in results):
                    self.failed.append(i)
            elif isinstance(message, ModelRequest) and _parts.is_pinned(message):
                self.pinned.append(i)
            if isinstance(message, ModelRequest) and message.instructions is not None:
                self.instructed.append(i)
                self.instruction_tokens[i] = counter.count_message(message) - message_tokens(counter, message)
            self.observations.append(count)
            if (_parts.marker(message) or {}).get('kind') == MARKER_KIND:
                self.summaries.append(i)
            if may_keep(message):
                self.own.append(i)
        self.messages = tuple(messages)

    def may_keep(self, start: int, end: int) -> list[int]:
        """The indices in `[start, end)` the summary's block may keep something of, in order."""
        own = self.own[bisect.bisect_left(self.own, start) : bisect.bisect_left(self.own, end)]
        before = [
            j - 1
            for positions in (self.pinned, self.failed)
            for j in positions[
                bisect.bisect_left(positions, start + 1) : bisect.bisect_left(positions, end + 1)
            ]
        ]
        return sorted({*own, *before}) if before else own

    def count(self, start: int, end: int, counter: TokenCounter) -> int:
        """`counter.count_messages(messages[start:end])`, from the totals: the parts of each message,
        and the instructions of the newest request in the range that has them."""
        if not self.exact:
            return counter.count_messages(self.messages[start:end])
        if end <= start:
            return 0
        tokens = self.totals[end] - self.totals[start]
        at = bisect.bisect_left(self.instructed, end) - 1
        if at >= 0 and self.instructed[at] >= start:
            tokens += self.instruction_tokens[self.instructed[at]]
        return tokens

    def keys_from(self, start: int, template: tuple[str, str]) -> dict[int, str]:
        """The cache keys known of the spans from `start` under `template`, by the span's end."""
        ends = self.cache_keys.get((start, template))
        if ends is None:
            if len(self.cache_keys) >= _RUNNING_STARTS * 2:
                del self.cache_keys[next(iter(self.cache_keys))]
            ends = self.cache_keys[(start, template)] = {}
        return ends

    def cut_points(self) -> list[int]:
        """`safe_cut_points` of the messages (read once per reading)."""
        if self.cuts is None:
            self.cuts = safe_cut_points(self.messages)
        return self.cuts

    def span_digest(self, start: int, end: int, digest: Callable[[ModelMessage], str]) -> str:
        """The hex digest of the messages' digests from `start` to `end` (the cache key's span)."""
        running = self._running(self.keys, start, start, hashlib.sha256)
        messages, digests = self.messages, self.digests

        def piece(i: int) -> bytes:
            while len(digests) <= i:
                digests.append(digest(messages[len(digests)]))
            return digests[i].encode()

        return str(running.at(end, piece).hexdigest())

    def span_ref(self, start: int, end: int, earlier: str | None) -> str:
        """`_markers.span_ref` of the span a summary of `[start, end)` stands for (`earlier` first)."""

        def seed() -> Any:
            h = hashlib.blake2b(digest_size=4)
            if earlier is not None:
                h.update(earlier.encode())
                h.update(b'\x00')
            return h

        running = self._running(self.refs, (start, earlier), start, seed)
        messages = self.messages
        state = running.at(end, lambda i: _markers.message_signature(messages[i]) + b'\x00')
        return 's' + str(state.hexdigest())

    def _running(
        self, runnings: dict[Any, _Running], key: Any, start: int, seed: Callable[[], Any]
    ) -> _Running:
        found = runnings.get(key)
        if found is None:
            if len(runnings) >= _RUNNING_STARTS:
                del runnings[next(iter(runnings))]
            found = runnings[key] = _Running(start, seed())
        return found


@dataclass(eq=False)
class _StepEnds:
    """`SummarizeWindow._candidates` from the safe cut points, kept from one compile to the next.

    The end for step `k` is the last cut at or before the step's target: it depends only on the
    cuts up to that target. When the cuts of the next compile begin with the previous ones (new
    messages add cuts after them), the ends of the steps whose targets lie within the previous
    cuts are kept and only the later steps are placed.
    """

    params: tuple[int, int, int, int] | None = None
    cuts: list[int] = field(default_factory=list[int])
    by_step: list[int | None] = field(default_factory=list[int | None])
    """The end of each step from the first (`None`: no cut at or before its target)."""
    distinct: list[int] = field(default_factory=list[int])
    """How many distinct ends the steps up to each one give."""
    ends_list: list[int] = field(default_factory=list[int])
    """The distinct ends, in order (what `ends` returned last)."""

    def ends(self, cuts: list[int], params: tuple[int, int, int, int], zones: Zones) -> list[int]:
        start, start_log, head_log, step = params
        first = (start_log - head_log) // step + 1
        last = (zones.log_index(cuts[-1]) - head_log) // step
        kept = 0
        old = self.cuts
        if old and params == self.params and len(old) <= len(cuts) and cuts[: len(old)] == old:
            # Steps whose target (`start + head_log - start_log + k * step`) is at or before the
            # previous last cut keep their end.
            within = (old[-1] - start - head_log + start_log) // step
            kept = max(0, min(len(self.by_step), within - first + 1))
        by_step = self.by_step[:kept]
        distinct = self.distinct[:kept]
        ends = self.ends_list[: distinct[-1]] if distinct else []
        at = 0
        for k in range(first + kept, last + 1):
            target = zones.input_index(head_log + k * step)
            at = bisect.bisect_right(cuts, target, at) - 1
            end = cuts[at] if at >= 0 else None
            at = max(at, 0)
            by_step.append(end)
            if end is not None and (not ends or ends[-1] != end):
                ends.append(end)
            distinct.append(len(ends))
        self.params, self.cuts, self.by_step, self.distinct, self.ends_list = (
            params,
            cuts,
            by_step,
            distinct,
            ends,
        )
        return list(ends)
