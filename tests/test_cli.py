"""The `pydantic-ai-context` command line: replay and inspect, their outputs and their error paths."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ToolReturnPart

from pydantic_ai_context import ContextProfile, _parts, profiles
from pydantic_ai_context.cli import align, main
from pydantic_ai_context.profiles import split_settings

from . import data
from .builders import History, Tool, long_text

REAL = data.SMALLEST


def blank_old_results(messages: list[ModelMessage]) -> list[ModelMessage]:
    """Marks every tool result but the newest request's as masked (idempotent)."""
    last = max(i for i, m in enumerate(messages) if isinstance(m, ModelRequest))
    out: list[ModelMessage] = []
    for i, m in enumerate(messages):
        if isinstance(m, ModelRequest) and i != last:
            parts = [
                dataclasses.replace(
                    p, content='[masked]', metadata=_parts.with_marker(p.metadata, {'kind': 'masked'})
                )
                if isinstance(p, ToolReturnPart) and _parts.marker(p) is None
                else p
                for p in m.parts
            ]
            if any(a is not b for a, b in zip(parts, m.parts, strict=True)):
                m = dataclasses.replace(m, parts=parts)
        out.append(m)
    return out


def masking(**settings: Any) -> ContextProfile:
    common, own = split_settings(settings)
    return ContextProfile(name='test_masking', steps=(blank_old_results,), settings=own, **common)


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith('PYDANTIC_AI_CONTEXT_'):
            monkeypatch.delenv(name)
    monkeypatch.setitem(profiles._PRESETS, 'test_masking', masking)


def small_log() -> list[ModelMessage]:
    return (
        History()
        .user('fix the crash', system='You are a coding agent.')
        .step(Tool('bash', {'command': 'ls -R'}, 'src/app/main.py\nsrc/app/util.py'))
        .step(
            Tool(
                'bash',
                {'command': 'python src/app/main.py'},
                'Traceback\nValueError: bad value\n' + long_text(30),
            )
        )
        .step(Tool('cat', {'path': 'src/app/main.py'}, long_text(40)))
        .answer('Fixed.')
        .build()
    )


def write_log(path: Path, log: list[ModelMessage]) -> Path:
    path.write_bytes(ModelMessagesTypeAdapter.dump_json(log))
    return path


