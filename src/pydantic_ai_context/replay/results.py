"""What a replay measured: one `RequestRecord` per model request, aggregated by `ReplayResult`."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
)


@dataclass(frozen=True, kw_only=True)
class RequestRecord:
    """What one replayed model request would have sent, and what it cost."""

    index: int
    """Index in the log of the response this request produced (its input is `log[:index]`)."""
    log_messages: int
    log_tokens: int
    """Tokens of the uncompacted input."""
    view_messages: int
    view_tokens: int
    """Tokens of the request (what the provider bills as input): the view's messages, the newest
    request's instructions once, and any tools or overhead supplied to `replay`."""
    cached_tokens: int
    """Tokens of the longest run of leading view messages equal to the previous request's view (as
    sent: metadata, which providers never receive, is not compared)."""
    prefix_break: bool = False
    """The previous request is not a prefix of this one: some message of the previous view (or its
    instructions or tools) differs or is gone, so `cached_tokens` is less than the previous
    request's `view_tokens` and the rest is read uncached. Never set on the first request."""
    breakpoint_cached_tokens: int = 0
    """What a provider that caches at explicit breakpoints (Anthropic, Bedrock, with pydantic-ai's
    `Caching`) would serve: the longest prefix ending at a breakpoint of this request, or up to 20
    content blocks before one, that an earlier request wrote (`replay.breakpoints`). Equal to
    `cached_tokens` when this request appends to the previous one; after a change more than about
    20 blocks from the end, only the tools and instructions."""
    perfect_cached_tokens: int = 0
    """What a cache that never breaks would serve: every token of the previous request, as many as
    this request holds (`min(view_tokens, previous view_tokens)`; 0 on the first request). Only the
    tokens appended since are uncached."""
    output_tokens: int
    """Tokens of the recorded response."""
    compile_ms: float
    """Wall time of compiling the view (0 for the `none` baseline)."""
    over_window: bool
    """The view is larger than the context window (a provider would reject the request)."""
    facts: int
    fact_retention: float
    needed_facts: int
    needed_fact_retention: float
    summary_calls: int = 0
    summary_input_tokens: int = 0
    summary_output_tokens: int = 0
    dropped_messages: int = 0
    """Messages `fit_to_budget` dropped from this view (0 when it dropped none)."""
    no_summary: str | None = None
    """Why the summarising step fired and made no summary for this view (`CompactionEvent.no_summary`),
    if it did: what `fit_to_budget` dropped, it dropped for this reason."""
    summarised: bool = False
    """The view holds a summary (new or reused) of earlier messages."""
    error: str | None = None
    """Set when compiling raised `ContextBudgetExceeded`; the uncompacted input then stands in for
    the view and the request counts as over the window."""
    recall_missing: int = 0
    """Facts the recorded response uses that the view does not show."""
    recall_unrecoverable: int = 0
    """Of those, facts no read-back reaches (no read-back tools, or no marker names them)."""
    recall_round_trips: int = 0
    """Extra requests reading back would have taken before this response (see `pydantic_ai_context.replay.recall`)."""
    recall_cached_tokens: int = 0
    recall_uncached_tokens: int = 0
    recall_kept_round_trips: int = 0
    """Extra requests when read-back pages stay in the run's later views (they are never compacted)."""
    recall_kept_tokens: int = 0
    """Tokens the kept accounting adds to this request: its round trips and the earlier pages it re-sends."""
    recall_kept_uncached_tokens: int = 0
    """Of `recall_kept_tokens`, those sent uncached (the new calls and pages); the rest is cached."""
    needed_or_recoverable: float = 1.0
    """Share of the needed facts the view shows or read-back reaches (1.0 with none needed)."""
    instructions_tokens: int = 0
    """Of `view_tokens`, the instructions the request sends (counted once)."""
    overhead_tokens: int = 0
    """Of `view_tokens`, what the messages do not carry: tool definitions and instructions of the
    agent given to `replay`, and its `overhead_tokens`."""
    model_texts_kept: float = 1.0
    """Share of the model's own earlier texts (response `TextPart`s of 40+ characters) the view shows
    verbatim (1.0 with none; see `_model_texts`)."""

    @property
    def uncached_tokens(self) -> int:
        return self.view_tokens - self.cached_tokens


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    """The records of one replay and their aggregates.

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context import HeuristicCounter
        from pydantic_ai_context.replay import replay

        log = [ModelRequest(parts=[UserPromptPart('hi')]), ModelResponse(parts=[TextPart('hello')])]
        result = asyncio.run(replay(log, None, context_window=32_000, counter=HeuristicCounter()))
        assert result.requests == 1 and result.ratio_to(result) == 1.0
        ```
    """

    profile: str
    """`'none'` for no compaction, else the profile's name (or the label given to `replay`)."""
    context_window: int
    records: tuple[RequestRecord, ...]
    messages: list[ModelMessage] = field(repr=False)
    """The replayed log: the recorded messages, each response carrying the simulated usage."""
    cache_read_price: float = 0.1
    summary_input_price: float = 1.0
    summary_output_price: float = 4.0

    @property
    def requests(self) -> int:
        return len(self.records)

    @property
    def input_tokens(self) -> int:
        return sum(r.view_tokens for r in self.records)

    @property
    def cached_tokens(self) -> int:
        return sum(r.cached_tokens for r in self.records)

    @property
    def uncached_tokens(self) -> int:
        return self.input_tokens - self.cached_tokens

    @property
    def summary_calls(self) -> int:
        return sum(r.summary_calls for r in self.records)

    @property
    def cached_share(self) -> float:
        """Share of all input tokens a provider could serve from its prompt cache."""
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def prefix_breaks(self) -> int:
        """Requests the previous request is not a prefix of (`RequestRecord.prefix_break`)."""
        return sum(1 for r in self.records if r.prefix_break)

    @property
    def breaks_per_100(self) -> float:
        """`prefix_breaks` per 100 requests (0.0 with no requests)."""
        return 100 * self.prefix_breaks / self.requests if self.requests else 0.0

    @property
    def dropping_compiles(self) -> int:
        """Requests whose view had whole steps dropped by `fit_to_budget`."""
        return sum(1 for r in self.records if r.dropped_messages)

    @property
    def drop_reasons(self) -> dict[str, int]:
        """Why no summary took what `fit_to_budget` dropped: the requests with drops, by the reason
        the summarising step gave (`'beside a summary'` when the view held one; `'no summary step
        fired'` otherwise). Empty when nothing was dropped."""
        reasons: dict[str, int] = {}
        for r in self.records:
            if r.dropped_messages:
                why = r.no_summary or ('beside a summary' if r.summarised else 'no summary step fired')
                reasons[why] = reasons.get(why, 0) + 1
        return reasons

    @property
    def summarised_compiles(self) -> int:
        """Requests whose view held a summary of earlier messages."""
        return sum(1 for r in self.records if r.summarised)

    @property
    def summary_input_tokens(self) -> int:
        return sum(r.summary_input_tokens for r in self.records)

    @property
    def summary_output_tokens(self) -> int:
        return sum(r.summary_output_tokens for r in self.records)

    def _cost_with(self, cached: int) -> float:
        """The cost of these requests with `cached` of their tokens read from the cache (at
        `cache_read_price`), the rest uncached, and the summariser's calls."""
        return (
            self.input_tokens
            - cached
            + cached * self.cache_read_price
            + self.summary_input_tokens * self.summary_input_price
            + self.summary_output_tokens * self.summary_output_price
        )

    @property
    def cost(self) -> float:
        """Cache-weighted cost in input-token units: uncached x1.0, cached x`cache_read_price`,
        summariser input x`summary_input_price` and output x`summary_output_price`."""
        return self._cost_with(self.cached_tokens)

    @property
    def breakpoint_cached_tokens(self) -> int:
        return sum(r.breakpoint_cached_tokens for r in self.records)

    @property
    def breakpoint_cost(self) -> float:
        """`cost` on a provider that caches at explicit breakpoints (`RequestRecord.breakpoint_cached_tokens`
        cached, the rest of each request uncached; cache writes are not charged extra, as in `cost`)."""
        return self._cost_with(self.breakpoint_cached_tokens)

    @property
    def perfect_cache_cost(self) -> float:
        """`cost` if the prompt cache never broke: each request's tokens up to the previous request's
        size cached (`perfect_cached_tokens`), only what it appends uncached; the summariser is charged
        as in `cost`. The floor for these view sizes: `cost - perfect_cache_cost` is what the prefix
        breaks cost."""
        return self._cost_with(sum(r.perfect_cached_tokens for r in self.records))

    @property
    def recall_round_trips(self) -> int:
        return sum(r.recall_round_trips for r in self.records)

    @property
    def recall_cost(self) -> float:
        """What the read-back round trips cost: their prefix cached, their calls and pages uncached."""
        return sum(
            r.recall_uncached_tokens + r.recall_cached_tokens * self.cache_read_price for r in self.records
        )

    @property
    def recall_charged_cost(self) -> float:
        """`cost` plus `recall_cost`: what the run costs when every fact the agent uses must be in reach."""
        return self.cost + self.recall_cost

    @property
    def recall_kept_cost(self) -> float:
        """`cost` plus read-back when each page stays in the run's later views: its round trips once,
        then the page re-sent (cached) by every later request of the run."""
        kept = sum(
            r.recall_kept_uncached_tokens
            + (r.recall_kept_tokens - r.recall_kept_uncached_tokens) * self.cache_read_price
            for r in self.records
        )
        return self.cost + kept

    @property
    def unrecoverable_facts(self) -> int:
        """Facts the agent used that the view lacked and no read-back could reach (summed over requests)."""
        return sum(r.recall_unrecoverable for r in self.records)

    @property
    def needed_or_recoverable(self) -> float:
        """Mean over requests of the share of needed facts shown or reachable by read-back."""
        return _mean(r.needed_or_recoverable for r in self.records)

    @property
    def model_texts_kept(self) -> float:
        """Mean over requests of the share of the model's own earlier texts the view shows verbatim."""
        return _mean(r.model_texts_kept for r in self.records)

    @property
    def peak_view_tokens(self) -> int:
        return max((r.view_tokens for r in self.records), default=0)

    @property
    def requests_over_window(self) -> int:
        return sum(1 for r in self.records if r.over_window)

    @property
    def errors(self) -> int:
        """Requests whose compile raised `ContextBudgetExceeded`."""
        return sum(1 for r in self.records if r.error is not None)

    @property
    def fact_retention(self) -> float:
        """Mean over requests of the share of execution facts the view still shows."""
        return _mean(r.fact_retention for r in self.records)

    @property
    def needed_fact_retention(self) -> float:
        """Mean over requests of the share of needed facts the view still shows."""
        return _mean(r.needed_fact_retention for r in self.records)

    @property
    def compile_ms_median(self) -> float:
        times = [r.compile_ms for r in self.records]
        return statistics.median(times) if times else 0.0

    @property
    def compile_ms_p95(self) -> float:
        return percentile([r.compile_ms for r in self.records], 95)

    def ratio_to(self, baseline: ReplayResult, metric: str = 'cost') -> float:
        """This result's `metric` (`'cost'`, `'input_tokens'`, `'peak_view_tokens'`...) over `baseline`'s."""
        mine, theirs = float(getattr(self, metric)), float(getattr(baseline, metric))
        if theirs == 0:
            return 1.0 if mine == 0 else math.inf
        return mine / theirs

    def summary(self) -> dict[str, Any]:
        """The aggregates as a flat JSON-ready dict."""
        return {
            'profile': self.profile,
            'context_window': self.context_window,
            'requests': self.requests,
            'input_tokens': self.input_tokens,
            'cached_tokens': self.cached_tokens,
            'uncached_tokens': self.uncached_tokens,
            'cost': self.cost,
            'peak_view_tokens': self.peak_view_tokens,
            'requests_over_window': self.requests_over_window,
            'errors': self.errors,
            'fact_retention': self.fact_retention,
            'needed_fact_retention': self.needed_fact_retention,
            'needed_or_recoverable': self.needed_or_recoverable,
            'model_texts_kept': self.model_texts_kept,
            'recall_charged_cost': self.recall_charged_cost,
            'recall_kept_cost': self.recall_kept_cost,
            'recall_round_trips': self.recall_round_trips,
            'unrecoverable_facts': self.unrecoverable_facts,
            'summary_calls': self.summary_calls,
            'cached_share': self.cached_share,
            'prefix_breaks': self.prefix_breaks,
            'breaks_per_100': self.breaks_per_100,
            'perfect_cache_cost': self.perfect_cache_cost,
            'breakpoint_cost': self.breakpoint_cost,
            'dropping_compiles': self.dropping_compiles,
            'summarised_compiles': self.summarised_compiles,
            'drop_reasons': self.drop_reasons,
            'summary_input_tokens': self.summary_input_tokens,
            'summary_output_tokens': self.summary_output_tokens,
            'compile_ms_median': self.compile_ms_median,
            'compile_ms_p95': self.compile_ms_p95,
        }

    def to_dict(self) -> dict[str, Any]:
        """`summary()` plus every request record."""
        return {**self.summary(), 'records': [dataclasses.asdict(r) for r in self.records]}


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 1.0


def percentile(values: Sequence[float], pct: float) -> float:
    """The `pct` percentile of `values` (nearest rank); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def geometric_mean(values: Iterable[float]) -> float:
    """Geometric mean of positive ratios (the usual way to average ratios across files)."""
    items = [v for v in values if v > 0 and math.isfinite(v)]
    if not items:
        return math.nan
    return math.exp(sum(math.log(v) for v in items) / len(items))
