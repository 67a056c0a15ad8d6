"""What a slow summariser costs a request: replay on a virtual clock, with and without summarising ahead.

Usage: `python bench/summary_latency.py [FILE_OR_DIR ...] [--window 16000] [--profile long_horizon]
[--summary-latency 1.5] [--request-gap 0.2]`, or `python bench/replay.py --summary-latency 1.5`.

The replay engine (`pydantic_ai_context.replay.replay`) compiles one view per recorded request. Here
each compile runs on a virtual clock:

- the summariser (the offline extractive one) takes `--summary-latency` seconds of virtual time per
  call: it awaits the clock, so a call made in a background task overlaps what follows it;
- between two requests `--request-gap` seconds pass (the model answering, the tools running):
  background summaries progress during that time;
- a compile that waits for the summariser (a synchronous call, or a view over the limit waiting
  for the summary in flight) advances the clock to when the summariser answers; that time is the
  request's *added wait*.

Nothing sleeps: the clock jumps to the next event when every task is waiting on it, so the overlap
of background and foreground is exact and the run takes the time of the compiles alone.

Reported per profile and mode (ahead on, the default, and off, today's synchronous path): the
added wait per request (p50, p95, max), requests waiting over 0.3 s, requests over the window,
summariser calls, summariser tokens spent and wasted (made ahead and never used), cost (with the
waste) and needed-fact retention.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from rich.console import Console
from rich.table import Table

from pydantic_ai_context import ContextProfile, TiktokenCounter, profile
from pydantic_ai_context.events import CompactionEvent
from pydantic_ai_context.replay import (
    FactIndex,
    ReplayResult,
    extractive_summary_model,
    load_histories,
    replay,
)
from pydantic_ai_context.tokens import TokenCounter

DEFAULT_DIR = Path(__file__).resolve().parents[1] / 'tests' / 'data' / 'trajectories'
WAIT_TARGET = 0.3
"""Seconds a compile may wait for the summariser (the issue's target)."""


class VirtualClock:
    """Time that passes only when every task waits on it (then it jumps to the next wake-up)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._order), future))
        await future

    def next_wake(self) -> float | None:
        while self._sleepers and self._sleepers[0][2].done():  # a cancelled sleeper
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def advance_to(self, when: float) -> None:
        self.now = max(self.now, when)
        while self._sleepers and self._sleepers[0][0] <= self.now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)


async def _until_idle() -> None:
    """Let every runnable task run until all of them wait (on the clock, or on each other)."""
    loop: Any = asyncio.get_running_loop()
    for _ in range(100_000):
        await asyncio.sleep(0)
        if not getattr(loop, '_ready', True):
            return


def slow_summariser(clock: VirtualClock, latency: float) -> FunctionModel:
    """The offline extractive summariser, taking `latency` seconds of virtual time per call."""
    inner = extractive_summary_model()
    function: Any = inner.function

    async def summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await clock.sleep(latency)
        response: ModelResponse = function(messages, info)
        return response

    return FunctionModel(summarise, model_name='extractive-summariser')


@dataclass
class TimedCompiler:
    """A profile whose compiles run on the virtual clock, `gap` seconds apart; records each wait."""

    profile: ContextProfile
    clock: VirtualClock
    gap: float
    waits: list[float] = field(default_factory=list[float])

    def __getattr__(self, name: str) -> Any:  # events, archive, readback, name: the profile's
        return getattr(self.profile, name)

    async def settle_background(self) -> None:
        """The time between requests is the clock's `gap` (see `compile`), not a wait for the summary."""

    async def close_background(self) -> None:
        """`replay_with_latency` closes the profile after the replay and counts what that discards."""

    async def compile(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        if self.waits:
            await self._run_until(self.clock.now + self.gap)  # the model answers, the tools run
        started = self.clock.now
        task = asyncio.ensure_future(self.profile.compile(messages))
        while True:
            await _until_idle()
            if task.done():
                break
            wake = self.clock.next_wake()
            if wake is None:
                continue  # waiting on something else that is runnable
            self.clock.advance_to(wake)
        self.waits.append(self.clock.now - started)
        return task.result()

    async def _run_until(self, when: float) -> None:
        while True:
            await _until_idle()
            wake = self.clock.next_wake()
            if wake is None or wake > when:
                break
            self.clock.advance_to(wake)
        self.clock.advance_to(when)


@dataclass
class LatencyResult:
    label: str
    result: ReplayResult
    waits: list[float]
    spent_tokens: int
    wasted_tokens: int
    wasted_cost: float
    stats: dict[str, int]

    @property
    def cost(self) -> float:
        return self.result.cost + self.wasted_cost

    def row(self) -> dict[str, Any]:
        waits = sorted(self.waits) or [0.0]
        return {
            'profile': self.label,
            'wait_p50': statistics.median(waits),
            'wait_p95': waits[min(len(waits) - 1, int(0.95 * len(waits)))],
            'wait_max': waits[-1],
            'waits_over_target': sum(1 for w in waits if w > WAIT_TARGET),
            'requests': self.result.requests,
            'over_window': self.result.requests_over_window,
            'summary_calls': self.stats.get('calls', self.result.summary_calls),
            'summarised_requests': self.result.summarised_compiles,
            'spent_tokens': self.spent_tokens,
            'wasted_tokens': self.wasted_tokens,
            'wasted_share': self.wasted_tokens / self.spent_tokens if self.spent_tokens else 0.0,
            'cost': self.cost,
            'needed_fact_retention': self.result.needed_fact_retention,
        }


async def replay_with_latency(
    log: list[ModelMessage],
    name: str,
    *,
    window: int,
    counter: TokenCounter,
    latency: float,
    gap: float,
    ahead: bool,
    facts: FactIndex | None = None,
    **settings: Any,
) -> LatencyResult:
    """Replay `log` through preset `name` with a summariser of `latency` seconds, `gap` seconds between requests."""
    clock = VirtualClock()
    seen: list[CompactionEvent] = []
    made = profile(
        name,
        context_window=window,
        counter=counter,
        summary_model=slow_summariser(clock, latency),
        summary_ahead=ahead,
        on_compaction=seen.append,
        **settings,
    )
    timed = TimedCompiler(made, clock, gap)
    label = f'{name} ({"ahead" if ahead else "sync"})'
    result = await replay(log, timed, context_window=window, counter=counter, facts=facts, label=label)
    before_close = len(seen)
    await made.close_background()
    late = seen[before_close:]  # discarded after the last request: not in the replay's cost yet
    in_price, out_price = result.summary_input_price, result.summary_output_price
    spent = sum(e.summary_input_tokens + e.summary_output_tokens for e in seen)
    discarded = [e for e in seen if e.details.get('summary_discarded')]
    return LatencyResult(
        label=label,
        result=result,
        waits=timed.waits,
        spent_tokens=spent,
        wasted_tokens=sum(e.summary_input_tokens + e.summary_output_tokens for e in discarded),
        wasted_cost=sum(
            e.summary_input_tokens * in_price + e.summary_output_tokens * out_price for e in late
        ),
        stats={**made._background.stats(), 'calls': sum(e.summary_calls for e in seen)},
    )


def latency_table(title: str, rows: Sequence[dict[str, Any]]) -> Table:
    table = Table(title=title)
    for column in (
        'profile',
        'wait p50',
        'wait p95',
        'wait max',
        f'waits >{WAIT_TARGET}s',
        'over window',
        'summary calls',
        'summarised req.',
        'summariser tokens',
        'wasted',
        'cost',
        'needed facts',
    ):
        table.add_column(column, justify='left' if column == 'profile' else 'right')
    for row in rows:
        table.add_row(
            row['profile'],
            f'{row["wait_p50"]:.2f}s',
            f'{row["wait_p95"]:.2f}s',
            f'{row["wait_max"]:.2f}s',
            str(row['waits_over_target']),
            str(row['over_window']),
            str(row['summary_calls']),
            f'{row["summarised_requests"]}/{row["requests"]}',
            f'{row["spent_tokens"]:,}',
            f'{row["wasted_tokens"]:,} ({row["wasted_share"]:.0%})',
            f'{row["cost"]:,.0f}',
            f'{row["needed_fact_retention"]:.3f}',
        )
    return table


SUMMARISING = ('long_horizon', 'chat')


async def latency_report(
    paths: Sequence[Path],
    *,
    windows: Sequence[int],
    profiles: Sequence[str],
    latency: float,
    gap: float,
    console: Console,
    counter: TiktokenCounter | None = None,
) -> list[dict[str, Any]]:
    """Replay every file through the summarising profiles, ahead and synchronous; print and return the rows."""
    counter = counter or TiktokenCounter()
    rows: list[dict[str, Any]] = []
    for path in paths:
        for n, log in enumerate(load_histories(path)):
            key = path.stem if n == 0 else f'{path.stem}[{n}]'
            facts = FactIndex.build(log)
            for window in windows:
                per_file: list[dict[str, Any]] = []
                for name in profiles:
                    for ahead in (False, True):
                        found = await replay_with_latency(
                            log,
                            name,
                            window=window,
                            counter=counter,
                            latency=latency,
                            gap=gap,
                            ahead=ahead,
                            facts=facts,
                        )
                        per_file.append({**found.row(), 'file': key, 'window': window})
                title = f'{key}  (window {window:,}, summariser {latency:g} s, {gap:g} s between requests)'
                console.print(latency_table(title, per_file))
                rows.extend(per_file)
    console.print(latency_table('all files (sums; waits over every request)', _totals(rows)))
    return rows


def _totals(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for label in dict.fromkeys(r['profile'] for r in rows):
        mine = [r for r in rows if r['profile'] == label]
        spent = sum(r['spent_tokens'] for r in mine)
        wasted = sum(r['wasted_tokens'] for r in mine)
        out.append(
            {
                'profile': label,
                'wait_p50': statistics.median(r['wait_p50'] for r in mine),
                'wait_p95': max(r['wait_p95'] for r in mine),
                'wait_max': max(r['wait_max'] for r in mine),
                'waits_over_target': sum(r['waits_over_target'] for r in mine),
                'requests': sum(r['requests'] for r in mine),
                'over_window': sum(r['over_window'] for r in mine),
                'summary_calls': sum(r['summary_calls'] for r in mine),
                'summarised_requests': sum(r['summarised_requests'] for r in mine),
                'spent_tokens': spent,
                'wasted_tokens': wasted,
                'wasted_share': wasted / spent if spent else 0.0,
                'cost': sum(r['cost'] for r in mine),
                'needed_fact_retention': statistics.mean(r['needed_fact_retention'] for r in mine),
            }
        )
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument('paths', nargs='*', help=f'trajectory files or directories (default: {DEFAULT_DIR})')
    parser.add_argument('--window', type=int, action='append', help='context window(s) (default: 16000)')
    parser.add_argument('--profile', action='append', help=f'summarising preset(s) (default: {SUMMARISING})')
    add_latency_arguments(parser)
    return parser.parse_args(argv)


def add_latency_arguments(parser: argparse.ArgumentParser, *, default: float | None = 1.5) -> None:
    parser.add_argument(
        '--summary-latency',
        type=float,
        default=default,
        metavar='SECONDS',
        help='simulate a summariser taking this long per call (virtual clock); report the added wait',
    )
    parser.add_argument(
        '--request-gap',
        type=float,
        default=0.2,
        metavar='SECONDS',
        help='with --summary-latency: model and tool time between two requests (default: 0.2)',
    )


def input_files(paths: Sequence[str]) -> list[Path]:
    found: list[Path] = []
    for raw in paths or [str(DEFAULT_DIR)]:
        path = Path(raw)
        found.extend(sorted(path.glob('*.json')) if path.is_dir() else [path])
    return found


async def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    await latency_report(
        input_files(args.paths),
        windows=args.window or [16_000],
        profiles=args.profile or list(SUMMARISING),
        latency=args.summary_latency,
        gap=args.request_gap,
        console=Console(width=170),
    )
    return 0


if __name__ == '__main__':
    sys.exit(asyncio.run(main()))
