"""What read-back buys: cost with every needed fact shown or recoverable, as settings get more aggressive.

Usage: `python bench/readback.py [FILE_OR_DIR ...] [--window 128000 ...] [--json OUT]`

Each recorded run (default: `tests/data/trajectories/`) is replayed through `coding` at its
defaults and at smaller recency windows, then with shorter digests (fewer paths and error lines
per masked result), with the read-back tools and once without. Per setting, across the runs
(geometric mean of ratios to no compaction; shares are means, the minimum in parentheses):

- `cost`: the cache-weighted cost of the views alone;
- `recall`: `cost` plus one read-back round trip per request whose recorded response uses a fact
  the view does not show (the call, the page as extra input, one extra request; issue 10);
- `kept`: `cost` plus read-back when each page stays in the run's later views (read-back results
  are never compacted): one round trip, then the page re-sent, cached, by every later request;
- `needed`: share of needed facts the view shows; `n|r`: shown or recoverable by read-back;
- `trips`: read-back round trips (recall accounting); `lost`: facts used that nothing recovers.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pydantic_ai_context import ContextProfile, MaskObservations, TiktokenCounter, TrimToolOutputs, profile
from pydantic_ai_context.replay import FactIndex, ReplayResult, geometric_mean, load_histories, replay

DEFAULT_DIR = Path(__file__).resolve().parents[1] / 'tests' / 'data' / 'trajectories'

SETTINGS: tuple[tuple[str, dict[str, Any], dict[str, int] | None], ...] = (
    ('coding', {}, None),
    ('coding(keep_recent=1)', {'keep_recent': 1}, None),
    ('coding(keep_recent=1, step=5)', {'keep_recent': 1, 'step': 5}, None),
    ('coding(keep_recent=1, step=1)', {'keep_recent': 1, 'step': 1}, None),
    ('  + digests of 16 paths', {'keep_recent': 1, 'step': 1}, {'max_paths': 16}),
    ('  + digests of 4 paths, 2 errors', {'keep_recent': 1, 'step': 1}, {'max_paths': 4, 'max_errors': 2}),
    ('  + digests without facts', {'keep_recent': 1, 'step': 1}, {'max_paths': 0, 'max_errors': 0}),
    (
        '  + digests without facts, no read-back',
        {'keep_recent': 1, 'step': 1, 'readback': False},
        {'max_paths': 0, 'max_errors': 0},
    ),
)
"""(label, `profile('coding', ...)` settings, digest limits for mask and trim or None)."""


def build(
    settings: dict[str, Any], digest: dict[str, int] | None, window: int, counter: TiktokenCounter
) -> ContextProfile:
    p = profile('coding', context_window=window, counter=counter, **settings)
    if digest is None:
        return p
    # Fresh copies of mask and trim with shorter digests (the preset does not expose these limits).
    steps = tuple(
        dataclasses.replace(s, **digest) if isinstance(s, MaskObservations | TrimToolOutputs) else s
        for s in p.steps
    )
    return p.replace(steps=steps)


async def run(paths: Sequence[Path], windows: Sequence[int]) -> list[dict[str, Any]]:
    counter = TiktokenCounter()
    logs = [log for path in paths for log in load_histories(path)]
    rows: list[dict[str, Any]] = []
    for window in windows:
        pairs: dict[str, list[tuple[ReplayResult, ReplayResult]]] = {label: [] for label, _, _ in SETTINGS}
        for log in logs:
            facts = FactIndex.build(log)
            base = await replay(log, None, context_window=window, counter=counter, facts=facts)
            for label, settings, digest in SETTINGS:
                result = await replay(
                    log,
                    build(settings, digest, window, counter),
                    context_window=window,
                    counter=counter,
                    facts=facts,
                )
                pairs[label].append((result, base))
        for label, results in pairs.items():
            rows.append(
                {
                    'window': window,
                    'setting': label,
                    'cost': geometric_mean(r.cost / b.cost for r, b in results),
                    'recall': geometric_mean(r.recall_charged_cost / b.cost for r, b in results),
                    'kept': geometric_mean(r.recall_kept_cost / b.cost for r, b in results),
                    'needed': statistics.fmean(r.needed_fact_retention for r, _ in results),
                    'needed_min': min(r.needed_fact_retention for r, _ in results),
                    'needed_or_recoverable': statistics.fmean(r.needed_or_recoverable for r, _ in results),
                    'needed_or_recoverable_min': min(r.needed_or_recoverable for r, _ in results),
                    'round_trips': sum(r.recall_round_trips for r, _ in results),
                    'unrecoverable': sum(r.unrecoverable_facts for r, _ in results),
                    'over': sum(r.requests_over_window for r, _ in results),
                }
            )
    return rows


def table(rows: list[dict[str, Any]]) -> Table:
    out = Table(
        title='coding with read-back: ratios to no compaction (geometric mean over runs)',
        title_justify='left',
    )
    for column in (
        'window',
        'setting',
        'cost',
        'recall',
        'kept',
        'needed (min)',
        'n|r (min)',
        'trips',
        'lost',
        'over',
    ):
        out.add_column(column, justify='left' if column in {'window', 'setting'} else 'right')
    for row in rows:
        out.add_row(
            f'{row["window"] // 1000}k',
            row['setting'],
            f'{row["cost"]:.3f}',
            f'{row["recall"]:.3f}',
            f'{row["kept"]:.3f}',
            f'{row["needed"]:.1%} ({row["needed_min"]:.1%})',
            f'{row["needed_or_recoverable"]:.1%} ({row["needed_or_recoverable_min"]:.1%})',
            str(row['round_trips']),
            str(row['unrecoverable']),
            str(row['over']),
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument('paths', nargs='*', help=f'trajectory files or directories (default: {DEFAULT_DIR})')
    parser.add_argument('--window', type=int, action='append', help='context window(s) (default: 128000)')
    parser.add_argument('--json', type=Path, metavar='OUT', help='write the rows as JSON')
    args = parser.parse_args(argv)
    paths: list[Path] = []
    for raw in args.paths or [str(DEFAULT_DIR)]:
        path = Path(raw)
        paths.extend(sorted(path.glob('*.json')) if path.is_dir() else [path])
    rows = asyncio.run(run(paths, args.window or [128_000]))
    Console(width=160).print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
