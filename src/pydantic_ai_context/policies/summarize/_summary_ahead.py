"""Summaries made ahead: the next shrink's summary is written in the background, before it is needed.

Without this, the compile of the request that crosses the trigger calls the summariser and that
request waits for it. With it (`SummarizeWindow(ahead=True)`, on in every summarising preset):

- when the view (with the summaries already cached applied) crosses the trigger, or earlier with
  `ahead_lead` (within that many times the room a shrink leaves for the recent steps of the
  limit), the span the next shrink will cover is summarised in a background task, while the model
  answers and the tools run. The span is planned so that, used when the view reaches the limit,
  the summary shrinks it to the low-water mark;
- the summary lands in the summary cache under the key the synchronous path would use, so the
  compile that crosses the trigger finds it there (`walk_chain`) and makes no call. It is known
  by the log messages it covers (`adopt`): when a mask or trim frontier moved over its span while
  it was written, it is filed under the span's key as the span renders now;
- when the trigger is crossed and no cached summary shrinks the view under it, the compile does
  not wait: it makes sure a summary is on its way and sends an interim view (`Interim`): the span
  that summary covers replaced by a marker with the span's facts. The marker is filed in the
  summary cache (`_slot`: one entry per point where the cached chain stops), and every view
  finds it there until the summary lands. With no summary in flight from where the cached chain
  stops, it uses the furthest cached summary (a smaller shrink, or none);
- when the view is over the limit even with every cached summary (a step larger than the band
  between the trigger and the limit, or a summary that did not land in time), sending it would
  drop its oldest steps: the summary is made in the compile instead, as without `ahead`, for the
  span this log plans (`ahead_waits`, on by default; off, the view is left to `fit_to_budget`).
  Whether that happens depends on the log and the cache alone, never on what is in flight.

The view stays a function of the log, the budget and the summary cache (summaries and interim
markers); the background task only fills the cache. At most one summary is in flight per
conversation (the task framing's digest names it). Tasks belong to their profile's
`BackgroundSummaries`: they are cancelled when their run ends (the capability's `wrap_run`), when
the session closes, when the profile is garbage-collected, and at interpreter exit. A summary
made and never used is reported as a `CompactionEvent` whose reason starts with
`summary_discarded` (with its tokens); a failure is logged and counted, never raised into the run.

This module decides what to summarise ahead and when, and reads its policy through `AheadPolicy`
(public methods of `SummarizeWindow`; `summarize` imports this module, never the reverse). The
registry of tasks, `BackgroundSummaries`, is in `_summary_tasks.py` (its name stays importable
from here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from pydantic_ai.messages import ModelMessage, TextPart, UserPromptPart

from pydantic_ai_context import _parts
from pydantic_ai_context._facts import part_facts, remembered_facts
from pydantic_ai_context.policies.summarize._summary_block import (
    ACK_TEXT,
    SUMMARY_PREFIX,
    Zones,
    digest_text,
    find_zones,
)
from pydantic_ai_context.policies.summarize._summary_call import AHEAD, SpanSummaries
from pydantic_ai_context.policies.summarize._summary_plan import (
    MIN_SUMMARY_TOKENS,
    MIN_TAIL_SHARE,
    asked_within,
    chain_ends,
)
from pydantic_ai_context.policies.summarize._summary_tasks import BackgroundSummaries as BackgroundSummaries
from pydantic_ai_context.policies.summarize._summary_tasks import Pending, cancel
from pydantic_ai_context.views import CompileContext

__all__ = (
    'AHEAD',
    'INTERIM_TEMPLATE',
    'KEEP',
    'AheadPolicy',
    'BackgroundSummaries',
    'Interim',
    'adopt',
    'give_up_in_flight',
    'instead_of_waiting',
    'interim_held',
    'settle',
    'start_if_due',
)


KEEP: Final = (-1, '')
"""`instead_of_waiting`'s answer for "send the view as it is" (no summary to add)."""

INTERIM_TEMPLATE: Final = (
    '[pydantic-ai-context: {n} earlier {messages} being summarised and left out until the summary is '
    'ready; read them back with read_context]'
)
"""The marker standing for the span of the summary in flight, in the interim view (see `Interim`)."""


