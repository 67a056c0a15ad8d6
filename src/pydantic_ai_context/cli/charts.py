"""`replay --plot`: view tokens per request, one line per profile, as a self-contained HTML page
(inline SVG, no scripts) or a PNG (matplotlib, the optional `plot` extra). Over several files the
page also charts each profile's cost ratio to `none` (`cost_bars`, which `bench/report.py` draws
per window for the benchmarks page).

The y-axis fits the profiles and the window: when `none` (no compaction) climbs far above them it
is drawn clipped at the top, with its peak in the legend, so the profiles are not squashed into a
flat line at the bottom.
"""

from __future__ import annotations

import html
import importlib.util
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from ..replay import ReplayResult
from ._common import History, UsageError, check_output, write

SUFFIXES: Final = ('.html', '.htm', '.png')
COLORS: Final = ('#444444', '#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b')
OFF_SCALE_FACTOR: Final = 2.0
"""`none` is clipped when its peak is more than this many times the highest profile (or the window)."""


def check_target(path: Path) -> None:
    """Fail before the replay when the chart cannot be written: format, matplotlib, folder."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UsageError(f'--plot {path}: unsupported format {suffix or "(none)"!r}; use .html or .png')
    if suffix == '.png' and importlib.util.find_spec('matplotlib') is None:
        raise UsageError(
            f'--plot {path}: writing a PNG needs matplotlib, which is not installed '
            "(pip install 'pydantic-ai-context[plot]'); or write a self-contained chart with --plot "
            f'{path.with_suffix(".html")}'
        )
    check_output(path, '--plot')


def series(results: dict[str, ReplayResult]) -> dict[str, list[int]]:
    return {label: [r.view_tokens for r in result.records] for label, result in results.items()}


def write_plot(
    path: Path,
    histories: Sequence[History],
    results: Sequence[dict[str, ReplayResult]],
    summary: Sequence[dict[str, Any]],
    *,
    window: int,
) -> None:
    if path.suffix.lower() == '.png':
        _write_png(path, histories, results, window=window)
    else:
        write(path, chart_html(histories, results, summary, window=window))


def y_scale(values: dict[str, list[int]], *, window: int) -> tuple[float, bool]:
    """The top of the y-axis, and whether `none` goes off it (see `OFF_SCALE_FACTOR`)."""
    profiles = [max(v, default=0) for label, v in values.items() if label != 'none']
    fitted = max([window, *profiles])
    none_peak = max(values.get('none', []), default=0)
    if profiles and none_peak > OFF_SCALE_FACTOR * fitted:
        return nice(fitted * 1.15), True
    return nice(max(fitted, none_peak) * 1.05), False


def chart_html(
    histories: Sequence[History],
    results: Sequence[dict[str, ReplayResult]],
    summary: Sequence[dict[str, Any]] = (),
    *,
    window: int,
) -> str:
    """A self-contained HTML page (inline SVG, no scripts) charting view tokens per request per profile,
    with each file's numbers and, for several files, the all-files summary the terminal prints."""
    sections = []
    if len(histories) > 1 and summary:
        bars = {
            f'window {short(window)}': {
                row['profile']: (row['cost_ratio'], row.get('perfect_cost_ratio'))
                for row in summary
                if row['profile'] != 'none'
            }
        }
        sections.append(
            '<section><h2>All files</h2><p>Geometric mean of the ratios to none.</p>'
            f'{cost_bars(bars, height=300)}{_summary_html(summary)}</section>'
        )
    for k, (history, per_profile) in enumerate(zip(histories, results, strict=True)):
        base = per_profile['none']
        rows = []
        for i, (label, res) in enumerate(per_profile.items()):
            key = (
                f'<span class="key" style="background:{COLORS[i % len(COLORS)]}"></span>{html.escape(label)}'
            )
            if res.errors:
                rows.append(
                    f'<tr class="failed"><td>{key}</td><td colspan="4">failed</td>'
                    f'<td>{res.errors} of {res.requests}</td><td>failed</td></tr>'
                )
                continue
            rows.append(
                f'<tr><td>{key}</td><td>{res.input_tokens:,}</td><td>{res.ratio_to(base):.3f}</td>'
                f'<td>{res.peak_view_tokens:,}</td><td>{res.requests_over_window}</td><td>0</td>'
                f'<td>{res.fact_retention:.1%}</td></tr>'
            )
        failed = {label for label, res in per_profile.items() if res.errors}
        sections.append(
            f'<section><h2 title="{html.escape(history.label)}">{html.escape(history.short_label)}</h2>'
            f'<p>{len(history.messages)} messages, {history.requests} requests.</p>'
            f'{svg(series(per_profile), window=window, failed=failed, chart_id=k)}'
            '<table><tr><th>profile</th><th>input tokens</th><th>cost vs none</th><th>peak</th>'
            f'<th>over window</th><th>errors</th><th>facts kept</th></tr>{"".join(rows)}</table></section>'
        )
    style = (
        'body{font-family:system-ui,sans-serif;margin:2em;color:#222}'
        'table{border-collapse:collapse;margin:1em 0 3em}'
        'td,th{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:right}'
        'td:first-child,th:first-child{text-align:left}'
        'tr.failed td{color:#b00020}'
        '.key{display:inline-block;width:.8em;height:.8em;margin-right:.4em}'
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<title>pydantic-ai-context replay</title><style>{style}</style></head><body>'
        f'<h1>View tokens per request</h1><p>Context window: {window:,} tokens (dashed line). '
        'A failed profile could not fit some request into the window.</p>'
        f'{"".join(sections)}</body></html>\n'
    )


