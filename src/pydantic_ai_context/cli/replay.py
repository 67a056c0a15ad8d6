"""`pydantic-ai-context replay`: recorded histories through profiles and `none`, as tables, JSON and charts.

A profile that raised on some request (`ContextBudgetExceeded`: its smallest view did not fit) has
*failed*: the run it stands for would have stopped there, so its numbers are not compared with
`none`. The table and the JSON say so, and the command exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic_ai.messages import ModelMessage
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .. import __version__
from ..events import ContextUsageEvent
from ..profiles import ContextProfile, available_profiles
from ..replay import FactIndex, ReplayResult, geometric_mean, replay
from ..tokens import TokenCounter
from . import charts
from ._agent import AgentOverhead, agent_overhead
from ._common import (
    EXIT_FAILURE,
    EXIT_OK,
    PROG,
    History,
    UsageError,
    Window,
    add_common_options,
    build,
    check_output,
    check_profile,
    counter_for,
    emit,
    load,
    positive_int,
    resolve_window,
    write,
)

JSON_SCHEMA: Final = 'pydantic-ai-context/replay/2'
"""The `schema` field of `replay --json` output; it changes when the layout does (2: failures)."""
PROGRESS_MIN_REQUESTS: Final = 200
"""Replays shorter than this (requests x profiles) finish too fast to need a progress bar."""
FAILED: Final = 'failed'
"""What the table shows instead of a failed profile's numbers."""


def add_parser(commands: Any) -> None:
    rep = commands.add_parser(
        'replay',
        help='replay recorded histories through profiles and compare them with no compaction',
        description='Replay recorded histories through one or more profiles and `none` (no compaction): '
        'input tokens, cache-weighted cost and its ratio to none, the cached share, prefix breaks per 100 '
        'requests and the cost a cache that never breaks would give (the floor for those views), '
        'peak tokens, requests over the window, '
        'fact retention, summariser calls and compile time. A profile that raises on a request '
        '(its view cannot fit the window) is reported as failed, and the command exits 1.',
    )
    rep.add_argument('files', nargs='+', metavar='FILE', type=Path, help='pydantic-ai JSON history files')
    rep.add_argument(
        '--profile',
        '-p',
        action='append',
        metavar='NAME',
        help='a profile to replay (repeatable; default: every preset except transparent)',
    )
    add_common_options(rep)
    rep.add_argument('--json', type=Path, metavar='OUT', help='also write every number and record as JSON')
    rep.add_argument(
        '--plot', type=Path, metavar='OUT', help='write a chart of view tokens per request (.html, or .png)'
    )
    rep.add_argument('--no-progress', action='store_true', help='never show a progress bar')
    rep.add_argument(
        '--agent',
        metavar='MODULE:ATTR',
        help='the pydantic-ai Agent that made the runs (e.g. my_app.agents:agent): its tool definitions '
        'and instructions are measured as the live path measures them and counted in every request',
    )
    rep.add_argument(
        '--overhead-tokens',
        type=positive_int,
        metavar='N',
        help='tokens every request sends besides its messages (tool definitions a log cannot show), '
        'for runs without an importable agent',
    )
    rep.set_defaults(handler=run)