@dataclass(frozen=True)
class Interim:
    """`instead_of_waiting`'s answer when a summary is on its way and the view is over the trigger:
    send the view with the span that summary covers (up to `end`) replaced by a marker now, and
    swap the marker for the summary when it lands.

    The span's end is the summary's own, so the interim views share their prefix (the provider's
    prompt cache holds) and the summary, when it lands, replaces exactly the marker: one extra
    cache break, against sending the unshrunk view, cached but over the trigger, until it lands.
    `text` is the chain's earlier summary (if any) with the marker line; read-back reaches the span.
    """

    end: int
    text: str


_INTERIM_FACT_SHARE: Final = 0.05
"""Share of the limit the interim marker's fact list may take (a summary is about that size)."""


class AheadPolicy(SpanSummaries, Protocol):
    """What summaries made ahead need of their policy (`SummarizeWindow` is one): its settings, the
    ledger of what it keeps between compiles, its span plan, its cache keys and its summary."""

    @property
    def name(self) -> str: ...
    @property
    def low_water(self) -> float | None: ...
    @property
    def ahead_lead(self) -> float: ...
    @property
    def ahead_waits(self) -> bool: ...
    @property
    def keep_current_run(self) -> bool: ...
    def plans_by_budget(self, context: CompileContext) -> bool: ...
    def kept(
        self, messages: Sequence[ModelMessage], zones: Zones, context: CompileContext
    ) -> Callable[[int], int]: ...
    def trigger_tokens(self, context: CompileContext) -> int | None: ...
    def key_template(self, previous: str | None, model: Any, size: int | None) -> tuple[str, str]: ...
    def candidates(
        self,
        messages: Sequence[ModelMessage],
        zones: Zones,
        context: CompileContext,
        *,
        enter_run: bool = False,
        fine: bool = False,
    ) -> list[int]: ...
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
    ) -> tuple[str, str]: ...


# --- what the policy asks ------------------------------------------------------------------------


@dataclass
class _Chain:
    start: int
    previous: str | None
    projected: int
    """Tokens of the view with the furthest cached summary applied."""


def _conversation(policy: AheadPolicy, zones: Zones) -> str:
    running = hashlib.sha256()
    for message in zones.head:
        running.update(policy.ledger.message_digest(message).encode())
    return running.hexdigest()


def _fixed(policy: AheadPolicy, zones: Zones, context: CompileContext) -> int:
    counter = context.counter
    return (
        counter.count_messages(zones.head) + policy.ledger.text_tokens(counter, SUMMARY_PREFIX + ACK_TEXT) + 8
    )


def _log_digest(policy: AheadPolicy, context: CompileContext, start_log: int, end_log: int) -> str | None:
    """The identity of the log's messages from `start_log` to `end_log` (`None`: no log to read)."""
    return policy.ledger.log_digest(context.log, start_log, end_log)


def adopt(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    zones: Zones,
    model: Any,
    context: CompileContext,
) -> None:
    """File the summaries made ahead under the keys of this view's spans, by the log they cover.

    A summary is cached under the digest of its span as the earlier steps rendered it when it
    started. By the time it lands, those steps may render the span differently (a mask or trim
    frontier moved over it) though the log is the same: the summary still covers the same log
    messages (its transcript reads their originals), so it is filed under the span's key as it
    renders now. The view stays a function of the log, the budget and the cache.
    """
    registry = context.background
    if registry is None or not registry.made():
        return
    size = policy.summary_tokens(context, zones)
    for made in registry.made():
        span = made.span
        if span is None or span.log_digest is None or span.policy != policy.name:
            continue
        start, end = zones.input_index(span.start_log), zones.input_index(span.end_log)
        if not zones.start <= start < end < len(messages):
            continue
        if _log_digest(policy, context, span.start_log, span.end_log) != span.log_digest:
            continue
        key = policy.key(messages, start, end, span.base_digest, model, size)
        if policy.cache.get(key) is None:
            policy.cache.put(key, made.text)


def _chain(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    zones: Zones,
    model: Any,
    context: CompileContext,
) -> _Chain:
    adopt(policy, messages, zones, model, context)
    candidates = policy.candidates(messages, zones, context, fine=True)
    size = policy.summary_tokens(context, zones)
    start, previous, _ = policy.walk_chain(messages, zones, candidates, model, size)
    if start <= zones.start:
        return _Chain(
            zones.start, zones.previous, policy.ledger.count(messages, 0, len(messages), context.counter)
        )
    return _Chain(start, previous, _view_tokens(policy, messages, zones, previous, start, context))


