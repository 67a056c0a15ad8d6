"""`bench/report.py`: the benchmarks page's tables and charts come from the replays' figures."""

from __future__ import annotations

import importlib.util
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

import pytest
from pydantic_ai.messages import ModelMessagesTypeAdapter

from .builders import History, Tool

BENCH = Path(__file__).resolve().parents[1] / 'bench'
SVG = '{http://www.w3.org/2000/svg}'


def bench_module(name: str) -> ModuleType:
    """A script of `bench/` (which puts its own folder on `sys.path`), imported as a module."""
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    spec = importlib.util.spec_from_file_location(f'bench_{name}', BENCH / f'{name}.py')
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_page_shows_the_recorded_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """Rendering the recorded figures (`bench/results`) changes neither the page nor its charts: edit
    the page's text freely, but its tables and charts only through `python bench/report.py`."""
    report = bench_module('report')
    assert report.main(['--check']) == 0, capsys.readouterr().out


def small_run() -> History:
    history = History().user('fix the crash', system='You are a coding agent.')
    for i in range(12):
        history.step(Tool('bash', {'command': f'cat src/m{i}.py'}, f'# src/m{i}.py\n' + 'x = 1\n' * 300))
    return history.answer('Fixed.')


async def test_a_replay_is_recorded_then_rendered_into_the_page_and_charts(tmp_path: Path) -> None:
    log = tmp_path / 'run.json'
    log.write_bytes(ModelMessagesTypeAdapter.dump_json(small_run().build()))
    replayed = tmp_path / 'replay.json'
    replay = bench_module('replay')
    await replay.main(
        [str(log), '--no-harness', '--window', '8000', '--profile', 'coding', '--json', str(replayed)]
    )
    report = bench_module('report')
    document = json.loads(replayed.read_text())
    recorded = report.record(document, chart_run='run', chart_window=8000)
    assert 'records' not in recorded['runs']['run']['8000']['coding']  # aggregates only
    assert recorded['chart']['views']['coding'] == [
        r['view_tokens'] for r in document['files']['run']['8000']['coding']['records']
    ]
    results = tmp_path / 'results'
    results.mkdir()
    (results / 'shared.json').write_text(json.dumps(recorded))
    page = tmp_path / 'page.md'
    text_around = '# Title\n\nSome words.\n\n{}\nMore words.\n'
    regions = ''.join(
        f'<!-- report:{name} -->\nold\n<!-- /report:{name} -->\n' for name in ('main', 'details', 'runs')
    )
    page.write_text(text_around.format(regions))
    files = report.render(results=results, assets_dir=tmp_path, page=page)
    rendered = files[page]
    assert rendered.startswith('# Title\n\nSome words.\n\n<!-- report:main -->\n=== "8k"\n\n    | profile |')
    assert rendered.endswith('<!-- /report:runs -->\n\nMore words.\n')
    assert '\nold\n' not in rendered
    coding = next(row for row in document['summary'] if row['profile'] == 'coding')
    row = (
        f'| coding | {coding["cost_ratio"]:.3f} | {coding["breakpoint_cost_ratio"]:.3f} '
        f'| {coding["perfect_cost_ratio"]:.3f} | {coding["breaks_per_100"]:.1f} |'
    )
    assert f'    {row}' in rendered  # in the window's tab
    assert coding['breaks_per_100'] > 0  # masking 12 large results rewrites the prefix
    assert '??? note "Every run at 8k"' in rendered
    assert '    **`run`**' in rendered  # the run's table, in the block
    bars = ET.fromstring(files[tmp_path / 'benchmarks-cost.svg'])
    titles = [t.text for t in bars.iter(f'{SVG}title')]
    assert titles == [f'coding window 8k: {coding["cost_ratio"]:.3f}']
    lines = ET.fromstring(files[tmp_path / 'benchmarks-run.svg'])
    assert len(lines.findall(f'{SVG}polyline')) == 2  # none and coding
    # Nothing written yet: everything is stale; written, nothing is.
    assert report.stale(files) == list(files)
    for path, text in files.items():
        path.write_text(text)
    assert report.stale(report.render(results=results, assets_dir=tmp_path, page=page)) == []


def test_a_region_the_page_lacks_or_that_nothing_writes_is_an_error(tmp_path: Path) -> None:
    report = bench_module('report')
    with pytest.raises(SystemExit, match='no region runs'):
        report.fill('<!-- report:main -->\n<!-- /report:main -->\n', {'main': ['x'], 'runs': ['y']})
    with pytest.raises(SystemExit, match='nothing generates region old'):
        report.fill('<!-- report:old -->\n<!-- /report:old -->\n', {})


def test_options_pair_each_preset_with_its_settings() -> None:
    report = bench_module('report')
    base = {
        'window': 16_000,
        'cost_ratio': 0.5,
        'breaks_per_100': 60.0,
        'needed_fact_retention': 0.9,
        'model_texts_kept': 0.7,
        'dropping_compiles': 30,
    }
    rows = [
        {**base, 'profile': 'coding'},
        {**base, 'profile': 'coding(clamp_fresh=True)', 'cost_ratio': 0.44, 'dropping_compiles': 25},
    ]
    table = report.options_table(rows, rows)
    assert table[2] == '| coding | 0.500 → 0.440 | 60.0 → 60.0 | 90.0% → 90.0% | 30 → 25 |'
    assert len(table) == 3  # the preset alone is no row of its own
    tabs = report.per_window(rows, lambda group: report.options_table(group, rows))
    assert tabs[0] == '=== "16k"'
    assert tabs[4] == f'    {table[2]}'
