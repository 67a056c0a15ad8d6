"""Write the benchmarks page's figures and charts from `bench/replay.py --json` output.

Usage:

    python bench/report.py --shared SHARED.json --heldout HELDOUT.json --options OPTIONS.json
    python bench/report.py            # render the recorded figures
    python bench/report.py --check    # write nothing; fail if the page or a chart is stale

`make bench-report` runs both replays (with the pydantic-ai-harness baselines) and this script.

Recording keeps, of each replay's JSON, the summary rows, every run's aggregates (no per-request
records, no compile times but the medians) and the view tokens per request of one run at one window
(`--chart-run`, `--chart-window`), in `bench/results/shared.json`, `bench/results/heldout.json` and
`bench/results/options.json` (presets replayed with settings, `--options`).
Rendering reads those files only, and writes:

- `docs/assets/benchmarks-cost.svg` and `docs/assets/benchmarks-heldout-cost.svg`: each profile's
  cost ratio to `none` per window, with what a cache that never breaks would give
  (`charts.cost_bars`, the chart `pydantic-ai-context replay --plot` draws over several files);
- `docs/assets/benchmarks-run.svg`: view tokens per request of the charted run (`charts.svg`, the
  chart of `replay --plot`);
- the Markdown between `<!-- report:NAME -->` and `<!-- /report:NAME -->` in `docs/benchmarks.md`.

`--check` writes nothing and exits 1, naming the stale files, when rendering would change any of
them: the test suite runs it, so the page and its charts always show the recorded figures.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic_ai_context.cli import charts

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'bench' / 'results'
ASSETS = ROOT / 'docs' / 'assets'
PAGE = ROOT / 'docs' / 'benchmarks.md'
CHART_RUN = 'oh_sdk_sonnet4_astropy_fitsdiff'
CHART_WINDOW = 32_000

RUN_KEYS = (
    'requests',
    'input_tokens',
    'cost',
    'cost_ratio_to_none',
    'perfect_cache_cost',
    'breakpoint_cost',
    'cached_share',
    'prefix_breaks',
    'breaks_per_100',
    'peak_view_tokens',
    'requests_over_window',
    'errors',
    'fact_retention',
    'needed_fact_retention',
    'model_texts_kept',
    'summary_calls',
    'dropping_compiles',
    'summarised_compiles',
    'compile_ms_median',
)
"""What recording keeps of each run's result (`ReplayResult.summary()` keys, and the ratio)."""


# --- recording ----------------------------------------------------------------------------------


def record(replay_json: dict[str, Any], *, chart_run: str | None, chart_window: int) -> dict[str, Any]:
    """The figures the page shows, from one `bench/replay.py --json` document."""
    runs: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for run, per_window in replay_json['files'].items():
        runs[run] = {
            window: {label: {k: result[k] for k in RUN_KEYS} for label, result in per_label.items()}
            for window, per_label in per_window.items()
        }
    recorded: dict[str, Any] = {
        'counter': replay_json['counter'],
        'cache_read_price': replay_json['cache_read_price'],
        'summary': replay_json['summary'],
        'runs': runs,
    }
    per_label = replay_json['files'].get(chart_run, {}).get(str(chart_window)) if chart_run else None
    if per_label:
        recorded['chart'] = {
            'run': chart_run,
            'window': chart_window,
            'views': {
                label: [r['view_tokens'] for r in result['records']] for label, result in per_label.items()
            },
        }
    return recorded


# --- rendering ----------------------------------------------------------------------------------


def pct(value: float) -> str:
    return f'{value:.1%}'


def window_label(window: int | str) -> str:
    return f'{int(window) // 1000}k'


def profile_cell(label: str) -> str:
    """A profile's name, plain: a code span would break inside the name in a narrow column."""
    return label