@dataclass(kw_only=True)
class _Ticking:
    """A profile that advances the progress bar after each compile (a `replay.ViewCompiler`)."""

    name: str
    inner: ContextProfile
    tick: Callable[[], None]

    @property
    def events(self) -> Any:
        # `replay` reads summariser usage from the profile's events.
        return self.inner.events

    @property
    def readback(self) -> bool:
        # `replay` credits what read-back reaches only for a profile with read-back on: hiding
        # these made the CLI charge every left-out fact as lost, unlike `replay()` itself.
        return self.inner.readback

    @property
    def archive(self) -> Any:
        return self.inner.archive

    async def settle_background(self) -> None:
        await self.inner.settle_background()

    async def close_background(self) -> None:
        await self.inner.close_background()

    async def compile(self, messages: Sequence[ModelMessage], parameters: Any = None) -> list[ModelMessage]:
        try:
            return await self.inner.compile(messages, parameters=parameters)
        finally:
            self.tick()


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    labels = ['none', *dict.fromkeys(args.profile or _default_profiles())]
    for name in labels:
        check_profile(name, allow_none=True)
    # Everything that can fail before the work does: outputs, settings, inputs.
    if args.plot is not None:
        charts.check_target(args.plot)
    if args.json is not None:
        check_output(args.json, '--json')
    window = resolve_window(args)
    counter = counter_for(args)
    if args.agent is not None and args.overhead_tokens is not None:
        raise UsageError('--agent and --overhead-tokens: give one (the agent measures its own overhead)')
    agent = agent_overhead(args.agent, counter) if args.agent is not None else None
    extra = args.overhead_tokens or 0
    for name in labels[1:]:
        build(
            name,
            window=window.tokens,
            counter=counter,
            summary_model=args.summary_model,
            reserved_system=extra or None,
        )
    histories = load(args.files, need_responses=True)
    gauges: list[dict[str, ContextUsageEvent]] = []
    results = asyncio.run(
        _replay_all(
            histories,
            labels,
            window=window.tokens,
            counter=counter,
            err=err,
            progress=not args.no_progress,
            summary_model=args.summary_model,
            parameters=agent.parameters if agent is not None else None,
            overhead_tokens=extra,
            gauges=gauges,
        )
    )
    counted = counted_line(agent, extra)
    for history, per_profile, usages in zip(histories, results, gauges, strict=True):
        emit(out, replay_table(history, per_profile, window=window), args.format)
        out.print(Text(counted, style='dim'))
        for line in gauge_lines(usages, window):
            out.print(Text(line, style='dim'))
        for line in failure_lines(per_profile):
            out.print(Text(line, style='red'))
        for line in drop_lines(per_profile):
            out.print(Text(line, style='yellow'))
        out.print(Text(breakpoint_line(per_profile), style='dim'))
    rows = summary_rows(results, labels)
    if len(histories) > 1:
        emit(out, summary_table(rows), args.format)
    if args.json is not None:
        document = replay_json(histories, results, labels, window=window, counter=counter)
        document['counted'] = {
            'messages': True,
            'instructions': "once per request (the newest request's, as pydantic-ai sends them)",
            'agent': agent.to_dict() if agent is not None else None,
            'overhead_tokens': extra,
            'description': counted,
        }
        write(args.json, json.dumps(document, indent=2, allow_nan=False) + '\n')
        out.print(f'wrote {args.json}')
    if args.plot is not None:
        charts.write_plot(args.plot, histories, results, rows, window=window.tokens)
        out.print(f'wrote {args.plot}')
    failed = [row['profile'] for row in rows if row['failed']]
    if failed:
        err.print(
            f'{PROG} replay: error: {", ".join(failed)} failed: some requests could not be compiled '
            'to fit the window (see the table)',
            markup=False,
            highlight=False,
        )
        return EXIT_FAILURE
    return EXIT_OK


def _default_profiles() -> list[str]:
    names = [n for n in available_profiles() if n != 'transparent']
    return names or ['transparent']