def _marks(policy: AheadPolicy, context: CompileContext) -> tuple[int, int, int] | None:
    """(low-water mark, trigger, limit) in tokens, when the policy plans shrinks by the budget."""
    budget = context.budget
    if not policy.plans_by_budget(context) or budget is None or policy.low_water is None:
        return None
    high = policy.trigger_tokens(context) or budget.limit
    low = int(budget.limit * policy.low_water)
    if high <= low:
        return None
    return low, high, budget.limit


def start_if_due(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    zones: Zones | None,
    model: Any,
    context: CompileContext,
) -> None:
    """Start summarising the next shrink's span in the background, when the view is past the ahead mark.

    The mark: `ahead_lead` times the room a shrink leaves for the recent steps (the low-water mark
    less the task framing and the summary) below the limit, and never past the trigger. Started
    there with `ahead_lead=1`, a summary of everything but the newest step shrinks the view to
    the low-water mark when the view reaches the limit, however late the summary lands before
    that; a larger lead starts earlier, for a slower summariser, at the price of smaller shrinks
    (more summaries).
    """
    registry = context.background
    marks = _marks(policy, context)
    if registry is None or marks is None or model is None:
        return
    low, high, limit = marks
    counter = context.counter
    if zones is None:  # the trigger did not fire: the policy has not read this input yet
        if counter.count_messages(messages) <= low:
            return  # the view sent is never larger than the input
        reading = policy.ledger.read(messages, context.counter)
        zones = find_zones(
            messages, summaries=reading.summaries, cuts=reading.cut_points, spans=reading.run_spans
        )
        if zones is None:
            return
    elif policy.ledger.count(messages, 0, len(messages), context.counter) <= low:
        return  # the view sent is never larger than the input
    conversation = _conversation(policy, zones)
    found = registry.in_flight(conversation)
    if found is not None and found.task is not None and not found.task.done():
        return  # at most one in flight per conversation
    chain = _chain(policy, messages, zones, model, context)
    size = policy.summary_tokens(context, zones)
    fixed = _fixed(policy, zones, context)
    # As the trigger plans it (`_summary_plan.shrink_end`): where the task framing leaves the recent
    # steps little room beside a full-size summary, the summariser is asked for less.
    asked = min(size or 0, max(MIN_SUMMARY_TOKENS, high - fixed - int(limit * MIN_TAIL_SHARE)))
    planned = policy.ledger.text_tokens(counter, chain.previous) if chain.previous else asked // 2
    room = low - fixed - planned
    if chain.projected < min(high, limit - int(max(room, 0) * policy.ahead_lead)):
        return  # not yet: the cached summaries keep the view far enough from the limit
    # The view sent (the cached summaries applied) grows until it reaches the limit: plan the
    # span so that the view then shrinks to the low-water mark.
    target = low - max(0, limit - chain.projected)
    end = _span_end(policy, messages, zones, context, chain.start, target - fixed - planned)
    if end is None:
        return
    n = len(messages)
    kept = policy.kept(messages, zones, context)
    fitted = asked_within(
        asked, fixed, policy.ledger.count(messages, end, n, counter) + kept(end), limit, high
    )
    if fitted is None:  # as the trigger plans it: an end off the step grid, for a shorter tail
        end = _span_end(policy, messages, zones, context, chain.start, target - fixed - planned, fine=True)
        if end is None:
            return
        fitted = asked_within(
            asked, fixed, policy.ledger.count(messages, end, n, counter) + kept(end), limit, high
        )
    if fitted is None:
        return  # no room beside the task framing and the newest step: the trigger makes none either
    base_digest = digest_text(chain.previous) if chain.previous else None
    if chain.start == zones.start:
        base_digest = zones.previous_digest
    key = policy.key(messages, chain.start, end, base_digest, model, size)
    if policy.cache.get(key) is not None:
        return  # made already (or rejected before)
    pending = Pending(
        task=None,
        conversation=conversation,
        run_id=context.run_id,
        cache_key=key,
        start_log=zones.log_index(chain.start),
        end_log=zones.log_index(end),
        base_digest=base_digest,
        estimate=counter.count_messages(messages[chain.start : end])
        + counter.count_text(chain.previous or ''),
        policy=policy.name,
        log_digest=_log_digest(policy, context, zones.log_index(chain.start), zones.log_index(end)),
    )
    span = list(messages)

    def write(own: CompileContext) -> Awaitable[tuple[str, str]]:
        return policy.summary(span, zones, end, model, own, AHEAD, asked=fitted)

    registry.start(pending, write, zones, context)