def _summary_html(rows: Sequence[dict[str, Any]]) -> str:
    body = []
    for i, row in enumerate(rows):
        key = f'<span class="key" style="background:{COLORS[i % len(COLORS)]}"></span>{html.escape(row["profile"])}'
        if row['failed']:
            body.append(
                f'<tr class="failed"><td>{key}</td><td>{row["histories"]}</td><td colspan="4">failed</td>'
                f'<td>{row["errors"]} of {row["requests"]}</td><td>failed</td></tr>'
            )
            continue
        body.append(
            f'<tr><td>{key}</td><td>{row["histories"]}</td><td>{_ratio(row["cost_ratio"])}</td>'
            f'<td>{_ratio(row["input_ratio"])}</td><td>{_ratio(row["peak_ratio"])}</td>'
            f'<td>{row["requests_over_window"]}</td><td>0</td><td>{row["fact_retention"]:.1%}</td></tr>'
        )
    return (
        '<table><tr><th>profile</th><th>histories</th><th>cost ratio</th><th>input ratio</th>'
        f'<th>peak ratio</th><th>over window</th><th>errors</th><th>facts kept</th></tr>{"".join(body)}</table>'
    )


def _ratio(value: float | None) -> str:
    return '-' if value is None else f'{value:.3f}'


def svg(
    values: dict[str, list[int]],
    *,
    window: int,
    failed: set[str] = frozenset(),  # type: ignore[assignment]
    chart_id: int = 0,
    width: int = 900,
    height: int = 400,
) -> str:
    """One chart: a line per series, the window as a labelled dashed line, labelled axes."""
    left, right, top, bottom = 84, 190, 15, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    n = max((len(v) for v in values.values()), default=0)
    y_max, none_clipped = y_scale(values, window=window)
    clip = f'plot-{chart_id}'

    def x(i: int) -> float:
        return left + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(tokens: float) -> float:
        return top + plot_h * (1 - tokens / y_max)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="view tokens per request" '
        'font-family="system-ui,sans-serif" font-size="12">',
        f'<defs><clipPath id="{clip}"><rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}"/></clipPath></defs>',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    for k in range(6):
        value = y_max * k / 5
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{short(value)}</text>'
        )
    for k in range(6 if n > 1 else 1):
        i = round((n - 1) * k / 5) if n > 1 else 0
        parts.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{i + 1}</text>')
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">request</text>'
        f'<text transform="translate(16 {top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle">'
        'view tokens (input of each request)</text>'
    )
    if window <= y_max:
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(window):.1f}" y2="{y(window):.1f}" '
            'stroke="#000" stroke-dasharray="6 4"/>'
            f'<text x="{left + plot_w - 4}" y="{y(window) - 5:.1f}" text-anchor="end">'
            f'window {short(window)}</text>'
        )
    for k, (label, points_of) in enumerate(values.items()):
        color = COLORS[k % len(COLORS)]
        points = ' '.join(f'{x(i):.1f},{y(v):.1f}' for i, v in enumerate(points_of))
        if points:
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.8" clip-path="url(#{clip})" '
                f'points="{points}"/>'
            )
        name = label
        if label in failed:
            name += ' (failed)'
        if label == 'none' and none_clipped:
            name += f' (off scale, peak {short(max(points_of, default=0))})'
        ly = top + 14 + 18 * k
        parts.append(
            f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 32}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{color}" stroke-width="3"/><text x="{left + plot_w + 38}" y="{ly}">{html.escape(name)}</text>'
        )
    parts.append('</svg>')
    return ''.join(parts)