async def _replay_all(
    histories: Sequence[History],
    labels: Sequence[str],
    *,
    window: int,
    counter: TokenCounter,
    err: Console,
    progress: bool,
    summary_model: str = 'extractive',
    parameters: Any = None,
    overhead_tokens: int = 0,
    gauges: list[dict[str, ContextUsageEvent]] | None = None,
) -> list[dict[str, ReplayResult]]:
    """Replay each history through each label; `gauges` receives each profile's last usage reading."""
    total = sum(h.requests for h in histories) * len(labels)
    bar = Progress(
        TextColumn('{task.description}'),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not progress or not err.is_terminal or total < PROGRESS_MIN_REQUESTS,
    )
    out: list[dict[str, ReplayResult]] = []
    with bar:
        task = bar.add_task('replaying', total=total)
        for history in histories:
            facts = FactIndex.build(history.messages)
            per_profile: dict[str, ReplayResult] = {}
            usages: dict[str, ContextUsageEvent] = {}
            for label in labels:
                bar.update(task, description=f'{history.file.name} · {label}')
                compiler = None
                if label != 'none':
                    built = build(
                        label,
                        window=window,
                        counter=counter,
                        summary_model=summary_model,
                        reserved_system=overhead_tokens or None,
                    )
                    compiler = _Ticking(name=built.name, inner=built, tick=lambda: bar.advance(task))
                per_profile[label] = await replay(
                    history.messages,
                    compiler,
                    context_window=window,
                    counter=counter,
                    facts=facts,
                    label=label,
                    parameters=parameters,
                    overhead_tokens=overhead_tokens,
                )
                if compiler is None:
                    bar.advance(task, history.requests)
                elif compiler.inner.last_usage is not None:
                    usages[label] = compiler.inner.last_usage
            out.append(per_profile)
            if gauges is not None:
                gauges.append(usages)
    return out


def gauge_lines(usages: dict[str, ContextUsageEvent], window: Window) -> list[str]:
    """Each profile's budget at its last request, in the words `inspect` uses, and its counter."""
    return [
        f'budget ({label}): {usage.budget_line(source=window.budget_source)}; counted by {usage.counted_by}'
        for label, usage in usages.items()
    ]


def counted_line(agent: AgentOverhead | None, overhead_tokens: int) -> str:
    """What each request's tokens include, for under the table (and the JSON's `counted`)."""
    head = "counted per request: the messages, the newest request's instructions once"
    if agent is not None:
        return (
            f'{head}, and {agent.spec}: {agent.tools} tool definition(s), {agent.tools_tokens:,} tokens; '
            f'its instructions {agent.instructions_tokens:,} tokens where the log carries none'
        )
    if overhead_tokens:
        return f'{head}, and {overhead_tokens:,} tokens of overhead (--overhead-tokens)'
    return f'{head}; not tool definitions (a log holds none: pass --agent MODULE:ATTR or --overhead-tokens N)'


# --- numbers ----------------------------------------------------------------------------------


def failed(result: ReplayResult) -> bool:
    """Whether some request of `result` raised instead of compiling a view."""
    return result.errors > 0


def first_error(result: ReplayResult) -> dict[str, Any] | None:
    """The first failing request: its number (1-based), the index of its response, and the error."""
    for number, record in enumerate(result.records, start=1):
        if record.error is not None:
            return {'request': number, 'index': record.index, 'message': record.error}
    return None


def failure_lines(results: dict[str, ReplayResult]) -> list[str]:
    lines = []
    for label, result in results.items():
        first = first_error(result)
        if first is not None:
            lines.append(
                f'{label} failed on {result.errors} of {result.requests} requests; the first, request '
                f'{first["request"]} (message {first["index"]}): {first["message"]}'
            )
    return lines


def breakpoint_line(results: dict[str, ReplayResult]) -> str:
    """Each profile's cost vs none on a provider that caches at explicit breakpoints, in one line
    (the table's `vs none` is the cache of the longest common prefix: OpenAI's, Gemini's)."""
    base = results['none']
    ratios = ', '.join(
        f'{label} {breakpoint_ratio(result, base):.3f}'
        for label, result in results.items()
        if label != 'none' and not failed(result)
    )
    return (
        f'vs none with explicit cache breakpoints (Anthropic, Bedrock: replay.breakpoints): {ratios or "-"}'
    )


def drop_lines(results: dict[str, ReplayResult]) -> list[str]:
    """For each profile whose `fit_to_budget` dropped steps where a summarising step could act: why no
    summary took them (`ReplayResult.drop_reasons`), so that a drop is never unexplained."""
    lines = []
    for label, result in results.items():
        reasons = result.drop_reasons
        if not reasons or (not result.summarised_compiles and set(reasons) == {'no summary step fired'}):
            continue  # no drops, or a profile without a summarising step
        why = '; '.join(
            f'{reason} ({count})' for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1])
        )
        lines.append(
            f'{label} dropped steps in {result.dropping_compiles} requests; no summary because: {why}'
        )
    return lines


