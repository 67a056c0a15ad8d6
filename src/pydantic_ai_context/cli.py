"""The `pydantic-ai-context` command line: replay recorded runs through profiles, inspect one view.

```
pydantic-ai-context replay FILE... [--profile NAME ...] [--window N] [--json OUT] [--plot OUT.html|.png]
pydantic-ai-context inspect FILE [--profile NAME] [--at N] [--window N]
```

Both read pydantic-ai JSON histories (as written by `ModelMessagesTypeAdapter`), or a JSON list of
them. `replay` measures with `pydantic_ai_context.replay`, the code behind `bench/replay.py`.
Exit codes: 0 success, 1 a runtime failure (an input that cannot be loaded, a failing replay),
2 a usage error (bad option, unknown profile, invalid `PYDANTIC_AI_CONTEXT_*` variable).
"""

from __future__ import annotations

import argparse
import asyncio
import html
import importlib.util
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from . import __version__, _parts
from .events import CompactionEvent, ContextEvent, ContextUsageEvent
from .profiles import ContextProfile, available_profiles, profile
from .replay import (
    FactIndex,
    HistoryLoadError,
    ReplayResult,
    extractive_summary_model,
    geometric_mean,
    load_histories,
    replay,
)
from .settings import ContextSettings, ContextSettingsError, default_profile_name
from .tokens import TiktokenCounter, TokenCounter

__all__ = ('main',)

PROG: Final = 'pydantic-ai-context'
DEFAULT_WINDOW: Final = 128_000
"""The window `replay` and `inspect` assume without `--window` or `PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW`."""
JSON_SCHEMA: Final = 'pydantic-ai-context/replay/1'
"""The `schema` field of `replay --json` output; it changes when the layout does."""
PROGRESS_MIN_REQUESTS: Final = 200
"""Replays shorter than this (requests x profiles) finish too fast to need a progress bar."""
_PLOT_SUFFIXES: Final = ('.html', '.htm', '.png')
_COLORS: Final = ('#444444', '#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b')

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2