def _span_end(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    zones: Zones,
    context: CompileContext,
    start: int,
    tail_room: int,
    *,
    fine: bool = False,
) -> int | None:
    """The first candidate end whose tail fits `tail_room`, else the furthest one. A current run
    kept out of summaries is entered (as the trigger will once the view is over the limit) only
    when the steps before it cannot make room. `fine`: the ends off the step grid count too."""
    n = len(messages)
    kept = policy.kept(messages, zones, context)
    ends: list[int] = []
    for enter_run in (False, True):
        ends = [
            e
            for e in policy.candidates(messages, zones, context, enter_run=enter_run, fine=fine)
            if e > start
        ]
        if not ends:
            if policy.keep_current_run and not enter_run:
                continue
            return None
        suffix = 0
        fitting = None
        for at in range(len(ends) - 1, -1, -1):
            suffix += policy.ledger.count(
                messages, ends[at], ends[at + 1] if at + 1 < len(ends) else n, context.counter
            )
            if suffix + kept(ends[at]) > tail_room:
                break
            fitting = ends[at]
        if fitting is not None:
            return fitting
        if not policy.keep_current_run:
            break
    return ends[-1] if ends else None


async def instead_of_waiting(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    zones: Zones,
    model: Any,
    context: CompileContext,
) -> tuple[int, str] | Interim | None:
    """At the trigger, when no cached summary shrinks the view under it: what to send without waiting.

    `Interim`: the span of the summary on its way replaced by a marker until it lands (the view
    is over the trigger, so the synchronous path would have shrunk it; see `Interim`);
    `(end, text)`: reuse the furthest cached summary (a smaller shrink); `KEEP`: send the view as
    it is; `None`: take the synchronous path. A summary is always on its way when this returns.
    A view over the limit with every cached summary takes the synchronous path (`None`), unless
    `policy.ahead_waits` is off: then it does not wait either (`fit_to_budget` drops its oldest
    steps until the summary lands).
    """
    registry = context.background
    budget = context.budget
    if registry is None or budget is None or _marks(policy, context) is None or model is None:
        return None
    conversation = _conversation(policy, zones)
    chain = _chain(policy, messages, zones, model, context)
    pending = registry.in_flight(conversation)
    live = pending is not None and pending.task is not None and not pending.task.done()
    if (
        live
        and pending is not None
        and not _still_prefix(policy, pending, messages, zones, chain, model, context)
    ):
        assert pending.task is not None
        await cancel([pending.task])  # the log changed under it: plan the span again
        pending = None
    over = chain.projected > budget.limit
    start_if_due(policy, messages, zones, model, context)
    interim = _interim(policy, messages, zones, chain, conversation, model, context)
    if interim is None and _elsewhere(policy, registry.in_flight(conversation), messages, zones, chain):
        # The summary on its way no longer starts where the chain stops in this view (a step
        # before this one reshaped the span: isolate collapsed a finished run in it). A fresh
        # profile would start one from there and show its interim marker: so does this one, or
        # the view would depend on what is in flight (DESIGN section 1).
        pending = registry.in_flight(conversation)
        if pending is not None and pending.task is not None:
            await cancel([pending.task])
        start_if_due(policy, messages, zones, model, context)
        interim = _interim(policy, messages, zones, chain, conversation, model, context)
    if interim is not None and not (
        over
        and policy.ahead_waits
        and _view_tokens(policy, messages, zones, interim.text, interim.end, context) > budget.limit
    ):
        return interim
    if over and policy.ahead_waits:
        # Over the limit even with the marker: sent, the view would lose its oldest steps. The
        # summary is made now, as without `ahead`; the one in flight would only duplicate it.
        pending = registry.in_flight(conversation)
        if _on_its_way(policy, pending):
            assert pending is not None
            assert pending.task is not None
            await cancel([pending.task])
        return None
    if over and not policy.ahead_waits:
        context.note('a summary is on its way; until it lands, the view is over the limit', summary_pending=1)
    if chain.start > zones.start and chain.previous is not None:
        return chain.start, chain.previous
    return KEEP


async def give_up_in_flight(policy: AheadPolicy, zones: Zones, context: CompileContext) -> None:
    """Cancel this policy's summary on its way for the conversation: the request makes its summary
    now, and the one in flight would only duplicate it."""
    registry = context.background
    if registry is None:
        return
    pending = registry.in_flight(_conversation(policy, zones))
    if _on_its_way(policy, pending):
        assert pending is not None
        assert pending.task is not None
        await cancel([pending.task])