def _ratio(result: ReplayResult, base: ReplayResult, metric: str = 'cost') -> float:
    return result.ratio_to(base, metric)


def perfect_ratio(result: ReplayResult, base: ReplayResult) -> float:
    """What `result`'s views would cost with a cache that never breaks, over what `none` costs: the
    floor of `cost vs none` for those view sizes."""
    return result.perfect_cache_cost / base.cost if base.cost else math.inf


def breakpoint_ratio(result: ReplayResult, base: ReplayResult) -> float:
    """What `result` costs on a provider that caches at explicit breakpoints (Anthropic, Bedrock),
    over what `none` costs there (`ReplayResult.breakpoint_cost`)."""
    return result.breakpoint_cost / base.breakpoint_cost if base.breakpoint_cost else math.inf


def replay_table(history: History, results: dict[str, ReplayResult], *, window: Window) -> Table:
    base = results['none']
    table = Table(
        title=f'{history.label}: {len(history.messages)} messages, {history.requests} requests, '
        f'window {window.label}',
        title_justify='left',
    )
    columns = (
        'profile',
        'input tokens',
        'cost',
        'vs none',
        'cached',
        'breaks/100',
        'perfect cache',
        'peak',
        'over window',
        'errors',
        'facts kept',
        'needed kept',
        'texts kept',
        'summ. calls',
        'compile ms',
    )
    for column in columns:
        table.add_column(column, justify='left' if column == 'profile' else 'right')
    for label, result in results.items():
        timing = f'{result.compile_ms_median:.1f}/{result.compile_ms_p95:.1f}'
        if failed(result):
            errors = Text(f'{result.errors} of {result.requests}', style='bold red')
            table.add_row(
                Text(label, style='red'),
                *[Text(FAILED, style='red')] * 8,
                errors,
                *[Text(FAILED, style='red')] * 4,
                timing,
            )
            continue
        table.add_row(
            label,
            f'{result.input_tokens:,}',
            f'{result.cost:,.0f}',
            f'{_ratio(result, base):.3f}',
            f'{result.cached_share:.1%}',
            f'{result.breaks_per_100:.1f}',
            f'{perfect_ratio(result, base):.3f}',
            f'{result.peak_view_tokens:,}',
            f'{result.requests_over_window}',
            '0',
            f'{result.fact_retention:.1%}',
            f'{result.needed_fact_retention:.1%}',
            f'{result.model_texts_kept:.1%}',
            f'{result.summary_calls}',
            timing,
        )
    return table


def summary_rows(results: Sequence[dict[str, ReplayResult]], labels: Sequence[str]) -> list[dict[str, Any]]:
    """Per profile, over every history: geometric means of the ratios to `none`, sums, and failures.

    A profile that failed on any history gets `failed: true` and no ratios (`None`).
    """
    rows: list[dict[str, Any]] = []
    for label in labels:
        pairs = [(r[label], r['none']) for r in results if label in r]
        errors = sum(res.errors for res, _ in pairs)
        ok = errors == 0

        def mean_ratio(
            metric: str, pairs: list[tuple[ReplayResult, ReplayResult]] = pairs, ok: bool = ok
        ) -> float | None:
            if not ok:
                return None
            return _finite(geometric_mean(_ratio(res, base, metric) for res, base in pairs))

        rows.append(
            {
                'profile': label,
                'histories': len(pairs),
                'failed': not ok,
                'errors': errors,
                'requests': sum(res.requests for res, _ in pairs),
                'cost_ratio': mean_ratio('cost'),
                'input_ratio': mean_ratio('input_tokens'),
                'peak_ratio': mean_ratio('peak_view_tokens'),
                'perfect_cost_ratio': _finite(geometric_mean(perfect_ratio(res, base) for res, base in pairs))
                if ok
                else None,
                'breakpoint_cost_ratio': _finite(
                    geometric_mean(breakpoint_ratio(res, base) for res, base in pairs)
                )
                if ok
                else None,
                'cached_share': statistics.fmean(res.cached_share for res, _ in pairs) if ok else None,
                'breaks_per_100': 100
                * sum(res.prefix_breaks for res, _ in pairs)
                / max(1, sum(res.requests for res, _ in pairs))
                if ok
                else None,
                'requests_over_window': sum(res.requests_over_window for res, _ in pairs),
                'fact_retention': statistics.fmean(res.fact_retention for res, _ in pairs) if ok else None,
                'needed_fact_retention': (
                    statistics.fmean(res.needed_fact_retention for res, _ in pairs) if ok else None
                ),
                'model_texts_kept': statistics.fmean(res.model_texts_kept for res, _ in pairs)
                if ok
                else None,
                'summary_calls': sum(res.summary_calls for res, _ in pairs),
                'compile_ms_median': statistics.median(res.compile_ms_median for res, _ in pairs),
            }
        )
    return rows


