"""Where a summary's span may end: the span plan of `summarize_window`, and the chain of cached summaries.

The summarised span ends on a safe cut point on whole steps of `step_messages` counted from the
head (in log positions, so it depends on the log alone). `candidates` lists those ends (before
the current run when it is kept; the ledger keeps them from one compile to the next), `span_end`
picks the end for a tail of a given size (no budget to plan by), and `walk_chain` follows the
cached incremental summaries from the span's start as far as they go.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from pydantic_ai.messages import ModelMessage

from pydantic_ai_context.integrity import safe_cut_points
from pydantic_ai_context.policies.summarize._summary_block import ACK_TEXT, SUMMARY_PREFIX, Zones, digest_text
from pydantic_ai_context.policies.summarize._summary_reading import StepEnds, SummaryLedger
from pydantic_ai_context.policies.summarize.summary_cache import SummaryCache
from pydantic_ai_context.tokens import message_tokens
from pydantic_ai_context.views import CompileContext, current_run

__all__ = (
    'MIN_SUMMARY_TOKENS',
    'MIN_TAIL_SHARE',
    'NEAR_STEPS',
    'NO_ROOM',
    'Shrink',
    'asked_within',
    'candidates',
    'chain_ends',
    'fine_ends',
    'near_cuts',
    'shrink_end',
    'span_end',
    'step_ends',
    'walk_chain',
)

MIN_TAIL_SHARE: Final = 0.1
"""Share of the limit the recent steps need beside the task framing and a full-size summary for the
summary to be asked at full size; with less, the summariser is asked for the room left
(`asked_within`)."""
NEAR_STEPS: Final = 4
"""From each summary on the chain, the cuts within this many steps (`step_messages`) are tried as the
next link's end besides the step grid: a summary that had to end off the grid (`fine_ends`) is still
found once the grid has moved past it."""
MIN_SUMMARY_TOKENS: Final = 200
"""The least a summariser is asked for, however tight the budget: with less room beside the task
framing and the newest step, no summary is made."""
NO_ROOM: Final = 'no room for a summary beside the task framing and the newest step'
"""Why no summary is planned when the task framing and the newest step leave no room for a summary
worth making (`asked_within`)."""


@dataclass(frozen=True)
class Shrink:
    """A shrink planned under a budget: where the summarised span ends, the cached summary to reuse
    for it (if any), and the size the summariser is asked for (the policy's size, or less when the
    tail kept leaves less room beside the task framing)."""

    end: int
    reuse: tuple[int, str] | None
    asked: int


def asked_within(asked: int, fixed: int, tail: int, limit: int, high: int) -> int | None:
    """The size to ask the summariser for beside `fixed` (the task framing and the summary's own
    framing) and a tail of `tail` tokens: `asked`, or less where the room is tighter. The view it
    gives must leave `MIN_TAIL_SHARE` of the limit under the trigger `high` (else the next request
    needs a summary again: one summary a request costs more than dropping). `None` when that
    leaves less than `MIN_SUMMARY_TOKENS`: no summary is worth making (`NO_ROOM`)."""
    room = min(limit - fixed - tail, high - int(limit * MIN_TAIL_SHARE) - fixed - tail)
    if room < MIN_SUMMARY_TOKENS:
        return None
    return min(asked, room)


def span_end(
    messages: Sequence[ModelMessage],
    zones: Zones,
    context: CompileContext,
    *,
    tail_sizes: tuple[int | None, int | None],
    keep_current_run: bool,
    step_messages: int,
) -> int:
    """Input index where the tail starts (== `zones.start` when there is nothing new to summarise):
    the latest cut whose tail holds `tail_sizes` (tokens, messages), on a whole step from the head."""
    n = len(messages)
    cuts = [c for c in safe_cut_points(messages) if zones.start < c < n]
    if not cuts:
        return zones.start
    keep_tokens, keep_messages = tail_sizes
    limit = n
    if keep_current_run:
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
    steps = (zones.log_index(ideal) - zones.head_log) // step_messages
    quantised = zones.input_index(zones.head_log + steps * step_messages)
    return max([c for c in cuts if c <= quantised], default=zones.start)


def step_ends(
    messages: Sequence[ModelMessage],
    zones: Zones,
    end: int,
    step_messages: int,
    cut_points: Sequence[int] | None = None,
) -> list[int]:
    """Every earlier step end between the start and `end`: where cached summaries may stop.
    `cut_points`: `safe_cut_points(messages)`, when known (the policy's reading keeps them)."""
    every = cut_points if cut_points is not None else safe_cut_points(messages)
    cuts = every[bisect.bisect_right(every, zones.start) : bisect.bisect_right(every, end)]
    ends: set[int] = set()
    first = (zones.log_index(zones.start) - zones.head_log) // step_messages + 1
    last = (zones.log_index(end) - zones.head_log) // step_messages
    for k in range(first, last + 1):
        target = zones.input_index(zones.head_log + k * step_messages)
        at = bisect.bisect_right(cuts, target)
        if at:
            ends.add(cuts[at - 1])
    ends.add(end)
    return sorted(ends)


def candidates(
    ledger: SummaryLedger,
    messages: Sequence[ModelMessage],
    zones: Zones,
    context: CompileContext,
    *,
    step_messages: int,
    keep_current_run: bool,
    enter_run: bool = False,
    fine: bool = False,
) -> list[int]:
    """Where the summarised span may end: safe cut points on whole steps from the head (in log
    positions, so they depend on the log alone), before the current run when it is kept; with
    `fine`, followed by the cuts off the step grid up to the newest step (`fine_ends`).

    A kept current run is entered only when the view is over the budget's limit: its oldest
    steps would be dropped by `fit_to_budget` otherwise, and a summary of them keeps more.
    The ledger keeps the ends from one compile to the next (`StepEnds`).
    """
    n = len(messages)
    limit = _span_limit(ledger, messages, context, keep_current_run=keep_current_run, enter_run=enter_run)
    every = ledger.cut_points(messages)
    cuts = every[bisect.bisect_right(every, zones.start) : bisect.bisect_right(every, limit)]
    if not cuts:
        return []
    params = (zones.start, zones.start_log, zones.head_log, step_messages)
    # Kept apart for the lists that stop before the current run and the ones that do not.
    kept = ledger.steps.setdefault(limit == n - 1, StepEnds())
    ends = kept.ends(cuts, params, zones)
    if fine:
        ends += fine_ends(
            ledger, messages, zones, context, ends, keep_current_run=keep_current_run, enter_run=enter_run
        )
    return ends


def _span_limit(
    ledger: SummaryLedger,
    messages: Sequence[ModelMessage],
    context: CompileContext,
    *,
    keep_current_run: bool,
    enter_run: bool,
) -> int:
    """The furthest a summarised span may end: before the newest message, and before a kept
    current run unless the view is over the limit (or a summary ahead plans for that moment)."""
    n = len(messages)
    limit = n - 1
    over_limit = (
        context.budget is not None and ledger.count(messages, 0, n, context.counter) > context.budget.limit
    )
    if keep_current_run and not (over_limit or enter_run):  # enter_run: a summary ahead
        run = ledger.current_run(messages, context.run_id)
        if run is not None:
            limit = min(limit, run.start)
    return limit


def fine_ends(
    ledger: SummaryLedger,
    messages: Sequence[ModelMessage],
    zones: Zones,
    context: CompileContext,
    after: Sequence[int],
    *,
    keep_current_run: bool,
    enter_run: bool = False,
) -> list[int]:
    """The safe cut points after the last of `after` (the whole-step `candidates`), up to where a
    span may end: ends off the step grid, for when the tail a whole step keeps does not fit beside
    a summary (long model texts make few, large steps). The newest step is never among them."""
    limit = _span_limit(ledger, messages, context, keep_current_run=keep_current_run, enter_run=enter_run)
    every = ledger.cut_points(messages)
    first = max(after[-1] if after else zones.start, zones.start)
    return list(every[bisect.bisect_right(every, first) : bisect.bisect_right(every, limit)])


def near_cuts(
    cut_points: Sequence[int], ends: Sequence[int], step_messages: int
) -> Callable[[int], Sequence[int]]:
    """For `walk_chain`: from a summary ending at `start`, the cuts within `NEAR_STEPS` steps after it
    (up to the furthest of `ends`), where the next summary may have ended off the step grid."""

    def near(start: int) -> Sequence[int]:
        if not ends:
            return ()
        top = min(max(ends), start + NEAR_STEPS * step_messages)
        return cut_points[bisect.bisect_right(cut_points, start) : bisect.bisect_right(cut_points, top)]

    return near


def chain_ends(
    messages: Sequence[ModelMessage],
    zones: Zones,
    end: int,
    step_messages: int,
    cut_points: Sequence[int] | None = None,
) -> list[int]:
    """Where the chain of cached summaries up to `end` may stop: the step ends (`step_ends`) and,
    when `end` is off the step grid, the safe cuts between the last step end and it (the ends
    `fine_ends` offered to earlier shrinks)."""
    every = cut_points if cut_points is not None else safe_cut_points(messages)
    ends = step_ends(messages, zones, end, step_messages, every)
    before = ends[-2] if len(ends) > 1 else zones.start
    fine = every[bisect.bisect_right(every, before) : bisect.bisect_left(every, end)]
    return sorted({*ends, *fine}) if fine else ends


def shrink_end(
    ledger: SummaryLedger,
    messages: Sequence[ModelMessage],
    zones: Zones,
    context: CompileContext,
    candidates: Sequence[int],
    chain: tuple[int, str | None],
    asked: int,
    high: int,
    low_water: float,
    grid: int | None = None,
    *,
    kept: Callable[[int], int] = lambda end: 0,
) -> Shrink | str:
    """The end of the span to summarise under a budget, the cached summary to reuse for it (if
    any), and the size to ask the summariser for; else why no summary is planned.

    `candidates`: where the span may end, in order (the `grid` whole-step ends, then `fine_ends`);
    `chain`: where the chain of cached summaries stops and its text; `asked`: the size the
    summariser is asked for at most; `high`: the trigger. The cached summary reaching furthest is
    reused while the view it gives stays within the trigger; past that, a new span end is chosen
    so that the view shrinks to the low-water mark, else as far as the newest step (a shorter
    tail), with the summariser asked for no more than the room left beside the task framing and
    that tail. `NO_ROOM` when even then there is no room for a summary. `kept(end)`: the tokens the
    summary's block keeps verbatim of the span ending at `end` (they stay in the view).
    """
    budget = context.budget
    assert budget is not None
    counter = context.counter
    limit = budget.limit
    start, previous = chain
    tails = ledger.suffix_tokens(messages, candidates[0], counter)

    def suffix_at(end: int) -> int:  # what stays beside the summary: the tail and what it keeps
        return tails[end] + kept(end)

    # The head, the summary's framing and acknowledgement, whatever the summary does not replace.
    fixed = counter.count_messages(zones.head) + ledger.text_tokens(counter, SUMMARY_PREFIX + ACK_TEXT) + 8
    if (
        previous is not None
        and start > zones.start
        and fixed + ledger.text_tokens(counter, previous) + suffix_at(start) <= high
    ):
        return Shrink(start, (start, previous), asked)
    # A summary at full size leaves the recent steps at least MIN_TAIL_SHARE of the limit under the
    # trigger; where the task framing is too large for that, the summariser is asked for less.
    asked = min(asked, max(MIN_SUMMARY_TOKENS, high - fixed - int(limit * MIN_TAIL_SHARE)))
    # The low-water mark is for what stays beside the summary: the summary's own size is what
    # the previous one took, or half the size asked for.
    planned = ledger.text_tokens(counter, previous) if previous is not None else asked // 2
    low = int(limit * low_water)
    room = low - fixed - planned
    whole = len(candidates) if grid is None else grid
    # The whole-step ends first; the ones off the grid only when none of those leaves room.
    for ends in (candidates[:whole], candidates[whole:]):
        reachable = [e for e in ends if e > start]
        if not reachable:
            continue
        # The first end whose tail fits beside the summary under the low-water mark: the tail only
        # shrinks as the end moves on (the candidates are in order), so it is found by bisection.
        # Else the furthest end: the shortest tail beside the summary.
        at = bisect.bisect_left(reachable, -room, key=lambda end: -suffix_at(end))
        end = reachable[at] if at < len(reachable) else reachable[-1]
        fitted = asked_within(asked, fixed, suffix_at(end), limit, high)
        if fitted is not None:
            return Shrink(end, None, fitted)
    last = candidates[-1]
    if last <= start and previous is not None and start > zones.start:
        # No end past the cached chain: its summary, even where the view it gives is over the
        # limit (a summary longer than asked): the compile that made it sent that view, and
        # `fit_to_budget` shortens the newest step's results rather than drop what it covers.
        return Shrink(start, (start, previous), asked)
    if last <= start and fixed + suffix_at(last) <= limit:
        return Shrink(last, None, asked)
    return NO_ROOM  # the task framing and the newest step leave no room: fit_to_budget drops


def walk_chain(
    cache: SummaryCache,
    zones: Zones,
    ends: Sequence[int],
    keys_from: Callable[[int, str | None], Callable[[int], str]],
    missed: Callable[[int, str | None], set[int] | None] = lambda start, digest: None,
    near: Callable[[int], Sequence[int]] = lambda start: (),
) -> tuple[int, str | None, str | None]:
    """Follow the cached incremental summaries from the span's start as far as they go.

    `keys_from(start, previous_digest)` gives the cache key of the span from `start` to a given
    end; `missed(start, previous_digest)` the ends known to have nothing cached (kept from one
    compile to the next while the cache is unchanged: looked up again, they would miss again), to
    which the ends found missing are added; `near(start)` more ends to try from `start` (the cuts
    off the step grid a summary may have ended on, `fine_ends`). Returns where the chain stops,
    its summary text and that text's digest (the start and the summary already in the view when
    nothing is cached).
    """
    start, previous, previous_digest = zones.start, zones.previous, zones.previous_digest
    while True:
        key = keys_from(start, previous_digest)
        known = missed(start, previous_digest)
        found: tuple[int, str] | None = None
        # Furthest first; the ends known to miss are not looked up again (a set difference, in C).
        tried = set(ends).union(near(start))
        for candidate in sorted(tried.difference(known) if known else tried, reverse=True):
            if candidate <= start:
                break
            text = cache.get(key(candidate))
            if text:
                found = (candidate, text)
                break
            if known is not None:
                known.add(candidate)
        if found is None:
            return start, previous, previous_digest
        start, previous = found
        previous_digest = digest_text(previous)
