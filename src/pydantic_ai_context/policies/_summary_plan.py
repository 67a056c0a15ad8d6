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
from typing import Final

from pydantic_ai.messages import ModelMessage

from pydantic_ai_context.integrity import safe_cut_points
from pydantic_ai_context.policies._summary_block import ACK_TEXT, SUMMARY_PREFIX, Zones, digest_text
from pydantic_ai_context.policies._summary_reading import StepEnds, SummaryLedger
from pydantic_ai_context.policies.summary_cache import SummaryCache
from pydantic_ai_context.tokens import message_tokens
from pydantic_ai_context.views import CompileContext, current_run

__all__ = ('MIN_TAIL_SHARE', 'candidates', 'shrink_end', 'span_end', 'step_ends', 'walk_chain')

MIN_TAIL_SHARE: Final = 0.1
"""Share of the limit the recent steps need beside the task framing and a summary for a summary to be
worth making."""


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
) -> list[int]:
    """Where the summarised span may end: safe cut points on whole steps from the head (in log
    positions, so they depend on the log alone), before the current run when it is kept.

    A kept current run is entered only when the view is over the budget's limit: its oldest
    steps would be dropped by `fit_to_budget` otherwise, and a summary of them keeps more.
    The ledger keeps the ends from one compile to the next (`StepEnds`).
    """
    n = len(messages)
    limit = n - 1
    over_limit = (
        context.budget is not None and ledger.count(messages, 0, n, context.counter) > context.budget.limit
    )
    if keep_current_run and not (over_limit or enter_run):  # enter_run: a summary ahead
        run = ledger.current_run(messages, context.run_id)
        if run is not None:
            limit = min(limit, run.start)
    every = ledger.cut_points(messages)
    cuts = every[bisect.bisect_right(every, zones.start) : bisect.bisect_right(every, limit)]
    if not cuts:
        return []
    params = (zones.start, zones.start_log, zones.head_log, step_messages)
    # Kept apart for the lists that stop before the current run and the ones that do not.
    kept = ledger.steps.setdefault(limit == n - 1, StepEnds())
    return kept.ends(cuts, params, zones)


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
) -> tuple[int, tuple[int, str] | None] | None:
    """The end of the span to summarise under a budget, and the cached summary to reuse for it (if any).

    `chain`: where the chain of cached summaries stops and its text; `asked`: the size the
    summariser is asked for; `high`: the trigger. The cached summary reaching furthest is reused
    while the view it gives stays within the trigger; past that, a new span end is chosen so that
    the view shrinks to the low-water mark. None when no summary could make the view fit the limit.
    """
    budget = context.budget
    assert budget is not None
    counter = context.counter
    start, previous = chain
    suffix = ledger.suffix_tokens(messages, candidates[0], counter)
    # The head, the summary's framing and acknowledgement, whatever the summary does not replace.
    fixed = counter.count_messages(zones.head) + ledger.text_tokens(counter, SUMMARY_PREFIX + ACK_TEXT) + 8
    if (
        previous is not None
        and start > zones.start
        and fixed + ledger.text_tokens(counter, previous) + suffix[start] <= high
    ):
        return start, (start, previous)
    if high - fixed - asked < budget.limit * MIN_TAIL_SHARE:
        # The task framing and a summary leave (next to) no room for the recent steps: a
        # summary would be dropped again at once. Leave the steps to fit_to_budget.
        return None
    # The low-water mark is for what stays beside the summary: the summary's own size is what
    # the previous one took, or half the size asked for.
    planned = ledger.text_tokens(counter, previous) if previous is not None else asked // 2
    low = int(budget.limit * low_water)
    reachable = candidates[bisect.bisect_right(candidates, start) :] or candidates[-1:]
    # The first end whose tail fits beside the summary under the low-water mark: the tail only
    # shrinks as the end moves on (the candidates are in order), so it is found by bisection.
    room = low - fixed - planned
    at = bisect.bisect_left(reachable, -room, key=lambda end: -suffix[end])
    if at < len(reachable):
        return reachable[at], None
    if fixed + asked + suffix[reachable[-1]] > budget.limit:
        return None  # no summary makes it fit: better leave the steps to fit_to_budget
    return reachable[-1], None


def walk_chain(
    cache: SummaryCache,
    zones: Zones,
    ends: Sequence[int],
    keys_from: Callable[[int, str | None], Callable[[int], str]],
    missed: Callable[[int, str | None], set[int] | None] = lambda start, digest: None,
) -> tuple[int, str | None, str | None]:
    """Follow the cached incremental summaries from the span's start as far as they go.

    `keys_from(start, previous_digest)` gives the cache key of the span from `start` to a given
    end; `missed(start, previous_digest)` the ends known to have nothing cached (kept from one
    compile to the next while the cache is unchanged: looked up again, they would miss again), to
    which the ends found missing are added. Returns where the chain stops, its summary text and
    that text's digest (the start and the summary already in the view when nothing is cached).
    """
    start, previous, previous_digest = zones.start, zones.previous, zones.previous_digest
    while True:
        key = keys_from(start, previous_digest)
        known = missed(start, previous_digest)
        found: tuple[int, str] | None = None
        # Furthest first; the ends known to miss are not looked up again (a set difference, in C).
        for candidate in sorted(set(ends).difference(known) if known else ends, reverse=True):
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