Bar = tuple[float | None, float | None]
"""One bar of `cost_bars`: the cost ratio to `none` (`None`: failed) and the perfect cache's (or `None`)."""


def cost_bars(
    groups: dict[str, dict[str, Bar]],
    *,
    title: str = 'cost / none',
    width: int = 760,
    height: int = 340,
) -> str:
    """A grouped bar chart of cost ratios to `none`: a group per window (or file), a bar per profile
    in the order of the first group, each with a tick at what a cache that never breaks would give
    (the floor for those views), and `none` as the dashed line at 1. A failed profile (no ratio) is
    named in its group instead of drawn."""
    left, right, top, bottom = 50, 190, 15, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    labels = list(dict.fromkeys(label for bars in groups.values() for label in bars))
    highest = max([1.0, *(c for bars in groups.values() for c, _ in bars.values() if c is not None)])
    y_max = nice(highest * 1.08)
    group_w = plot_w / max(1, len(groups))
    bar_w = group_w * 0.8 / max(1, len(labels))

    def y(ratio: float) -> float:
        return top + plot_h * (1 - min(ratio, y_max) / y_max)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)} per profile" '
        'font-family="system-ui,sans-serif" font-size="12">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    for k in range(6):
        value = y_max * k / 5
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{round(value, 3):g}</text>'
        )
    parts.append(
        f'<text transform="translate(14 {top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle">'
        f'{html.escape(title)}</text>'
    )
    for g, (group, bars) in enumerate(groups.items()):
        x0 = left + g * group_w + group_w * 0.1
        parts.append(
            f'<text x="{left + (g + 0.5) * group_w:.1f}" y="{top + plot_h + 18}" text-anchor="middle" '
            f'font-weight="bold">{html.escape(group)}</text>'
        )
        for k, label in enumerate(labels):
            if label not in bars:
                continue
            cost, floor = bars[label]
            bx = x0 + k * bar_w
            cx = bx + bar_w / 2
            if cost is None:
                parts.append(
                    f'<text x="{cx:.1f}" y="{top + plot_h - 6}" text-anchor="middle" fill="#b00020" '
                    f'font-size="10">failed</text>'
                )
                continue
            color = COLORS[(k + 1) % len(COLORS)]
            parts.append(
                f'<rect x="{bx + 1:.1f}" y="{y(cost):.1f}" width="{bar_w - 2:.1f}" '
                f'height="{top + plot_h - y(cost):.1f}" fill="{color}"><title>{html.escape(label)} '
                f'{html.escape(group)}: {cost:.3f}</title></rect>'
                f'<text x="{cx:.1f}" y="{y(cost) - 4:.1f}" text-anchor="middle" font-size="10">'
                f'{cost:.2f}</text>'
            )
            if floor is not None:
                parts.append(
                    f'<line x1="{bx + 1:.1f}" x2="{bx + bar_w - 1:.1f}" y1="{y(floor):.1f}" '
                    f'y2="{y(floor):.1f}" stroke="#000" stroke-width="2"/>'
                )
    parts.append(
        f'<line x1="{left}" x2="{left + plot_w}" y1="{y(1.0):.1f}" y2="{y(1.0):.1f}" '
        'stroke="#444" stroke-dasharray="6 4"/>'
    )
    legend = [(COLORS[(k + 1) % len(COLORS)], label) for k, label in enumerate(labels)]
    for k, (color, label) in enumerate(legend):
        ly = top + 14 + 18 * k
        parts.append(
            f'<rect x="{left + plot_w + 12}" y="{ly - 10}" width="14" height="10" fill="{color}"/>'
            f'<text x="{left + plot_w + 32}" y="{ly}">{html.escape(label)}</text>'
        )
    ly = top + 14 + 18 * len(legend)
    parts.append(
        f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 26}" y1="{ly - 4}" y2="{ly - 4}" '
        f'stroke="#444" stroke-dasharray="4 3"/><text x="{left + plot_w + 32}" y="{ly}">none (1.0)</text>'
        f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 26}" y1="{ly + 14}" y2="{ly + 14}" '
        f'stroke="#000" stroke-width="2"/><text x="{left + plot_w + 32}" y="{ly + 18}">'
        'floor (no cache break)</text>'
    )
    parts.append('</svg>')
    return ''.join(parts)