def _view_tokens(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    zones: Zones,
    text: str | None,
    end: int,
    context: CompileContext,
) -> int:
    """Tokens of the view with `text` (a summary, or an interim marker) standing for the messages
    up to `end`: the framing, the text, the tail and what a summary keeps verbatim beside it."""
    counter = context.counter
    return (
        _fixed(policy, zones, context)
        + policy.ledger.text_tokens(counter, text)
        + policy.ledger.count(messages, end, len(messages), counter)
        + policy.kept(messages, zones, context)(end)
    )


def _on_its_way(policy: AheadPolicy, pending: Any) -> bool:
    """`pending` is a summary of this policy still being written."""
    return (
        pending is not None
        and pending.task is not None
        and not pending.task.done()
        and pending.policy == policy.name
    )


def _placed(
    pending: Any, messages: Sequence[ModelMessage], zones: Zones, chain: _Chain
) -> tuple[int, int] | None:
    """The span of `pending` in this view, if it starts where the chain stops and ends inside the view."""
    start, end = zones.input_index(pending.start_log), zones.input_index(pending.end_log)
    return (start, end) if start == chain.start and start < end < len(messages) else None


def _elsewhere(
    policy: AheadPolicy, pending: Any, messages: Sequence[ModelMessage], zones: Zones, chain: _Chain
) -> bool:
    """A summary of this policy is on its way for a span that does not start where the chain stops
    in this view, or does not end inside it."""
    return _on_its_way(policy, pending) and _placed(pending, messages, zones, chain) is None


def _slot(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    start: int,
    base: str | None,
    model: Any,
    size: int | None,
) -> str:
    """The cache key of the interim marker for a span from `start` (one per chain point: found with
    one lookup, whatever the span's end)."""
    before, after = policy.key_template(base, model, size)
    first = policy.ledger.message_digest(messages[start])
    return hashlib.sha256(f'interim:{before}"{first}"{after}'.encode()).hexdigest()


def _interim(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    zones: Zones,
    chain: _Chain,
    conversation: str,
    model: Any,
    context: CompileContext,
) -> Interim | None:
    """The interim view's block: the one the cache holds from where the chain stops, else one for
    the summary in flight from there (filed in the cache, so that the views until it lands are a
    function of the log, the budget and the cache); `None`: neither."""
    found = _reserved(policy, messages, zones, chain.start, chain.previous, model, context)
    if found is not None:
        return found
    registry = context.background
    pending = registry.in_flight(conversation) if registry is not None else None
    placed = _placed(pending, messages, zones, chain) if _on_its_way(policy, pending) else None
    if pending is None or placed is None:
        return None
    start, end = placed
    removed = end - start
    line = INTERIM_TEMPLATE.format(n=removed, messages='message is' if removed == 1 else 'messages are')
    facts = _fact_list(context, pending.start_log, pending.end_log, _interim_fact_tokens(context))
    if facts:
        line += f'\nFacts they established (newest first):\n{facts}'
    pending.interim = line
    size = policy.summary_tokens(context, zones)
    key = policy.key(messages, start, end, pending.base_digest, model, size)
    policy.cache.put(
        _slot(policy, messages, start, pending.base_digest, model, size), f'{pending.end_log}\n{key}\n{line}'
    )
    return _reserved(policy, messages, zones, chain.start, chain.previous, model, context)


def _reserved(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    zones: Zones,
    start: int,
    previous: str | None,
    model: Any,
    context: CompileContext,
) -> Interim | None:
    """The interim marker the cache holds for a span from `start` (where the cached chain stops,
    `previous` its summary), furthest first. None where nothing is summarised ahead (the view
    replaces the run's history: a marker sent there would stay in it)."""
    registry = context.background
    if registry is None:
        return None
    if not start < len(messages):
        return None
    size = policy.summary_tokens(context, zones)
    base = digest_text(previous) if previous and start > zones.start else zones.previous_digest
    slot = _slot(policy, messages, start, base, model, size)
    spans = registry.spans()
    if spans:  # a frontier moved over the span: file the marker under its key now
        for pending in spans:
            end = zones.input_index(pending.end_log)
            if not (
                pending.interim
                and pending.policy == policy.name
                and zones.input_index(pending.start_log) == start
                and start < end < len(messages)
                and pending.base_digest == base
            ):
                continue
            key = policy.key(messages, start, end, base, model, size)
            filed = f'{pending.end_log}\n{key}\n{pending.interim}'
            # The log's digest (a pass over the span) only when the entry would change.
            if policy.cache.get(slot) != filed and (
                _log_digest(policy, context, pending.start_log, pending.end_log) == pending.log_digest
            ):
                policy.cache.put(slot, filed)
    found = policy.cache.get(slot)
    if not found:
        return None
    fields = found.split('\n', 2)
    if len(fields) != 3 or not fields[0].isdigit():
        return None
    end_log, key, line = fields
    end = zones.input_index(int(end_log))
    if not start < end < len(messages) or policy.key(messages, start, end, base, model, size) != key:
        return None  # filed for another span (another log, or the span renders differently now)
    removed = end - start
    context.note(
        f'a summary of {removed} messages is on its way; until it lands, a marker stands for them',
        summary_interim=1,
    )
    return Interim(end, f'{previous}\n\n{line}' if previous else line)