class UsageError(Exception):
    """A problem with the command line itself (exit code 2)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default `sys.argv[1:]`) and return the exit code.

    Example:
        ```python
        from pydantic_ai_context.cli import main

        assert main(['--version']) == 0
        ```
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help (0) and on usage errors (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    out = _console(sys.stdout)
    err = _console(sys.stderr)
    try:
        result: int = args.handler(args, out, err)
        return result
    except UsageError as exc:
        err.print(f'{PROG} {args.command}: error: {exc}', markup=False, highlight=False)
        return EXIT_USAGE
    except ContextSettingsError as exc:
        err.print(f'{PROG}: error: {exc}', markup=False, highlight=False)
        return EXIT_USAGE
    except HistoryLoadError as exc:
        err.print(f'{PROG}: error: {exc}', markup=False, highlight=False)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        err.print(f'{PROG}: interrupted', markup=False)
        return 130
    except Exception as exc:  # a failing replay is reported, not a traceback
        err.print(f'{PROG}: error: {type(exc).__name__}: {exc}', markup=False, highlight=False)
        return EXIT_FAILURE


def _console(stream: Any) -> Console:
    console = Console(file=stream, highlight=False)
    if not console.is_terminal:
        # Output to a file or pipe: wide enough that tables are not squeezed into 80 columns.
        console.width = 160
    return console


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description='Measure and inspect what pydantic-ai-context profiles do to recorded agent runs.',
        epilog='Exit codes: 0 ok, 1 runtime failure (e.g. an unreadable history), 2 usage error.',
    )
    parser.add_argument('--version', action='version', version=f'%(prog)s {__version__}')
    commands = parser.add_subparsers(dest='command', required=True, metavar='COMMAND')

    rep = commands.add_parser(
        'replay',
        help='replay recorded histories through profiles and compare them with no compaction',
        description='Replay recorded histories through one or more profiles and `none` (no compaction): '
        'input tokens, cache-weighted cost and its ratio to none, peak tokens, requests over the window, '
        'fact retention, summariser calls and compile time.',
    )
    rep.add_argument('files', nargs='+', metavar='FILE', type=Path, help='pydantic-ai JSON history files')
    rep.add_argument(
        '--profile',
        '-p',
        action='append',
        metavar='NAME',
        help='a profile to replay (repeatable; default: every preset except transparent)',
    )
    _common_options(rep)
    rep.add_argument('--json', type=Path, metavar='OUT', help='also write every number and record as JSON')
    rep.add_argument(
        '--plot', type=Path, metavar='OUT', help='write a chart of view tokens per request (.html, or .png)'
    )
    rep.add_argument('--no-progress', action='store_true', help='never show a progress bar')
    rep.set_defaults(handler=_run_replay)

    ins = commands.add_parser(
        'inspect',
        help="show one request's log and compiled view side by side",
        description='Show the log and the compiled view side by side for one request: each message '
        'with its role, kind and tokens, what each policy did, and the context gauge.',
    )
    ins.add_argument('file', type=Path, metavar='FILE', help='a pydantic-ai JSON history file')
    ins.add_argument(
        '--profile', '-p', metavar='NAME', help='the profile (default: PYDANTIC_AI_CONTEXT_PROFILE)'
    )
    ins.add_argument(
        '--at',
        type=int,
        metavar='N',
        help='the request to show: 1 for the first, -1 (default) for the last recorded request',
    )
    ins.add_argument(
        '--history', type=int, default=0, metavar='K', help='which history of a multi-history file'
    )
    _common_options(ins)
    ins.set_defaults(handler=_run_inspect)
    return parser


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        '--window',
        '-w',
        type=_positive_int,
        metavar='N',
        help=f'context window in tokens (default: PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW, else {DEFAULT_WINDOW:,})',
    )
    parser.add_argument(
        '--model',
        metavar='NAME',
        help='model whose tokenizer counts tokens (default: cl100k_base, as tiktoken offline)',
    )
    parser.add_argument(
        '--summary-model',
        metavar='NAME',
        default='extractive',
        help="summariser for summarising profiles: 'extractive' (default: a deterministic offline "
        "stand-in, charged like a real model), 'none' (their static fallback marker), or a model name "
        "such as 'openai:gpt-4o-mini' (calls the provider)",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace('_', '').replace(',', ''))
    except ValueError:
        raise argparse.ArgumentTypeError(f'not an integer: {text!r}') from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f'must be positive: {text!r}')
    return value


# --- shared -----------------------------------------------------------------------------------


def _window(args: argparse.Namespace) -> int:
    if args.window is not None:
        return int(args.window)
    return ContextSettings.load().context_window or DEFAULT_WINDOW


def _counter(args: argparse.Namespace) -> TokenCounter:
    return TiktokenCounter(model=args.model) if args.model else TiktokenCounter()


def _check_profile(name: str, *, allow_none: bool) -> None:
    known = available_profiles()
    if name in known or (allow_none and name == 'none'):
        return
    choices = ['none', *known] if allow_none else known
    raise UsageError(f'unknown profile {name!r}; known profiles: {", ".join(choices)}')


def _build(
    name: str, *, window: int, counter: TokenCounter, on_event: Any = (), summary_model: str = 'extractive'
) -> ContextProfile:
    summariser: Any
    if summary_model == 'extractive':
        summariser = extractive_summary_model()
    elif summary_model == 'none':
        summariser = None
    else:
        summariser = summary_model
    return profile(name, context_window=window, counter=counter, on_event=on_event, summary_model=summariser)


@dataclass
class _History:
    file: Path
    index: int
    """Position in a multi-history file (0 for a single-history file)."""
    multi: bool
    messages: list[ModelMessage]

    @property
    def label(self) -> str:
        return f'{self.file}#{self.index}' if self.multi else str(self.file)

    @property
    def requests(self) -> int:
        return sum(isinstance(m, ModelResponse) for m in self.messages)


def _load(files: Sequence[Path]) -> list[_History]:
    loaded: list[_History] = []
    for path in files:
        histories = load_histories(path)
        if not histories:
            raise HistoryLoadError(f'{path}: the file holds no messages')
        multi = len(histories) > 1
        loaded.extend(_History(path, i, multi, h) for i, h in enumerate(histories))
    return loaded


# --- replay -----------------------------------------------------------------------------------


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

    async def compile(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        view = await self.inner.compile(messages)
        self.tick()
        return view


def _run_replay(args: argparse.Namespace, out: Console, err: Console) -> int:
    labels = ['none', *dict.fromkeys(args.profile or _default_profiles())]
    for name in labels:
        _check_profile(name, allow_none=True)
    if args.plot is not None:
        _check_plot_target(args.plot)
    window = _window(args)
    counter = _counter(args)
    for name in labels[1:]:
        # Invalid environment settings fail before the work.
        _build(name, window=window, counter=counter, summary_model=args.summary_model)
    histories = _load(args.files)
    results = asyncio.run(
        _replay_all(
            histories,
            labels,
            window=window,
            counter=counter,
            err=err,
            progress=not args.no_progress,
            summary_model=args.summary_model,
        )
    )
    for history, per_profile in zip(histories, results, strict=True):
        out.print(_replay_table(history, per_profile))
    if len(histories) > 1:
        out.print(_summary_table(_summary_rows(results, labels)))
    if args.json is not None:
        document = _replay_json(histories, results, labels, window=window, counter=counter)
        _write(args.json, json.dumps(document, indent=2, allow_nan=False) + '\n')
        out.print(f'wrote {args.json}')
    if args.plot is not None:
        _write_plot(args.plot, histories, results, window=window)
        out.print(f'wrote {args.plot}')
    return EXIT_OK


def _default_profiles() -> list[str]:
    names = [n for n in available_profiles() if n != 'transparent']
    return names or ['transparent']


async def _replay_all(
    histories: Sequence[_History],
    labels: Sequence[str],
    *,
    window: int,
    counter: TokenCounter,
    err: Console,
    progress: bool,
    summary_model: str = 'extractive',
) -> list[dict[str, ReplayResult]]:
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
            for label in labels:
                bar.update(task, description=f'{history.file.name} · {label}')
                compiler = None
                if label != 'none':
                    built = _build(label, window=window, counter=counter, summary_model=summary_model)
                    compiler = _Ticking(name=built.name, inner=built, tick=lambda: bar.advance(task))
                per_profile[label] = await replay(
                    history.messages,
                    compiler,
                    context_window=window,
                    counter=counter,
                    facts=facts,
                    label=label,
                )
                if compiler is None:
                    bar.advance(task, history.requests)
            out.append(per_profile)
    return out


def _ratio(result: ReplayResult, base: ReplayResult, metric: str = 'cost') -> float:
    return result.ratio_to(base, metric)


def _replay_table(history: _History, results: dict[str, ReplayResult]) -> Table:
    base = results['none']
    table = Table(
        title=f'{history.label}: {len(history.messages)} messages, {history.requests} requests, '
        f'window {base.context_window:,}',
        title_justify='left',
    )
    columns = (
        'profile',
        'input tokens',
        'cost',
        'vs none',
        'peak',
        'over window',
        'facts kept',
        'needed kept',
        'summ. calls',
        'compile ms (p50/p95)',
    )
    for column in columns:
        table.add_column(column, justify='left' if column == 'profile' else 'right')
    for label, result in results.items():
        over = f'{result.requests_over_window}' + (f' ({result.errors} err)' if result.errors else '')
        table.add_row(
            label,
            f'{result.input_tokens:,}',
            f'{result.cost:,.0f}',
            f'{_ratio(result, base):.3f}',
            f'{result.peak_view_tokens:,}',
            over,
            f'{result.fact_retention:.1%}',
            f'{result.needed_fact_retention:.1%}',
            f'{result.summary_calls}',
            f'{result.compile_ms_median:.1f} / {result.compile_ms_p95:.1f}',
        )
    return table


def _summary_rows(results: Sequence[dict[str, ReplayResult]], labels: Sequence[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for label in labels:
        pairs = [(r[label], r['none']) for r in results if label in r]
        rows.append(
            {
                'profile': label,
                'histories': len(pairs),
                'cost_ratio': _finite(geometric_mean(_ratio(res, base) for res, base in pairs)),
                'input_ratio': _finite(
                    geometric_mean(_ratio(res, base, 'input_tokens') for res, base in pairs)
                ),
                'peak_ratio': _finite(
                    geometric_mean(_ratio(res, base, 'peak_view_tokens') for res, base in pairs)
                ),
                'requests_over_window': sum(res.requests_over_window for res, _ in pairs),
                'fact_retention': statistics.fmean(res.fact_retention for res, _ in pairs),
                'needed_fact_retention': statistics.fmean(res.needed_fact_retention for res, _ in pairs),
                'summary_calls': sum(res.summary_calls for res, _ in pairs),
                'compile_ms_median': statistics.median(res.compile_ms_median for res, _ in pairs),
            }
        )
    return rows


def _summary_table(rows: Sequence[dict[str, Any]]) -> Table:
    table = Table(title='All histories (geometric mean of ratios to none)', title_justify='left')
    for column in (
        'profile',
        'histories',
        'cost ratio',
        'input ratio',
        'peak ratio',
        'over window',
        'facts kept',
    ):
        table.add_column(column, justify='left' if column == 'profile' else 'right')
    for row in rows:
        table.add_row(
            row['profile'],
            str(row['histories']),
            _fmt_ratio(row['cost_ratio']),
            _fmt_ratio(row['input_ratio']),
            _fmt_ratio(row['peak_ratio']),
            str(row['requests_over_window']),
            f'{row["fact_retention"]:.1%}',
        )
    return table


def _fmt_ratio(value: float | None) -> str:
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


def _replay_json(
    histories: Sequence[_History],
    results: Sequence[dict[str, ReplayResult]],
    labels: Sequence[str],
    *,
    window: int,
    counter: TokenCounter,
) -> dict[str, Any]:
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
                        'cost_ratio': _finite(_ratio(result, base)),
                        'input_ratio': _finite(_ratio(result, base, 'input_tokens')),
                    }
                    for result in per_profile.values()
                ],
            }
        )
    document: dict[str, Any] = _json_ready(
        {
            'schema': JSON_SCHEMA,
            'version': __version__,
            'context_window': window,
            'counter': counter.name,
            'profiles': list(labels),
            'histories': entries,
            'summary': _summary_rows(results, labels),
        }
    )
    return document


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding='utf-8')
    except OSError as exc:
        raise OSError(f'{path}: cannot write ({exc.strerror or exc})') from exc


# --- plots ------------------------------------------------------------------------------------


def _check_plot_target(path: Path) -> None:
    suffix = path.suffix.lower()
    if suffix not in _PLOT_SUFFIXES:
        raise UsageError(f'--plot {path}: unsupported format {suffix or "(none)"!r}; use .html or .png')
    if suffix == '.png' and importlib.util.find_spec('matplotlib') is None:
        raise UsageError(
            f'--plot {path}: writing a PNG needs matplotlib, which is not installed '
            "(pip install 'pydantic-ai-context[plot]'); or write a self-contained chart with --plot "
            f'{path.with_suffix(".html")}'
        )


def _series(results: dict[str, ReplayResult]) -> dict[str, list[int]]:
    return {label: [r.view_tokens for r in result.records] for label, result in results.items()}


def _write_plot(
    path: Path, histories: Sequence[_History], results: Sequence[dict[str, ReplayResult]], *, window: int
) -> None:
    if path.suffix.lower() == '.png':
        _write_png(path, histories, results, window=window)
    else:
        _write(path, chart_html(histories, results, window=window))


def chart_html(
    histories: Sequence[_History], results: Sequence[dict[str, ReplayResult]], *, window: int
) -> str:
    """A self-contained HTML page (inline SVG, no scripts) charting view tokens per request per profile."""
    sections = []
    for history, per_profile in zip(histories, results, strict=True):
        base = per_profile['none']
        rows = ''.join(
            f'<tr><td><span class="key" style="background:{_COLORS[i % len(_COLORS)]}"></span>'
            f'{html.escape(label)}</td><td>{res.input_tokens:,}</td><td>{_ratio(res, base):.3f}</td>'
            f'<td>{res.peak_view_tokens:,}</td><td>{res.requests_over_window}</td>'
            f'<td>{res.fact_retention:.1%}</td></tr>'
            for i, (label, res) in enumerate(per_profile.items())
        )
        sections.append(
            f'<section><h2>{html.escape(history.label)}</h2>'
            f'{_svg(_series(per_profile), window=window)}'
            '<table><tr><th>profile</th><th>input tokens</th><th>cost vs none</th><th>peak</th>'
            f'<th>over window</th><th>facts kept</th></tr>{rows}</table></section>'
        )
    style = (
        'body{font-family:system-ui,sans-serif;margin:2em;color:#222}'
        'table{border-collapse:collapse;margin:1em 0 3em}'
        'td,th{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:right}'
        'td:first-child,th:first-child{text-align:left}'
        '.key{display:inline-block;width:.8em;height:.8em;margin-right:.4em}'
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<title>pydantic-ai-context replay</title><style>{style}</style></head><body>'
        f'<h1>View tokens per request</h1><p>Context window: {window:,} tokens (dashed line).</p>'
        f'{"".join(sections)}</body></html>\n'
    )


def _svg(series: dict[str, list[int]], *, window: int, width: int = 900, height: int = 380) -> str:
    left, right, top, bottom = 70, 150, 15, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max((len(v) for v in series.values()), default=0)
    peak = max([window, *(max(v, default=0) for v in series.values())])
    y_max = _nice(peak * 1.05)

    def x(i: int) -> float:
        return left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(tokens: float) -> float:
        return top + plot_h * (1 - tokens / y_max)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="view tokens per request" '
        'font-family="system-ui,sans-serif" font-size="12">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    for k in range(6):
        value = y_max * k / 5
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{_short(value)}</text>'
        )
    for k in range(6 if n > 1 else 1):
        i = round((n - 1) * k / 5) if n > 1 else 0
        parts.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{i + 1}</text>')
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">request</text>'
        f'<line x1="{left}" x2="{left + plot_w}" y1="{y(window):.1f}" y2="{y(window):.1f}" '
        'stroke="#000" stroke-dasharray="6 4"/>'
    )
    for k, (label, values) in enumerate(series.items()):
        color = _COLORS[k % len(_COLORS)]
        points = ' '.join(f'{x(i):.1f},{y(v):.1f}' for i, v in enumerate(values))
        if points:
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{points}"/>')
        ly = top + 14 + 18 * k
        parts.append(
            f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 32}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{color}" stroke-width="3"/><text x="{left + plot_w + 38}" y="{ly}">{html.escape(label)}</text>'
        )
    parts.append('</svg>')
    return ''.join(parts)


def _nice(value: float) -> float:
    """The smallest 1-2-5 x 10^k step multiple of 5 at or above `value`, for round axis ticks."""
    if value <= 0:
        return 1.0
    step = value / 5
    magnitude = 10.0 ** math.floor(math.log10(step))
    for factor in (1, 2, 2.5, 5, 10):
        if step <= factor * magnitude:
            return 5 * factor * magnitude
    return 5 * 10 * magnitude  # pragma: no cover - the loop always returns


def _short(tokens: float) -> str:
    if tokens >= 1_000_000:
        return f'{tokens / 1_000_000:g}M'
    if tokens >= 1_000:
        return f'{tokens / 1_000:g}k'
    return f'{tokens:g}'


def _write_png(
    path: Path, histories: Sequence[_History], results: Sequence[dict[str, ReplayResult]], *, window: int
) -> None:  # pragma: no cover - matplotlib is an optional extra, not installed in CI
    import matplotlib  # type: ignore[import-not-found]

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # type: ignore[import-not-found]

    fig, axes = plt.subplots(len(histories), 1, figsize=(10, 4 * len(histories)), squeeze=False)
    for ax, history, per_profile in zip(axes[:, 0], histories, results, strict=True):
        for label, values in _series(per_profile).items():
            ax.plot(range(1, len(values) + 1), values, label=label)
        ax.axhline(window, color='black', linestyle='--', linewidth=1, label='window')
        ax.set_title(history.label)
        ax.set_xlabel('request')
        ax.set_ylabel('view tokens')
        ax.legend(loc='upper left')
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --- inspect ----------------------------------------------------------------------------------


def _run_inspect(args: argparse.Namespace, out: Console, err: Console) -> int:
    name = args.profile or default_profile_name()
    _check_profile(name, allow_none=False)
    window = _window(args)
    counter = _counter(args)
    histories = _load([args.file])
    if not 0 <= args.history < len(histories):
        raise UsageError(f'--history {args.history}: {args.file} holds {len(histories)} history(ies)')
    log = histories[args.history].messages
    responses = [i for i, m in enumerate(log) if isinstance(m, ModelResponse)]
    if responses:
        at = -1 if args.at is None else args.at
        number = at if at > 0 else len(responses) + 1 + at
        if not 1 <= number <= len(responses) or at == 0:
            raise UsageError(
                f'--at {args.at}: {args.file} has requests 1..{len(responses)} (or -1 for the last)'
            )
        log_input = log[: responses[number - 1]]
        title = f'request {number} of {len(responses)}'
    else:
        if args.at not in (None, 1, -1):
            raise UsageError(f'--at {args.at}: {args.file} has no recorded responses; only request 1 exists')
        log_input = list(log)
        title = 'request 1 of 1'
    events: list[ContextEvent] = []
    built = _build(
        name, window=window, counter=counter, on_event=events.append, summary_model=args.summary_model
    )
    view = asyncio.run(built.compile(log_input))
    rows = align(log_input, view)
    out.print(_inspect_table(f'{args.file}: {title}, profile {name}', rows, log_input, view, counter))
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    out.print(_events_table(compactions))
    usage = next((e for e in events if isinstance(e, ContextUsageEvent)), None)
    if usage is not None:
        out.print(_gauge(usage))
    return EXIT_OK


@dataclass(frozen=True)
class AlignedRow:
    """One line of `inspect`: a log message, its counterpart in the view, and what became of it."""

    log_index: int | None
    view_index: int | None
    status: str
    """`kept`, `changed`, `dropped`, `summarised` or `inserted`."""


def align(log: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> list[AlignedRow]:
    """Pair the messages of `view` with those of `log` they come from, in order.

    A view message is the log message itself (`kept`), a copy of it that a policy changed
    (`changed`: same kind of message sharing a part's tool call id or timestamp), or new
    (`inserted`: a summary, a note). Log messages with no counterpart were `summarised` when a
    summary was inserted in their place, else `dropped`.
    """
    position = {id(m): i for i, m in enumerate(log)}
    rows: list[AlignedRow] = []
    inserted: list[int] = []
    cursor = 0

    def flush(until: int) -> None:
        summarised = any(_marker_kind(view[j]) == 'summary' for j in inserted)
        rows.extend(
            AlignedRow(k, None, 'summarised' if summarised else 'dropped') for k in range(cursor, until)
        )
        rows.extend(AlignedRow(None, j, 'inserted') for j in inserted)
        inserted.clear()

    for j, message in enumerate(view):
        i = position.get(id(message))
        if i is None or i < cursor:
            i = _counterpart(message, log, cursor)
        if i is None:
            inserted.append(j)
            continue
        flush(i)
        rows.append(AlignedRow(i, j, 'kept' if log[i] is message else 'changed'))
        cursor = i + 1
    flush(len(log))
    return rows


def _signatures(message: ModelMessage) -> set[tuple[str, Any]]:
    found: set[tuple[str, Any]] = set()
    for part in message.parts:
        call_id = getattr(part, 'tool_call_id', None)
        if call_id:
            found.add(('call', call_id))
        stamp = getattr(part, 'timestamp', None)
        if stamp is not None:
            found.add(('time', stamp))
    stamp = getattr(message, 'timestamp', None)
    if stamp is not None:
        found.add(('message-time', stamp))
    return found


def _counterpart(message: ModelMessage, log: Sequence[ModelMessage], start: int) -> int | None:
    wanted = _signatures(message)
    if not wanted:
        return None
    for i in range(start, len(log)):
        if type(log[i]) is type(message) and not wanted.isdisjoint(_signatures(log[i])):
            return i
    return None


def _marker_kind(message: ModelMessage) -> str | None:
    record = _parts.marker(message)
    kind = record.get('kind') if record else None
    return str(kind) if kind is not None else None


def _changes(message: ModelMessage) -> str:
    kinds: dict[str, int] = {}
    for obj in (message, *message.parts):
        record = _parts.marker(obj)
        if record and record.get('kind'):
            kinds[str(record['kind'])] = kinds.get(str(record['kind']), 0) + 1
    return ', '.join(f'{k}' + (f' x{n}' if n > 1 else '') for k, n in kinds.items())


def _role(message: ModelMessage) -> str:
    if isinstance(message, ModelResponse):
        return 'assistant'
    assert isinstance(message, ModelRequest)
    if _parts.tool_results(message):
        return 'tool'
    if _parts.has_user_prompt(message):
        return 'user'
    if _parts.has_system_prompt(message):
        return 'system'
    return 'request'


def _kind(message: ModelMessage) -> str:
    names: list[str] = []
    for part in message.parts:
        label = str(getattr(part, 'part_kind', type(part).__name__))
        tool = getattr(part, 'tool_name', None)
        names.append(f'{label}:{tool}' if tool else label)
    counted: dict[str, int] = {}
    for n in names:
        counted[n] = counted.get(n, 0) + 1
    return ', '.join(n + (f' x{c}' if c > 1 else '') for n, c in counted.items())


_STATUS_STYLE: Final = {
    'kept': 'dim',
    'changed': 'yellow',
    'dropped': 'red',
    'summarised': 'magenta',
    'inserted': 'green',
}


def _inspect_table(
    title: str,
    rows: Sequence[AlignedRow],
    log: Sequence[ModelMessage],
    view: Sequence[ModelMessage],
    counter: TokenCounter,
) -> Table:
    log_tokens = counter.count_messages(log)
    view_tokens = counter.count_messages(view)
    table = Table(
        title=f'{title}: log {len(log)} messages / {log_tokens:,} tokens -> '
        f'view {len(view)} messages / {view_tokens:,} tokens',
        title_justify='left',
    )
    for column, justify in (
        ('log #', 'right'),
        ('role', 'left'),
        ('kind', 'left'),
        ('tokens', 'right'),
        ('view #', 'right'),
        ('role', 'left'),
        ('kind', 'left'),
        ('tokens', 'right'),
        ('what happened', 'left'),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        left = log[row.log_index] if row.log_index is not None else None
        right = view[row.view_index] if row.view_index is not None else None
        what = row.status
        if right is not None and row.status in {'changed', 'inserted'}:
            detail = _changes(right)
            what = f'{row.status}: {detail}' if detail else ('repaired' if row.status == 'changed' else what)
        table.add_row(
            '' if row.log_index is None else str(row.log_index),
            _role(left) if left else '',
            _kind(left) if left else '',
            f'{counter.count_message(left):,}' if left else '',
            '' if row.view_index is None else str(row.view_index),
            _role(right) if right else '',
            _kind(right) if right else '',
            f'{counter.count_message(right):,}' if right else '',
            Text(what, style=_STATUS_STYLE.get(row.status, '')),
        )
    return table


def _events_table(events: Sequence[CompactionEvent]) -> Table:
    table = Table(title='What each policy did', title_justify='left')
    for column in ('policy', 'messages', 'tokens', 'saved', 'reason'):
        table.add_column(column, justify='left' if column in {'policy', 'reason'} else 'right')
    if not events:
        table.add_row('-', '', '', '', 'nothing changed')
    for event in events:
        tokens = (
            f'{event.tokens_before:,} -> {event.tokens_after:,}'
            if event.tokens_before is not None and event.tokens_after is not None
            else ''
        )
        saved = event.tokens_saved
        reason = event.reason or ', '.join(r.kind for r in event.repairs)
        table.add_row(
            event.policy,
            f'{event.messages_before} -> {event.messages_after}',
            tokens,
            '' if saved is None else f'{saved:,}',
            reason,
        )
    return table


def _gauge(usage: ContextUsageEvent, width: int = 40) -> Text:
    filled = min(width, max(0, round(usage.fraction * width)))
    style = (
        'red'
        if usage.message_tokens > usage.limit_tokens
        else ('yellow' if usage.over_soft_threshold else 'green')
    )
    text = Text('context ')
    text.append('█' * filled, style=style)
    text.append('░' * (width - filled), style='dim')
    source = usage.window_source if usage.window_resolved else 'default (fallback)'
    text.append(
        f' {usage.used_tokens:,} / {usage.window_tokens:,} tokens ({usage.fraction:.1%}); '
        f'limit {usage.limit_tokens:,}, soft limit {usage.soft_limit_tokens:,}; window: {source}; '
        f'{"anchored on provider usage" if usage.anchored else "counted"}'
    )
    return text


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
