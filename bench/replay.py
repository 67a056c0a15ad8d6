"""Replay recorded agent runs through every profile and compare cost and fact retention with no compaction.

Usage: `python bench/replay.py [FILE_OR_DIR ...] [--window 128000 --window 32000] [--profile NAME ...]
[--transparent] [--no-harness] [--json OUT] [--summary-latency SECONDS [--request-gap SECONDS]]`

`--summary-latency 1.5` adds, for the summarising presets, a replay on a virtual clock where the
summariser takes that long per call and `--request-gap` (0.2 s) passes between requests: the
added wait per request (p50, p95, max) and the summariser tokens spent and wasted, with summaries
made ahead (the default) and synchronously (see `bench/summary_latency.py`).

A profile may carry settings: `--profile 'coding(keep_recent=1, step=1)'`.

Default input: every `*.json` in `tests/data/trajectories/` (the recorded runs the repository ships).
Each file is replayed through `none` (the input as is), every preset of `available_profiles()`
except `transparent` (add it with `--transparent`), and, when `pydantic_ai_harness` is importable
(the `bench` extra; never a runtime dependency), two of its zero-LLM configurations at settings
comparable to the presets:

- `harness_clear`: `ClearToolResults(max_tokens=T, keep_pairs=10)`;
- `harness_tiered`: `TieredCompaction([DeduplicateFileReads(), ClearToolResults(keep_pairs=10),
  SlidingWindowCompaction(keep_tokens=T // 2)], target_tokens=T)`;

where `T = 0.75 x (window - 4,096)`: the presets' default soft threshold (0.75) of the tokens left
after their default `reserved_output` (4,096), measured with the same tiktoken tokenizer; keeping the
last 10 tool results follows the published observation-masking setting (last 10 observations).
Harness strategies rewrite the run's history (their edits persist), so their adapter carries its
compacted history from one request to the next, as a real run would.

Numbers per file and window: input tokens, cache-weighted cost (uncached x1.0, cached x0.1,
summariser input x1.0 and output x4.0), its ratio to `none`, the cached share of input tokens,
prefix breaks per 100 requests (requests whose view does not begin with the whole previous view: see
`RequestRecord.prefix_break`), the perfect-cache cost (what the same views would cost if the cache
never broke: each request's tokens up to the previous request's size cached, only what it appends
uncached; its ratio to `none` is the floor for those view sizes), peak view tokens, requests over
the window, fact retention, needed-fact retention, model texts kept
(the share of the agent's own earlier texts, response `TextPart`s of 40+ characters, that the view
shows verbatim: see `pydantic_ai_context._model_texts`), summariser
calls, the requests whose view had steps dropped by `fit_to_budget` and those whose view held a
summary, median compile ms, the recall-charged cost (one read-back round trip per request whose
recorded response uses a fact the view lacks: see `pydantic_ai_context.replay.recall`) and the share of
needed facts shown or recoverable by read-back. Then the geometric mean of the ratios to `none`
across files, per profile and window. `bench/readback.py` compares read-back settings.

`bench/heldout/` holds runs the defaults were not tuned on; replay them separately
(`python bench/replay.py bench/heldout`) to check that the defaults are not fitted to the shared runs.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import functools
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ToolCallPart
from rich.console import Console
from rich.table import Table

import summary_latency  # bench/summary_latency.py (this script's directory is on sys.path)
from pydantic_ai_context import TiktokenCounter, available_profiles, profile
from pydantic_ai_context.cli.replay import drop_lines
from pydantic_ai_context.replay import (
    FactIndex,
    ReplayResult,
    ViewCompiler,
    extractive_summary_model,
    geometric_mean,
    load_histories,
    replay,
)

DEFAULT_DIR = summary_latency.DEFAULT_DIR
WINDOWS = (128_000, 32_000, 16_000)
RESERVED_OUTPUT = 4_096
SOFT_THRESHOLD = 0.75
KEEP_PAIRS = 10


# --- pydantic-ai-harness, driven offline ------------------------------------------------------


@dataclass(kw_only=True)
class HarnessStrategy:
    """A pydantic-ai-harness compaction capability replayed outside an agent run.

    Each compile calls the capability's `before_model_request` with a `RunContext` whose
    `messages` is the history the harness left after the previous request plus the new messages;
    what the capability writes back into `ctx.messages` becomes the history for the next request.
    """

    name: str
    capability: Any
    _history: list[ModelMessage] = field(default_factory=list[ModelMessage])
    _seen: int = 0

    async def compile(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
        from pydantic_ai.models.test import TestModel
        from pydantic_ai.tools import RunContext
        from pydantic_ai.usage import RunUsage

        history = [*self._history, *messages[self._seen :]]
        model = TestModel()
        ctx: RunContext[None] = RunContext(deps=None, model=model, usage=RunUsage(), messages=history)
        request = ModelRequestContext(
            model=model,
            messages=list(history),
            model_settings=None,
            model_request_parameters=ModelRequestParameters(),
        )
        sent = await self.capability.before_model_request(ctx, request)
        self._history = list(ctx.messages)
        self._seen = len(messages)
        return list(sent.messages)


def file_read_key(call: ToolCallPart) -> str | None:
    """The file a call reads, for `DeduplicateFileReads` (which has no default): editor views,
    `read_file`-style tools, and a plain `cat FILE` in a shell tool."""
    args = call.args_as_dict()
    if call.tool_name in {'str_replace_editor', 'file_editor'}:
        return str(args['path']) if args.get('command') == 'view' and args.get('path') else None
    if call.tool_name in {'read_file', 'view', 'cat', 'open'}:
        path = args.get('path') or args.get('file') or args.get('file_path')
        return str(path) if path else None
    command = args.get('command')
    if call.tool_name in {'bash', 'execute_bash', 'shell'} and isinstance(command, str):
        words = command.strip().split()
        if len(words) == 2 and words[0] == 'cat':
            return words[1]
    return None


def harness_factories(window: int, tokenizer: Callable[[str], int]) -> dict[str, Callable[[], ViewCompiler]]:
    """Fresh harness strategies for one replay at `window`, or none when the harness is not installed."""
    try:
        from pydantic_ai_harness.compaction import (
            ClearToolResults,
            DeduplicateFileReads,
            SlidingWindowCompaction,
            TieredCompaction,
        )
    except ImportError:
        return {}
    target = int(SOFT_THRESHOLD * (window - RESERVED_OUTPUT))
    file_key = file_read_key

    def clear() -> ViewCompiler:
        capability = ClearToolResults[None](max_tokens=target, keep_pairs=KEEP_PAIRS, tokenizer=tokenizer)
        return HarnessStrategy(name='harness_clear', capability=capability)

    def tiered() -> ViewCompiler:
        capability = TieredCompaction[None](
            tiers=[
                DeduplicateFileReads[None](file_key=file_key, tokenizer=tokenizer),
                ClearToolResults[None](max_tokens=1, keep_pairs=KEEP_PAIRS, tokenizer=tokenizer),
                SlidingWindowCompaction[None](max_tokens=1, keep_tokens=target // 2, tokenizer=tokenizer),
            ],
            target_tokens=target,
            tokenizer=tokenizer,
        )
        return HarnessStrategy(name='harness_tiered', capability=capability)

    return {'harness_clear': clear, 'harness_tiered': tiered}


# --- running ----------------------------------------------------------------------------------


def profile_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """`'coding(keep_recent=1, step=1)'` -> `('coding', {'keep_recent': 1, 'step': 1})`; a bare name has no settings."""
    node = ast.parse(spec, mode='eval').body
    if isinstance(node, ast.Name):
        return node.id, {}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
        return node.func.id, {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    raise ValueError(f'not a profile spec: {spec!r} (expected NAME or NAME(setting=value, ...))')


async def replay_file(
    log: list[ModelMessage],
    *,
    windows: Sequence[int],
    profiles: Sequence[str],
    harness: bool,
    counter: TiktokenCounter,
    cache_read_price: float,
) -> dict[int, dict[str, ReplayResult]]:
    facts = FactIndex.build(log)
    out: dict[int, dict[str, ReplayResult]] = {}
    for window in windows:
        compilers: dict[str, Callable[[], ViewCompiler | None]] = {'none': lambda: None}
        for spec in profiles:
            name, settings = profile_spec(spec)
            # Summarising presets get the deterministic extractive summariser: offline, and its
            # calls are charged like a real model's (input x1.0, output x4.0).
            compilers[spec] = functools.partial(
                profile,
                name,
                context_window=window,
                counter=counter,
                summary_model=extractive_summary_model(),
                **settings,
            )
        if harness:
            compilers.update(harness_factories(window, counter.count_text))
        results: dict[str, ReplayResult] = {}
        for label, make in compilers.items():
            results[label] = await replay(
                log,
                make(),
                context_window=window,
                counter=counter,
                cache_read_price=cache_read_price,
                facts=facts,
                label=label,
            )
        out[window] = results
    return out


# --- rendering --------------------------------------------------------------------------------


def _pct(value: float) -> str:
    return f'{value:.1%}'


def file_table(title: str, results: dict[str, ReplayResult]) -> Table:
    base = results['none']
    table = Table(title=title, title_justify='left')
    for column in (
        'profile',
        'input tok',
        'cost',
        'ratio',
        'cached',
        'breaks/100',
        'perfect',
        'bp cost',
        'peak',
        'over',
        'facts',
        'needed',
        'texts',
        'recall',
        'n|r',
        'sum calls',
        'dropped',
        'summarised',
        'ms (med)',
    ):
        table.add_column(column, justify='left' if column == 'profile' else 'right')
    for label, result in results.items():
        table.add_row(
            label,
            f'{result.input_tokens:,}',
            f'{result.cost:,.0f}',
            f'{result.ratio_to(base):.3f}',
            _pct(result.cached_share),
            f'{result.breaks_per_100:.1f}',
            f'{result.perfect_cache_cost / base.cost:.3f}',
            f'{result.breakpoint_cost / base.breakpoint_cost:.3f}',
            f'{result.peak_view_tokens:,}',
            f'{result.requests_over_window}' + (f' ({result.errors} err)' if result.errors else ''),
            _pct(result.fact_retention),
            _pct(result.needed_fact_retention),
            _pct(result.model_texts_kept),
            f'{result.recall_charged_cost / base.cost:.3f}',
            _pct(result.needed_or_recoverable),
            f'{result.summary_calls}',
            f'{result.dropping_compiles}/{result.requests}',
            f'{result.summarised_compiles}/{result.requests}',
            f'{result.compile_ms_median:.2f}',
        )
    return table


def summary_rows(all_results: dict[str, dict[int, dict[str, ReplayResult]]]) -> list[dict[str, Any]]:
    """Per window and profile: geometric means of the ratios to `none` across files, mean retentions."""
    rows: list[dict[str, Any]] = []
    windows = sorted({w for per_file in all_results.values() for w in per_file}, reverse=True)
    for window in windows:
        per_window = [per_file[window] for per_file in all_results.values() if window in per_file]
        labels = list(dict.fromkeys(label for results in per_window for label in results))
        for label in labels:
            pairs = [(r[label], r['none']) for r in per_window if label in r]
            rows.append(
                {
                    'window': window,
                    'profile': label,
                    'files': len(pairs),
                    'cost_ratio': geometric_mean(res.ratio_to(base) for res, base in pairs),
                    'input_ratio': geometric_mean(res.ratio_to(base, 'input_tokens') for res, base in pairs),
                    'peak_ratio': geometric_mean(
                        res.ratio_to(base, 'peak_view_tokens') for res, base in pairs
                    ),
                    'requests_over_window': sum(res.requests_over_window for res, _ in pairs),
                    'errors': sum(res.errors for res, _ in pairs),
                    'requests': sum(res.requests for res, _ in pairs),
                    'cached_share': statistics.fmean(res.cached_share for res, _ in pairs),
                    'prefix_breaks': sum(res.prefix_breaks for res, _ in pairs),
                    'breaks_per_100': 100
                    * sum(res.prefix_breaks for res, _ in pairs)
                    / max(1, sum(res.requests for res, _ in pairs)),
                    'perfect_cost_ratio': geometric_mean(
                        res.perfect_cache_cost / base.cost for res, base in pairs
                    ),
                    'breakpoint_cost_ratio': geometric_mean(
                        res.breakpoint_cost / base.breakpoint_cost for res, base in pairs
                    ),
                    'summary_calls': sum(res.summary_calls for res, _ in pairs),
                    'dropping_compiles': sum(res.dropping_compiles for res, _ in pairs),
                    'summarised_compiles': sum(res.summarised_compiles for res, _ in pairs),
                    'fact_retention': statistics.fmean(res.fact_retention for res, _ in pairs),
                    'needed_fact_retention': statistics.fmean(res.needed_fact_retention for res, _ in pairs),
                    'min_needed_fact_retention': min(res.needed_fact_retention for res, _ in pairs),
                    'model_texts_kept': statistics.fmean(res.model_texts_kept for res, _ in pairs),
                    'min_model_texts_kept': min(res.model_texts_kept for res, _ in pairs),
                    'recall_ratio': geometric_mean(
                        res.recall_charged_cost / base.cost for res, base in pairs
                    ),
                    'recall_kept_ratio': geometric_mean(
                        res.recall_kept_cost / base.cost for res, base in pairs
                    ),
                    'needed_or_recoverable': statistics.fmean(res.needed_or_recoverable for res, _ in pairs),
                    'min_needed_or_recoverable': min(res.needed_or_recoverable for res, _ in pairs),
                    'recall_round_trips': sum(res.recall_round_trips for res, _ in pairs),
                    'compile_ms_median': statistics.median(res.compile_ms_median for res, _ in pairs),
                    'compile_ms_p95_max': max(res.compile_ms_p95 for res, _ in pairs),
                }
            )
    return rows


def summary_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(
        title='Across files: geometric mean of ratios to none; mean retention', title_justify='left'
    )
    columns = (
        'window',
        'profile',
        'cost/none',
        'input/none',
        'peak/none',
        'cached',
        'breaks/100',
        'perfect/none',
        'bp cost/none',
        'over',
        'facts',
        'needed',
        'texts (min)',
        'sum calls',
        'dropped',
        'summarised',
        'recall/none',
        'n|r (min)',
        'ms (med)',
    )
    for column in columns:
        table.add_column(column, justify='left' if column in {'window', 'profile'} else 'right')
    for row in rows:
        table.add_row(
            f'{row["window"] // 1000}k',
            row['profile'],
            f'{row["cost_ratio"]:.3f}',
            f'{row["input_ratio"]:.3f}',
            f'{row["peak_ratio"]:.3f}',
            _pct(row['cached_share']),
            f'{row["breaks_per_100"]:.1f}',
            f'{row["perfect_cost_ratio"]:.3f}',
            f'{row["breakpoint_cost_ratio"]:.3f}',
            str(row['requests_over_window']) + (f' ({row["errors"]} err)' if row['errors'] else ''),
            _pct(row['fact_retention']),
            _pct(row['needed_fact_retention']),
            f'{_pct(row["model_texts_kept"])} ({_pct(row["min_model_texts_kept"])})',
            str(row['summary_calls']),
            f'{row["dropping_compiles"]}/{row["requests"]}',
            f'{row["summarised_compiles"]}/{row["requests"]}',
            f'{row["recall_ratio"]:.3f}',
            f'{_pct(row["needed_or_recoverable"])} ({_pct(row["min_needed_or_recoverable"])})',
            f'{row["compile_ms_median"]:.2f}',
        )
    return table


# --- entry point ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument('paths', nargs='*', help=f'trajectory files or directories (default: {DEFAULT_DIR})')
    parser.add_argument(
        '--window', type=int, action='append', help='context window(s) (default: 128000, 32000 and 16000)'
    )
    parser.add_argument(
        '--profile', action='append', help='preset(s) to replay (default: all but transparent)'
    )
    parser.add_argument('--transparent', action='store_true', help='also replay the `transparent` preset')
    parser.add_argument('--no-harness', action='store_true', help='skip the pydantic-ai-harness strategies')
    parser.add_argument('--cache-read-price', type=float, default=0.1, help='price of a cached input token')
    parser.add_argument(
        '--json', type=Path, metavar='OUT', help='write every number (and per-request records)'
    )
    summary_latency.add_latency_arguments(parser, default=None)  # issue 19: see summary_latency.py
    return parser.parse_args(argv)


async def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=200)
    windows = args.window or list(WINDOWS)
    names = args.profile or [n for n in available_profiles() if n != 'transparent']
    if args.transparent and 'transparent' not in names:
        names = [*names, 'transparent']
    counter = TiktokenCounter()
    all_results: dict[str, dict[int, dict[str, ReplayResult]]] = {}
    for path in summary_latency.input_files(args.paths):
        for n, log in enumerate(load_histories(path)):
            key = path.stem if n == 0 else f'{path.stem}[{n}]'
            all_results[key] = results = await replay_file(
                log,
                windows=windows,
                profiles=names,
                harness=not args.no_harness,
                counter=counter,
                cache_read_price=args.cache_read_price,
            )
            for window, per_profile in results.items():
                title = f'{key}  ({len(log)} messages, window {window:,})'
                console.print(file_table(title, per_profile))
                for line in drop_lines(per_profile):  # why no summary took what was dropped
                    console.print(line, style='yellow', markup=False, highlight=False)
    rows = summary_rows(all_results)
    console.print(summary_table(rows))
    if args.summary_latency is not None:  # issue 19: the wait a slow summariser adds, ahead and not
        await summary_latency.latency_report(
            summary_latency.input_files(args.paths),
            windows=windows,
            profiles=[n for n in names if n in summary_latency.SUMMARISING],
            latency=args.summary_latency,
            gap=args.request_gap,
            console=console,
            counter=counter,
        )
    if args.json is not None:
        payload = {
            'cache_read_price': args.cache_read_price,
            'counter': counter.name,
            'summary': rows,
            'files': {
                key: {
                    str(window): {
                        label: {**res.to_dict(), 'cost_ratio_to_none': res.ratio_to(per_profile['none'])}
                        for label, res in per_profile.items()
                    }
                    for window, per_profile in per_file.items()
                }
                for key, per_file in all_results.items()
            },
        }
        args.json.write_text(json.dumps(payload, indent=1))
        console.print(f'wrote {args.json}')
    return 0


if __name__ == '__main__':
    sys.exit(asyncio.run(main()))