def _interim_fact_tokens(context: CompileContext) -> int:
    budget = context.budget
    return int(budget.limit * _INTERIM_FACT_SHARE) if budget is not None else 0


def _fact_list(context: CompileContext, start_log: int, end_log: int, tokens: int) -> str:
    """The execution facts (each result's error lines, then its file paths) of the log's messages
    from `start_log` to `end_log`, newest first, one a line, within `tokens`: what the summary
    would keep, verbatim. Read from the log (the originals), so the list does not change while the
    views around it do; the scan stops when the list is full (a long span is not read whole)."""
    log = context.log
    if tokens <= 0 or not 0 <= start_log < end_log <= len(log):
        return ''
    counter = context.counter
    listed: dict[str, None] = {}
    used = 0
    for message in reversed(log[start_log:end_log]):
        for part in reversed(message.parts):
            if _parts.is_tool_result(part):
                found = part_facts(part)
            elif isinstance(part, (UserPromptPart, TextPart)):
                found = remembered_facts(_parts.part_text(part))
            else:
                continue
            errors = found.error_lines
            for fact in (*errors, *(p for p in found.paths if not any(p in e for e in errors))):
                if fact in listed:
                    continue
                cost = counter.count_text(fact) + 1
                if used + cost > tokens:
                    return '\n'.join(listed)
                listed[fact] = None
                used += cost
    return '\n'.join(listed)


def interim_held(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    zones: Zones,
    reuse: tuple[int, str],
    model: Any,
    context: CompileContext,
) -> Interim | None:
    """An interim marker stays until its summary lands, even where the cached chain (`reuse`) now
    keeps the view under the trigger (a view that moves around the trigger would otherwise flip
    between the two, and each flip breaks the prompt cache)."""
    return _reserved(policy, messages, zones, reuse[0], reuse[1], model, context)


def _still_prefix(
    policy: AheadPolicy,
    pending: Pending,
    messages: Sequence[ModelMessage],
    zones: Zones,
    chain: _Chain,
    model: Any,
    context: CompileContext,
) -> bool:
    """Whether the summary in flight still covers a prefix of what the next shrink compacts."""
    start, end = zones.input_index(pending.start_log), zones.input_index(pending.end_log)
    if start != chain.start or not start < end <= len(messages):
        return False
    base = (
        digest_text(chain.previous) if chain.previous and chain.start > zones.start else zones.previous_digest
    )
    if base != pending.base_digest:
        return False
    if pending.log_digest is not None:  # the log's messages, not how the earlier steps render them
        return _log_digest(policy, context, pending.start_log, pending.end_log) == pending.log_digest
    size = policy.summary_tokens(context, zones)
    return policy.key(messages, start, end, base, model, size) == pending.cache_key


def settle(
    policy: AheadPolicy,
    messages: Sequence[ModelMessage],
    zones: Zones,
    end: int,
    model: Any,
    context: CompileContext,
) -> None:
    """The view now holds the summary up to `end`: the summaries made ahead on its chain were used
    (their usage is noted on this compile, as if it had made them)."""
    registry = context.background
    if registry is None or not registry.made():
        return
    size = policy.summary_tokens(context, zones)
    ends = chain_ends(messages, zones, end, policy.step_messages, policy.ledger.cut_points(messages))
    start, previous_digest = zones.start, zones.previous_digest
    while start < end:
        template = policy.key_template(previous_digest, model, size)
        keys = policy.ledger.keys(messages, start, [e for e in ends if e > start], template)
        found = None
        for candidate in sorted(keys, reverse=True):
            text = policy.cache.get(keys[candidate])
            if text:
                found = (candidate, text)
                break
        if found is None:
            return
        start, text = found
        registry.used(text, context)
        previous_digest = digest_text(text)