def table(header: Sequence[str], align: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table; `align` holds `l` or `r` per column."""
    lines = [
        '| ' + ' | '.join(header) + ' |',
        '|' + '|'.join('---' if a == 'l' else '---:' for a in align) + '|',
    ]
    lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
    return lines


def over(row: dict[str, Any]) -> str:
    errors = row.get('errors', 0)
    return f'{row["requests_over_window"]}' + (f' ({errors} err)' if errors else '')


def with_min(row: dict[str, Any], key: str) -> str:
    return f'{pct(row[key])} ({pct(row["min_" + key])})'


def main_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One window's profiles: cost, on a cache with explicit breakpoints too, its floor, prefix
    breaks, needed facts and model texts kept."""
    return table(
        ('profile', 'cost', 'bp cost', 'floor', 'breaks', 'needed', 'texts'),
        'lrrrrrr',
        [
            (
                profile_cell(row['profile']),
                f'{row["cost_ratio"]:.3f}',
                f'{row["breakpoint_cost_ratio"]:.3f}',
                f'{row["perfect_cost_ratio"]:.3f}',
                f'{row["breaks_per_100"]:.1f}',
                pct(row['needed_fact_retention']),
                pct(row['model_texts_kept']),
            )
            for row in rows
        ],
    )


def size_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    return table(
        ('profile', 'input / none', 'peak / none', 'over (errors)', 'cached'),
        'lrrrr',
        [
            (
                profile_cell(row['profile']),
                f'{row["input_ratio"]:.3f}',
                f'{row["peak_ratio"]:.3f}',
                over(row),
                pct(row['cached_share']),
            )
            for row in rows
        ],
    )


def facts_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    return table(
        ('profile', 'facts', 'needed (min)', 'texts (min)', 'needed or recoverable (min)'),
        'lrrrr',
        [
            (
                profile_cell(row['profile']),
                pct(row['fact_retention']),
                with_min(row, 'needed_fact_retention'),
                with_min(row, 'model_texts_kept'),
                with_min(row, 'needed_or_recoverable'),
            )
            for row in rows
        ],
    )


def work_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    return table(
        ('profile', 'summariser calls', 'drops', 'summarised', 'recall-charged', 'compile ms'),
        'lrrrrr',
        [
            (
                profile_cell(row['profile']),
                str(row['summary_calls']),
                f'{row["dropping_compiles"]}/{row["requests"]}',
                f'{row["summarised_compiles"]}/{row["requests"]}',
                f'{row["recall_ratio"]:.3f}',
                f'{row["compile_ms_median"]:.2f}',
            )
            for row in rows
        ],
    )


def run_table(per_label: dict[str, dict[str, Any]]) -> list[str]:
    """One run at one window, every profile; requests over the window beside the profile's name."""
    none_cost = per_label['none']['cost'] if 'none' in per_label else 0.0
    none_bp = per_label['none']['breakpoint_cost'] if 'none' in per_label else 0.0

    def name(label: str, res: dict[str, Any]) -> str:
        return f'{label} ({over(res)} over)' if res['requests_over_window'] else label

    return table(
        ('profile', 'cost', 'bp cost', 'floor', 'breaks', 'needed', 'texts'),
        'lrrrrrr',
        [
            (
                name(label, res),
                f'{res["cost_ratio_to_none"]:.3f}',
                f'{res["breakpoint_cost"] / none_bp:.3f}' if none_bp else '–',
                f'{res["perfect_cache_cost"] / none_cost:.3f}' if none_cost else '–',
                f'{res["breaks_per_100"]:.1f}',
                pct(res['needed_fact_retention']),
                pct(res['model_texts_kept']),
            )
            for label, res in per_label.items()
        ],
    )


def runs_section(runs: dict[str, dict[str, dict[str, dict[str, Any]]]], window: str) -> list[str]:
    """Every run at one window: its name, then its table."""
    lines: list[str] = []
    for run, per_window in runs.items():
        if window in per_window:
            lines += [f'**`{run}`**', '', *run_table(per_window[window]), '']
    return lines[:-1]


def options_table(rows: Sequence[dict[str, Any]], everything: Sequence[dict[str, Any]]) -> list[str]:
    """Each preset with settings (`coding(clamp_fresh=False)`) beside the same preset: default -> set."""
    by_key = {(row['window'], row['profile']): row for row in everything}
    lines = []
    for row in rows:
        base_name, _, settings = row['profile'].partition('(')
        base = by_key.get((row['window'], base_name))
        if not settings or base is None:
            continue

        def pair(
            key: str, fmt: Callable[[Any], str], base: dict[str, Any] = base, row: dict[str, Any] = row
        ) -> str:
            return f'{fmt(base[key])} → {fmt(row[key])}'

        lines.append(
            (
                profile_cell(base_name),
                pair('cost_ratio', lambda v: f'{v:.3f}'),
                pair('breaks_per_100', lambda v: f'{v:.1f}'),
                pair('needed_fact_retention', pct),
                pair('dropping_compiles', str),
            )
        )
    return table(('preset', 'cost', 'breaks', 'needed', 'drops'), 'lrrrr', lines)


def indent(lines: Sequence[str]) -> list[str]:
    return [f'    {line}' if line else '' for line in lines]


def by_window(summary: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The summary's rows, by window (`'128k'`), in their order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in summary:
        groups.setdefault(window_label(row['window']), []).append(row)
    return groups


def tabs(sections: dict[str, list[str]]) -> list[str]:
    """A tab per section (`pymdownx.tabbed`), the first open."""
    lines: list[str] = []
    for title, body in sections.items():
        lines += [f'=== "{title}"', '', *indent(body), '']
    return lines[:-1]


def per_window(
    summary: Sequence[dict[str, Any]], make: Callable[[Sequence[dict[str, Any]]], list[str]]
) -> list[str]:
    return tabs({window: make(rows) for window, rows in by_window(summary).items()})


def collapsible(title: str, lines: Sequence[str], *, kind: str = 'note') -> list[str]:
    """A block closed by default (`pymdownx.details`)."""
    return [f'??? {kind} "{title}"', '', *indent(lines)]


def bars(summary: Sequence[dict[str, Any]]) -> dict[str, dict[str, charts.Bar]]:
    groups: dict[str, dict[str, charts.Bar]] = {}
    for row in summary:
        if row['profile'] == 'none':
            continue
        groups.setdefault(f'window {window_label(row["window"])}', {})[row['profile']] = (
            row['cost_ratio'],
            row['perfect_cost_ratio'],
        )
    return groups


def windows_of(summary: Sequence[dict[str, Any]]) -> list[str]:
    return [str(w) for w in dict.fromkeys(row['window'] for row in summary)]


def regions(
    shared: dict[str, Any], heldout: dict[str, Any] | None, options: dict[str, Any] | None = None
) -> dict[str, list[str]]:
    """The page's generated Markdown, by region name: tables per window in tabs, details closed."""
    summary = shared['summary']
    out: dict[str, list[str]] = {
        'main': per_window(summary, main_table),
        'details': [
            *collapsible(
                'Sizes, requests over the window, the cached share', per_window(summary, size_table)
            ),
            '',
            *collapsible('Facts, model texts, read-back', per_window(summary, facts_table)),
            '',
            *collapsible(
                'Summaries, drops, recall-charged cost, compile time', per_window(summary, work_table)
            ),
        ],
        'runs': [],
    }
    for k, window in enumerate(windows_of(summary)):
        if k:
            out['runs'].append('')
        out['runs'] += collapsible(
            f'Every run at {window_label(window)}', runs_section(shared['runs'], window)
        )
    if heldout is not None:
        out['heldout'] = per_window(heldout['summary'], main_table)
        out['heldout-details'] = [
            *collapsible(
                'Sizes, requests over the window, the cached share',
                per_window(heldout['summary'], size_table),
            ),
            '',
            *collapsible('Facts, model texts, read-back', per_window(heldout['summary'], facts_table)),
        ]
    if options is not None:
        rows = options['summary']
        out['options'] = per_window(rows, lambda group: options_table(group, rows))
    return out


def assets(shared: dict[str, Any], heldout: dict[str, Any] | None) -> dict[str, str]:
    """The charts, by file name under `docs/assets`."""
    out = {'benchmarks-cost.svg': charts.cost_bars(bars(shared['summary'])) + '\n'}
    if heldout is not None:
        out['benchmarks-heldout-cost.svg'] = charts.cost_bars(bars(heldout['summary'])) + '\n'
    chart = shared.get('chart')
    if chart:
        out['benchmarks-run.svg'] = charts.svg(chart['views'], window=chart['window']) + '\n'
    return out


MARKER = re.compile(r'(<!-- report:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /report:(?P=name) -->)', re.S)


def fill(page: str, generated: dict[str, list[str]]) -> str:
    """`page` with each region's body replaced; a region the page lacks, or one it has that nothing
    generates, is an error (a renamed region would otherwise go stale silently)."""
    found = {m['name'] for m in MARKER.finditer(page)}
    if missing := sorted(set(generated) - found):
        raise SystemExit(
            f'{PAGE.name} has no region {", ".join(missing)} (<!-- report:NAME --> ... <!-- /report:NAME -->)'
        )
    if unknown := sorted(found - set(generated)):
        raise SystemExit(f'{PAGE.name}: nothing generates region {", ".join(unknown)}')

    def body(match: re.Match[str]) -> str:
        return match[1] + '\n'.join(generated[match['name']]) + '\n' + match[4]

    return MARKER.sub(body, page)


def load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def render(*, results: Path = RESULTS, assets_dir: Path = ASSETS, page: Path = PAGE) -> dict[Path, str]:
    """Every file rendering writes, and its text."""
    shared = load(results / 'shared.json')
    if shared is None:
        raise SystemExit(f'no recorded figures in {results}: run with --shared (and --heldout) first')
    heldout = load(results / 'heldout.json')
    files = {assets_dir / name: text for name, text in assets(shared, heldout).items()}
    files[page] = fill(page.read_text(), regions(shared, heldout, load(results / 'options.json')))
    return files


def stale(files: dict[Path, str]) -> list[Path]:
    return [path for path, text in files.items() if not path.exists() or path.read_text() != text]


def main(argv: Sequence[str] | None = None, *, write: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        '--shared', type=Path, help='bench/replay.py --json output of the shared runs to record'
    )
    parser.add_argument('--heldout', type=Path, help='the same for bench/heldout')
    parser.add_argument(
        '--options', type=Path, help='the same for presets replayed with settings (`NAME(...)`)'
    )
    parser.add_argument(
        '--chart-run', default=CHART_RUN, help=f'the run charted per request (default {CHART_RUN})'
    )
    parser.add_argument('--chart-window', type=int, default=CHART_WINDOW, help='its window (default 32000)')
    parser.add_argument('--check', action='store_true', help='write nothing; exit 1 if anything is stale')
    args = parser.parse_args(argv)
    if args.check and (args.shared or args.heldout or args.options):
        parser.error('--check renders the recorded figures; it takes no --shared, --heldout or --options')
    for name, source in (('shared', args.shared), ('heldout', args.heldout), ('options', args.options)):
        if source is not None:
            chart_run = args.chart_run if name == 'shared' else None
            recorded = record(
                json.loads(source.read_text()), chart_run=chart_run, chart_window=args.chart_window
            )
            RESULTS.mkdir(parents=True, exist_ok=True)
            (RESULTS / f'{name}.json').write_text(json.dumps(recorded, indent=1) + '\n')
            write(f'recorded {source} in {RESULTS / f"{name}.json"}')
    files = render()
    if args.check:
        if paths := stale(files):
            write('stale (run python bench/report.py): ' + ', '.join(str(p.relative_to(ROOT)) for p in paths))
            return 1
        write('the benchmarks page and its charts show the recorded figures')
        return 0
    for path, text in files.items():
        path.write_text(text)
        write(f'wrote {path.relative_to(ROOT)}')
    shared = load(RESULTS / 'shared.json')
    assert shared is not None  # render() read it
    write('\n'.join(per_window(shared['summary'], main_table)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