_STEPS: Final = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)


def nice(value: float) -> float:
    """The smallest round step (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 x 10^k) times 5 at or above
    `value`, for round axis ticks: a 279k top becomes 300k (ticks of 60k), never 500k."""
    if value <= 0:
        return 1.0
    step = value / 5
    magnitude = 10.0 ** math.floor(math.log10(step))
    for factor in _STEPS:
        if step <= factor * magnitude:
            return 5 * factor * magnitude
    return 5 * 10 * magnitude  # pragma: no cover - the loop always returns


def short(tokens: float) -> str:
    """`83.6k`, `2.5k`, `1.25M`: three significant digits at most."""
    if tokens >= 1_000_000:
        return f'{tokens / 1_000_000:.3g}M'
    if tokens >= 1_000:
        return f'{tokens / 1_000:.3g}k'
    return f'{tokens:.3g}'


def _write_png(
    path: Path, histories: Sequence[History], results: Sequence[dict[str, ReplayResult]], *, window: int
) -> None:  # pragma: no cover - matplotlib is an optional extra, not installed in CI
    import matplotlib  # type: ignore[import-not-found]

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # type: ignore[import-not-found]

    fig, axes = plt.subplots(len(histories), 1, figsize=(10, 4 * len(histories)), squeeze=False)
    for ax, history, per_profile in zip(axes[:, 0], histories, results, strict=True):
        values = series(per_profile)
        y_max, none_clipped = y_scale(values, window=window)
        for label, points in values.items():
            name = label + (' (failed)' if per_profile[label].errors else '')
            if label == 'none' and none_clipped:
                name += f' (off scale, peak {short(max(points, default=0))})'
            ax.plot(range(1, len(points) + 1), points, label=name)
        ax.axhline(window, color='black', linestyle='--', linewidth=1, label=f'window {short(window)}')
        ax.set_ylim(0, y_max)
        ax.set_title(history.short_label)
        ax.set_xlabel('request')
        ax.set_ylabel('view tokens (input of each request)')
        ax.legend(loc='upper left')
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
