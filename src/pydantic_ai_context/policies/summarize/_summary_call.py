"""Writing one summary: the summariser call for a span, fitted to its model's window, with its fallbacks.

`SummaryCalls.summary` follows the chain of cached summaries as far as it goes and has the rest
written: `SummaryCalls.write` turns a span (and the summary before it, if any) into the text that stands
for it: it asks the summariser (`summariser.run_summariser`) unless the span was rejected before,
there is no summary model, the circuit breaker is open or the transcript cannot fit the
summariser's window; it checks the answer (not empty, smaller than what it replaces, within
`_OVERSIZE` times the size asked for) and files it, or the rejection, in the summary cache. Every
failure gives the static marker (`FALLBACK_TEMPLATE`), with the earlier summary before it: a
summary never breaks the run.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from pydantic_ai.messages import ModelMessage

from pydantic_ai_context import _parts
from pydantic_ai_context._scope import active_generation
from pydantic_ai_context.budget import resolve_context_window
from pydantic_ai_context.policies.summarize._summary_block import Zones, digest_text
from pydantic_ai_context.policies.summarize._summary_plan import chain_ends
from pydantic_ai_context.policies.summarize._summary_reading import SummaryLedger
from pydantic_ai_context.policies.summarize.summariser import (
    SUMMARISER_INSTRUCTIONS,
    CircuitBreaker,
    describe_failure,
    render_transcript,
    run_summariser,
    summary_prompt,
)
from pydantic_ai_context.policies.summarize.summary_cache import SummaryCache
from pydantic_ai_context.tokens import text_fits
from pydantic_ai_context.views import CompileContext

logger = logging.getLogger('pydantic_ai_context.summarize')

__all__ = ('AHEAD', 'FALLBACK_TEMPLATE', 'SummarisingPolicy', 'SummaryCalls')

AHEAD: Final = 'summarised ahead'
"""The reason a summary made in the background is written for (`SummaryCalls.write`'s `why`)."""
_OVERSIZE: Final = 2
"""A summary longer than this many times the size asked for is discarded (the static marker is used)."""
T = TypeVar('T')

OFF_LOOP_MESSAGES: Final = 2_000
"""Span length (messages) from which the summariser's prompt is rendered and fitted in a worker
thread (as a compile's steps are from `_offload.OFFLOAD_MESSAGES`, the same length)."""

_MIN_PART_CHARS: Final = 250
"""The shortest clip of one part when a transcript is cut down to fit the summariser's window."""
_USAGE: Final = ('summary_calls', 'summary_input_tokens', 'summary_output_tokens')
"""The details a summariser call notes, summed over the links of a chain written at once."""
_PROMPT_FRAMING_TOKENS: Final = 64
"""Tokens a provider adds around the summariser's instructions and prompt (roles, separators)."""
FALLBACK_TEMPLATE: Final = (
    '[pydantic-ai-context: {n} earlier {messages} removed to fit the context window; '
    'a summary could not be produced]'
)


class SpanSummaries(Protocol):
    """What both writing a summary and summarising ahead read of the policy: its cache, where
    spans may end, the size it asks for, the cache key of a span, the chain of cached summaries
    and the ledger of what it keeps between compiles."""

    @property
    def cache(self) -> SummaryCache: ...
    @property
    def ledger(self) -> SummaryLedger: ...
    @property
    def step_messages(self) -> int: ...
    def summary_tokens(self, context: CompileContext, zones: Zones) -> int | None: ...
    def key(
        self,
        messages: Sequence[ModelMessage],
        start: int,
        end: int,
        previous: str | None,
        model: Any,
        size: int | None,
    ) -> str: ...
    def walk_chain(
        self,
        messages: Sequence[ModelMessage],
        zones: Zones,
        ends: Sequence[int],
        model: Any,
        size: int | None,
    ) -> tuple[int, str | None, str | None]: ...


class SummarisingPolicy(SpanSummaries, Protocol):
    """What writing a summary reads of its policy (`SummarizeWindow` is one) besides
    `SpanSummaries`: its instructions, timeout and circuit breaker."""

    @property
    def instructions(self) -> str | None: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def max_part_chars(self) -> int: ...
    @property
    def breaker_threshold(self) -> int: ...
    @property
    def breaker_cooldown(self) -> float: ...
    @property
    def clock(self) -> Callable[[], float]: ...


@dataclass(eq=False)
class SummaryCalls:
    """One policy's calls to its summariser: the circuit breaker, and the span last found too
    large for the summariser's window."""

    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    oversized: tuple[str, int | None, int | None] | None = None
    unsplit: tuple[Any, int] | None = None
    """The oversized span (as `oversized`) for which no shorter link fit either."""
    filed: int = 0
    """Summaries (and rejections) these calls filed in the cache: a compile that filed one is
    compiled again from the cache when it summarised ahead (`summarize._settled`)."""

    async def summary(
        self,
        policy: SummarisingPolicy,
        messages: Sequence[ModelMessage],
        zones: Zones,
        end: int,
        model: Any,
        context: CompileContext,
        why: str,
        *,
        asked: int | None = None,
    ) -> tuple[str, str]:
        """The text of the summary covering the log up to `end`, and 'summary' or 'fallback'.

        `asked`: the size the summariser is asked for when less than the policy's
        (`summary_tokens`, which stays in the cache key: the key names the span and the chain
        before it, and a smaller summary serves wherever a larger one would)."""
        # Walk the chain of cached incremental summaries as far as it goes, longest link first.
        size = policy.summary_tokens(context, zones)
        ends = chain_ends(messages, zones, end, policy.step_messages, policy.ledger.cut_points(messages))
        start, previous, previous_digest = policy.walk_chain(messages, zones, ends, model, size)
        covered = zones.log_index(end) - zones.head_log
        if start == end and previous is not None:
            context.note(f'{why}: reused the cached summary of {covered} messages', summary_calls=0)
            return previous, 'summary'
        asked_size = size if asked is None or size is None else min(size, asked)
        usage = dict.fromkeys(_USAGE, 0)
        links = 0
        while True:
            # A span whose transcript is over the summariser's window is written as a chain of
            # shorter links, each ending where a cached chain may stop (so later compiles walk
            # it), each summarising the one before: never one marker for the whole span.
            shorter = [e for e in ends if start < e < end]
            link_end, prompt = end, None
            for key in _USAGE:
                context._details.pop(key, None)
            text, status = await self.write(
                policy,
                messages[start:end],
                key=policy.key(messages, start, end, previous_digest, model, size),
                previous=previous,
                size=asked_size,
                covered=covered,
                model=model,
                context=context,
                why=why,
                oversized_ok=bool(shorter),
            )
            if status == 'oversized':
                tried = (self.oversized, len(shorter))
                found = None
                if tried != self.unsplit:
                    found = await _off_loop_if_long(
                        shorter[-1] - start,
                        self._longest_fitting,
                        policy,
                        messages,
                        start,
                        shorter,
                        previous,
                        asked_size,
                        context,
                        model,
                    )
                if found is None:
                    self.unsplit = tried  # as `oversized`: no shorter link fits now either
                else:
                    link_end, prompt = found
                text, status = await self.write(
                    policy,
                    messages[start:link_end],
                    key=policy.key(messages, start, link_end, previous_digest, model, size),
                    previous=previous,
                    size=asked_size,
                    covered=zones.log_index(link_end) - zones.head_log,
                    model=model,
                    context=context,
                    why=why,
                    prompt=prompt,
                )
            links += 1
            for key in _USAGE:
                usage[key] += context._details.get(key, 0)
            if links > 1:
                context._details.update({k: v for k, v in usage.items() if v})
            if link_end == end or status != 'summary':
                return text, status
            start, previous, previous_digest = link_end, text, digest_text(text)

    def _longest_fitting(
        self,
        policy: SummarisingPolicy,
        messages: Sequence[ModelMessage],
        start: int,
        ends: Sequence[int],
        previous: str | None,
        size: int | None,
        context: CompileContext,
        model: Any,
    ) -> tuple[int, str] | None:
        """The furthest of `ends` (ascending) whose span from `start` fits the summariser's window,
        with its prompt; None if even the nearest does not. A longer span's transcript is longer:
        the spans are tried growing (1, 2, 4... ends in) until one does not fit, then bisected
        between, so the transcripts rendered are at most about twice as long as the span that fits,
        however long the whole span is (a long log's is tens of megabytes)."""
        limit = summariser_input_limit(context, model, _instructions(policy), size)
        best: tuple[int, str] | None = None

        def fits(at: int) -> str | None:
            return fitted_prompt(
                messages[start : ends[at]], context, previous, size, policy.max_part_chars, limit
            )

        low, high, step = 0, len(ends) - 1, 1
        while low <= high:
            at = min(low + step - 1, high)
            prompt = fits(at)
            if prompt is None:
                high = at - 1
                break
            best, low = (ends[at], prompt), at + 1
            step *= 2
        while low <= high:
            mid = (low + high) // 2
            prompt = fits(mid)
            if prompt is None:
                high = mid - 1
            else:
                best, low = (ends[mid], prompt), mid + 1
        return best

    async def write(
        self,
        settings: SummarisingPolicy,
        span: Sequence[ModelMessage],
        *,
        key: str,
        previous: str | None,
        size: int | None,
        covered: int,
        model: Any,
        context: CompileContext,
        why: str,
        oversized_ok: bool = False,
        prompt: str | None = None,
    ) -> tuple[str, str]:
        """The text standing for `span` (after `previous`, the summary before it), and 'summary' or
        'fallback'; the summary (or its rejection) is filed in the cache under `key`.

        `oversized_ok`: a transcript over the summariser's window gives `('', 'oversized')`, nothing
        noted (the caller writes a shorter span); `prompt`: the span's prompt, already fitted."""
        cache = settings.cache
        if cache.get(key) == '':
            return _fallback(previous, span, context, why, 'summary was rejected before')
        if model is None:
            return _fallback(previous, span, context, why, 'no summary model')
        now = settings.clock()
        if not self.breaker.allows(now, settings.breaker_cooldown):
            return _fallback(previous, span, context, why, 'circuit breaker open', breaker_open=1)
        instructions = _instructions(settings)
        limit = summariser_input_limit(context, model, instructions, size)
        # A span whose transcript did not fit this limit in this conversation (same generation of
        # the compiling scope: the log's originals are the same) does not fit now either; rendering
        # it again, at every request, would cost a pass over the whole span.
        oversized = (key, limit, active_generation())
        if prompt is None and not (oversized[2] is not None and oversized == self.oversized):
            prompt = await _off_loop_if_long(
                len(span), fitted_prompt, span, context, previous, size, settings.max_part_chars, limit
            )
        if prompt is None:
            self.oversized = oversized
            if oversized_ok:
                return '', 'oversized'
            return _fallback(previous, span, context, why, "transcript over the summariser's window")
        if why == AHEAD:  # --- summary ahead: what a cancelled call would have cost ---
            context._details['summary_prompt_tokens'] = context.counter.count_text(prompt)
        try:
            text, input_tokens, output_tokens = await run_summariser(
                model, prompt, instructions=instructions, timeout=settings.timeout
            )
        except Exception as exc:  # any failure of the summariser degrades to the marker, never breaks the run
            failure = describe_failure(exc)
            if self.breaker.failure(settings.clock(), settings.breaker_threshold):
                # Once per opening: while it is open, each compile's fallback is logged at DEBUG only.
                logger.warning(
                    'the summariser failed %d times in a row (last: %s): no summariser calls for %g s, '
                    'markers stand in for summaries until then',
                    self.breaker.failures,
                    failure,
                    settings.breaker_cooldown,
                )
            return _fallback(previous, span, context, why, f'summariser failed: {failure}')
        self.breaker.success()
        usage = {
            'summary_calls': 1,
            'summary_input_tokens': input_tokens,
            'summary_output_tokens': output_tokens,
        }
        replaced = context.counter.count_messages(span) + (
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
            cache.put(key, '')
            self.filed += 1
            return _fallback(previous, span, context, why, problem, **usage)
        cache.put(key, text)
        self.filed += 1
        context.note(f'{why}: summarised {covered} messages', covers=covered, **usage)
        return text, 'summary'


async def _off_loop_if_long(messages: int, work: Callable[..., T], *args: Any) -> T:
    """`work(*args)`, in a worker thread when it renders a transcript of at least `OFF_LOOP_MESSAGES`
    messages: rendering and counting a long span's transcript (a few times, shorter each time, until
    it fits) takes seconds, and a summary made ahead would hold the loop for all of it."""
    if messages >= OFF_LOOP_MESSAGES:
        return await asyncio.to_thread(work, *args)
    return work(*args)


def fitted_prompt(
    span: Sequence[ModelMessage],
    context: CompileContext,
    previous: str | None,
    size: int | None,
    max_part_chars: int,
    limit: int | None,
) -> str | None:
    """The summariser's prompt for `span`, within what its model accepts; `None` if nothing fits.

    The transcript reads the originals of what the view shortened, so it can be far larger
    than the view: parts are clipped shorter (the facts of each original are still listed),
    then the view's own text stands for the originals, until the prompt fits.
    """
    originals = _shortened_originals(span, context.log)
    max_chars = max_part_chars
    while True:
        transcript = render_transcript(span, max_part_chars=max_chars, originals=originals)
        prompt = summary_prompt(transcript, previous_summary=previous, max_tokens=size)
        if limit is None or text_fits(context.counter, prompt, limit):
            return prompt
        if max_chars > _MIN_PART_CHARS:
            max_chars = max(_MIN_PART_CHARS, max_chars // 2)
        elif originals:
            originals, max_chars = {}, max_part_chars
        else:
            return None


def _instructions(settings: SummarisingPolicy) -> str:
    return SUMMARISER_INSTRUCTIONS + (f'\n\n{settings.instructions}' if settings.instructions else '')


def _fallback(
    previous: str | None,
    span: Sequence[ModelMessage],
    context: CompileContext,
    why: str,
    problem: str,
    **usage: int,
) -> tuple[str, str]:
    removed = len(span)
    line = FALLBACK_TEMPLATE.format(n=removed, messages='message was' if removed == 1 else 'messages were')
    context.note(f'{why}: {problem}; {removed} messages replaced by a marker', summary_fallback=1, **usage)
    return (f'{previous}\n\n{line}' if previous else line), 'fallback'


def summariser_input_limit(
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