def summary_table(rows: Sequence[dict[str, Any]]) -> Table:
    table = Table(title='All histories (geometric mean of ratios to none)', title_justify='left')
    for column in (
        'profile',
        'histories',
        'cost ratio',
        'perfect cache',
        'breakpoints',
        'cached',
        'breaks/100',
        'input ratio',
        'peak ratio',
        'over window',
        'errors',
        'facts kept',
    ):
        table.add_column(column, justify='left' if column == 'profile' else 'right')
    for row in rows:
        if row['failed']:
            table.add_row(
                Text(row['profile'], style='red'),
                str(row['histories']),
                *[Text(FAILED, style='red')] * 8,
                Text(f'{row["errors"]} of {row["requests"]}', style='bold red'),
                Text(FAILED, style='red'),
            )
            continue
        table.add_row(
            row['profile'],
            str(row['histories']),
            fmt_ratio(row['cost_ratio']),
            fmt_ratio(row['perfect_cost_ratio']),
            fmt_ratio(row['breakpoint_cost_ratio']),
            f'{row["cached_share"]:.1%}',
            f'{row["breaks_per_100"]:.1f}',
            fmt_ratio(row['input_ratio']),
            fmt_ratio(row['peak_ratio']),
            str(row['requests_over_window']),
            '0',
            f'{row["fact_retention"]:.1%}',
        )
    return table


def fmt_ratio(value: float | None) -> str:
    return '-' if value is None else f'{value:.3f}'


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _json_ready(value: Any) -> Any:
    if isinstance(value, float):
        return _finite(value)
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return value


def replay_json(
    histories: Sequence[History],
    results: Sequence[dict[str, ReplayResult]],
    labels: Sequence[str],
    *,
    window: Window,
    counter: TokenCounter,
) -> dict[str, Any]:
    """The `--json` document. A failed result has `failed: true`, its `errors`, the `first_error`,
    and no ratios (`null`); `ok` at the top is false when any result failed."""
    entries = []
    for history, per_profile in zip(histories, results, strict=True):
        base = per_profile['none']
        entries.append(
            {
                'file': str(history.file),
                'history': history.index,
                'messages': len(history.messages),
                'requests': history.requests,
                'results': [
                    {
                        **result.to_dict(),
                        'failed': failed(result),
                        'first_error': first_error(result),
                        'cost_ratio': None if failed(result) else _finite(_ratio(result, base)),
                        'input_ratio': None
                        if failed(result)
                        else _finite(_ratio(result, base, 'input_tokens')),
                    }
                    for result in per_profile.values()
                ],
            }
        )
    rows = summary_rows(results, labels)
    document: dict[str, Any] = _json_ready(
        {
            'schema': JSON_SCHEMA,
            'version': __version__,
            'ok': not any(row['failed'] for row in rows),
            'context_window': window.tokens,
            'context_window_source': window.source,
            'counter': counter.name,
            'profiles': list(labels),
            'histories': entries,
            'summary': rows,
        }
    )
    return document