def run_module(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith('PYDANTIC_AI_CONTEXT_')}
    return subprocess.run(
        [sys.executable, '-m', 'pydantic_ai_context', *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=120,
        check=False,
    )


# --- replay -----------------------------------------------------------------------------------


def test_replay_through_the_module_entry_point(tmp_path: Path) -> None:
    out_json = tmp_path / 'out.json'
    out_html = tmp_path / 'chart.html'
    proc = run_module(
        'replay', str(REAL), '--profile', 'transparent', '--json', str(out_json), '--plot', str(out_html)
    )
    assert proc.returncode == 0, proc.stderr
    assert 'input tokens' in proc.stdout
    assert 'none' in proc.stdout
    assert 'transparent' in proc.stdout
    assert '51 requests' in proc.stdout

    document = json.loads(out_json.read_text())
    assert document['schema'] == 'pydantic-ai-context/replay/1'
    assert document['profiles'] == ['none', 'transparent']
    assert document['context_window'] == 128_000
    (entry,) = document['histories']
    assert entry['file'] == str(REAL)
    assert entry['requests'] == 51
    results = {r['profile']: r for r in entry['results']}
    assert set(results) == {'none', 'transparent'}
    for result in results.values():
        for key in (
            'input_tokens',
            'cost',
            'cost_ratio',
            'peak_view_tokens',
            'requests_over_window',
            'fact_retention',
            'summary_calls',
            'compile_ms_median',
            'records',
        ):
            assert key in result
        assert len(result['records']) == 51
        assert {'index', 'view_tokens', 'cached_tokens', 'compile_ms'} <= set(result['records'][0])
    assert results['none']['cost_ratio'] == 1.0
    assert [row['profile'] for row in document['summary']] == ['none', 'transparent']

    page = out_html.read_text()
    assert page.startswith('<!DOCTYPE html>')
    assert '<script' not in page
    svg = page[page.index('<svg') : page.index('</svg>') + len('</svg>')]
    root = ET.fromstring(svg)  # well-formed inline SVG
    assert len(root.findall('{http://www.w3.org/2000/svg}polyline')) == 2


def test_replay_multi_history_file_with_a_compacting_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = tmp_path / 'two.json'
    logs = [small_log(), small_log()]
    both.write_text(json.dumps([json.loads(ModelMessagesTypeAdapter.dump_json(log)) for log in logs]))
    out_json = tmp_path / 'out.json'
    assert (
        main(['replay', str(both), '-p', 'test_masking', '--window', '50000', '--json', str(out_json)]) == 0
    )
    printed = capsys.readouterr().out
    assert f'{both}#0' in printed
    assert f'{both}#1' in printed
    assert 'All histories' in printed
    document = json.loads(out_json.read_text())
    assert [h['history'] for h in document['histories']] == [0, 1]
    results = {r['profile']: r for r in document['histories'][0]['results']}
    assert results['test_masking']['input_tokens'] < results['none']['input_tokens']


# --- errors -----------------------------------------------------------------------------------


def test_missing_file_exits_1_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / 'nope.json'
    assert main(['replay', str(missing), '-p', 'transparent']) == 1
    assert str(missing) in capsys.readouterr().err


def test_invalid_json_exits_1_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / 'bad.json'
    bad.write_text('{not json')
    assert main(['replay', str(bad), '-p', 'transparent']) == 1
    err = capsys.readouterr().err
    assert str(bad) in err
    assert 'JSON' in err


def test_invalid_history_exits_1_with_the_message_index(tmp_path: Path) -> None:
    data = json.loads(ModelMessagesTypeAdapter.dump_json(small_log()))
    data[2]['kind'] = 'nonsense'
    bad = tmp_path / 'invalid.json'
    bad.write_text(json.dumps(data))
    proc = run_module('inspect', str(bad))
    assert proc.returncode == 1
    assert str(bad) in proc.stderr
    assert 'message 2' in proc.stderr


def test_unknown_profile_exits_2_listing_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['replay', str(REAL), '--profile', 'nope']) == 2
    err = capsys.readouterr().err
    assert "unknown profile 'nope'" in err
    assert 'transparent' in err
    assert main(['inspect', str(REAL), '--profile', 'none']) == 2


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(['replay']) == 2
    assert main(['replay', str(REAL), '--window', 'big']) == 2
    assert main(['replay', str(REAL), '--window', '0']) == 2
    assert main(['replay', str(REAL), '--plot', str(tmp_path / 'chart.svgz')]) == 2
    assert main(['inspect', str(REAL), '--at', '999']) == 2
    assert main(['inspect', str(REAL), '--history', '3']) == 2
    assert main(['--version']) == 0


@pytest.mark.skipif(importlib.util.find_spec('matplotlib') is not None, reason='matplotlib is installed')
def test_png_without_matplotlib_suggests_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['replay', str(REAL), '-p', 'transparent', '--plot', str(tmp_path / 'chart.png')]) == 2
    err = capsys.readouterr().err
    assert 'matplotlib' in err
    assert '.html' in err
    assert not (tmp_path / 'chart.png').exists()


def test_invalid_environment_variable_exits_2_naming_it() -> None:
    proc = run_module(
        'replay', str(REAL), '-p', 'transparent', env={'PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW': 'abc'}
    )
    assert proc.returncode == 2
    assert 'PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW' in proc.stderr


# --- inspect ----------------------------------------------------------------------------------


def test_inspect_shows_log_view_policies_and_gauge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_log(tmp_path / 'small.json', small_log())
    assert main(['inspect', str(path), '--profile', 'test_masking', '--window', '20000']) == 0
    printed = capsys.readouterr().out
    assert 'request 4 of 4' in printed
    assert 'changed: masked' in printed
    assert 'blank_old_results' in printed  # the policy table
    assert '/ 20,000 tokens' in printed  # the gauge
    assert 'window: explicit' in printed


def test_inspect_at_a_request_of_the_real_trajectory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(['inspect', str(REAL), '--at', '3']) == 0
    printed = capsys.readouterr().out
    assert 'request 3 of 51' in printed
    assert 'nothing changed' in printed


def test_align_pairs_changed_dropped_and_inserted_messages() -> None:
    log = small_log()[:-1]
    view = blank_old_results(log)
    rows = align(log, view)
    assert [r.status for r in rows].count('changed') == 2
    assert all(r.log_index == r.view_index for r in rows)
    # Drop two middle messages and insert a summary in their place.
    summary = ModelRequest(parts=[], metadata=_parts.with_marker(None, {'kind': 'summary'}))
    shorter = [view[0], summary, *view[3:]]
    statuses = [r.status for r in align(log, shorter)]
    assert statuses[:4] == ['kept', 'summarised', 'summarised', 'inserted']
    statuses = [r.status for r in align(log, [view[0], *view[3:]])]
    assert statuses[:3] == ['kept', 'dropped', 'dropped']
