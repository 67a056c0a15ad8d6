"""The `pydantic-ai-context` command line: replay and inspect, their outputs and their error paths."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)

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
    assert document['schema'] == 'pydantic-ai-context/replay/2'
    assert document['ok'] is True
    assert document['context_window_source'] == 'default'
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


def replay_masking(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, Any]]:
    """`replay` of `small_log()` through `test_masking` at 50k: what it printed and its JSON."""
    out_json = tmp_path / 'out.json'
    log = write_log(tmp_path / 'log.json', small_log())
    assert main(['replay', str(log), '-p', 'test_masking', '--window', '50000', '--json', str(out_json)]) == 0
    printed = capsys.readouterr().out
    return printed, json.loads(out_json.read_text())


def test_replay_reports_the_cache_breaks_and_the_perfect_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printed, document = replay_masking(tmp_path, capsys)
    for column in ('cached', 'breaks/100', 'perfect cache'):
        assert column in printed
    (entry,) = document['histories']
    results = {r['profile']: r for r in entry['results']}
    masked, none = results['test_masking'], results['none']
    breaks = sum(r['prefix_break'] for r in masked['records'])
    assert breaks > 0, 'masking an old result rewrites the prefix'
    assert masked['prefix_breaks'] == breaks
    assert masked['breaks_per_100'] == pytest.approx(100 * breaks / masked['requests'])
    assert none['prefix_breaks'] == 0
    assert masked['perfect_cache_cost'] < masked['cost']
    rows = {row['profile']: row for row in document['summary']}
    assert rows['test_masking']['breaks_per_100'] == pytest.approx(masked['breaks_per_100'])
    assert rows['test_masking']['perfect_cost_ratio'] == pytest.approx(
        masked['perfect_cache_cost'] / none['cost']
    )
    assert rows['test_masking']['cached_share'] == pytest.approx(masked['cached_share'])
    assert rows['none']['perfect_cost_ratio'] == pytest.approx(1.0)


def test_replay_reports_the_cost_on_a_provider_with_explicit_breakpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printed, document = replay_masking(tmp_path, capsys)
    (entry,) = document['histories']
    results = {r['profile']: r for r in entry['results']}
    masked, none = results['test_masking'], results['none']
    # Sending the log as is appends every time: both caches read the same.
    assert none['breakpoint_cost'] == pytest.approx(none['cost'])
    assert [r['breakpoint_cached_tokens'] for r in none['records']] == [
        r['cached_tokens'] for r in none['records']
    ]
    # Masking rewrites messages behind the end: an explicit-breakpoint cache reads no more than
    # the longest common prefix, so it costs at least as much.
    assert all(r['breakpoint_cached_tokens'] <= r['cached_tokens'] for r in masked['records'])
    assert masked['breakpoint_cost'] >= masked['cost']
    rows = {row['profile']: row for row in document['summary']}
    assert rows['test_masking']['breakpoint_cost_ratio'] == pytest.approx(
        masked['breakpoint_cost'] / none['breakpoint_cost']
    )
    ratio = masked['breakpoint_cost'] / none['breakpoint_cost']
    assert (
        f'vs none with explicit cache breakpoints (Anthropic, Bedrock: replay.breakpoints): test_masking {ratio:.3f}'
        in printed
    )


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
    printed = ' '.join(capsys.readouterr().out.split())  # rich wraps long lines
    assert 'request 4 of 4' in printed
    assert 'changed: masked' in printed
    assert 'blank_old_results' in printed  # the policy table
    assert '/ 20,000 tokens' in printed  # the gauge
    assert 'budget window 20,000 (--window) - output 4,096' in printed


def test_inspect_splits_the_request_into_messages_instructions_and_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = small_log()
    # pydantic-ai records the instructions on every request; a recorded log has no tool schemas.
    log = [
        dataclasses.replace(m, instructions='Always answer in French. ' * 20)
        if isinstance(m, ModelRequest)
        else m
        for m in log
    ]
    path = write_log(tmp_path / 'instructed.json', log)
    assert main(['inspect', str(path), '--profile', 'coding', '--window', '20000']) == 0
    printed = ' '.join(capsys.readouterr().out.split())
    assert re.search(r'messages [\d,]+, instructions 1\d\d, tools 0;', printed), printed[-600:]


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


# --- failures are failures ----------------------------------------------------------------------


def test_a_profile_that_raises_is_a_failure_in_the_table_the_json_and_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / 'out.json'
    out_html = tmp_path / 'chart.html'
    code = main(
        [
            *('replay', str(REAL), '-p', 'coding', '-p', 'transparent', '--window', '500'),
            *('--json', str(out_json), '--plot', str(out_html)),
        ]
    )
    assert code == 1
    captured = capsys.readouterr()
    rows = {line.split('│')[1].strip(): line for line in captured.out.splitlines() if line.startswith('│')}
    for name in ('coding', 'transparent'):
        assert '51 of 51' in rows[name]
        assert 'failed' in rows[name]
        assert '1.000' not in rows[name], 'a failed profile is not compared with none'
        assert '100.0%' not in rows[name]
    assert 'transparent failed on 51 of 51 requests' in captured.out
    assert 'coding, transparent failed' in captured.err
    # The outputs are still written, and say the same.
    document = json.loads(out_json.read_text())
    assert document['ok'] is False
    results = {r['profile']: r for r in document['histories'][0]['results']}
    assert results['none']['failed'] is False
    assert results['none']['cost_ratio'] == 1.0
    assert results['none']['errors'] == 0  # the baseline checks no window: it just counts
    assert results['none']['requests_over_window'] == 51
    for name in ('coding', 'transparent'):
        assert results[name]['failed'] is True
        assert results[name]['errors'] == 51
        assert results[name]['cost_ratio'] is None
        assert results[name]['first_error']['request'] == 1
        assert 'budget allows' in results[name]['first_error']['message']
    summary = {row['profile']: row for row in document['summary']}
    assert summary['coding']['failed'] is True
    assert summary['coding']['cost_ratio'] is None
    assert summary['coding']['fact_retention'] is None
    assert 'coding (failed)' in out_html.read_text()


def test_a_partly_failing_profile_fails_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Small requests fit, the last does not: the run would have stopped there.
    log = (
        History()
        .user('go')
        .step(Tool('ls', {}, 'a.py'))
        .step(Tool('cat', {'path': 'big.txt'}, long_text(600)))
        .answer('done')
        .build()
    )
    path = write_log(tmp_path / 'run.json', log)
    assert main(['replay', str(path), '-p', 'transparent', '--window', '4000']) == 1
    assert '1 of 3' in capsys.readouterr().out


@pytest.mark.parametrize('option', ['--json', '--plot'])
def test_an_output_folder_that_does_not_exist_fails_before_the_replay(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic_ai_context.cli import replay as replay_command

    def no_replay(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError('the replay must not start')

    monkeypatch.setattr(replay_command, '_replay_all', no_replay)
    target = tmp_path / 'missing' / 'out.html'
    assert main(['replay', str(REAL), '-p', 'transparent', option, str(target)]) == 2
    err = capsys.readouterr().err
    assert f'{option} {target}' in err
    assert 'does not exist' in err
    folder = tmp_path / 'out.html'
    folder.mkdir()
    assert main(['replay', str(REAL), '-p', 'transparent', option, str(folder)]) == 2
    assert 'is a folder' in capsys.readouterr().err


@pytest.mark.parametrize(
    ('content', 'problem'),
    [
        ('[]', 'holds no messages'),
        ('[[]]', 'history 0 holds no messages'),
        ('response-only', 'holds only model responses'),
        ('request-only', 'records no model response'),
    ],
)
def test_a_history_with_nothing_to_replay_is_an_error_not_a_table_of_zeros(
    content: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / 'odd.json'
    if content == 'response-only':
        write_log(path, [m for m in small_log() if isinstance(m, ModelResponse)])
    elif content == 'request-only':
        write_log(path, small_log()[:1])
    else:
        path.write_text(content)
    assert main(['replay', str(path), '-p', 'transparent']) == 1
    captured = capsys.readouterr()
    assert problem in captured.err
    assert str(path) in captured.err
    assert 'input tokens' not in captured.out


@pytest.mark.parametrize(
    ('content', 'problem'),
    [
        ('', 'the file is empty'),
        (' \n', 'the file is empty'),
        ('[{"role": "user", "content": "hi"}]', 'looks like OpenAI chat format'),
    ],
)
def test_an_empty_file_or_openai_chat_json_is_named_as_such(
    content: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / 'odd.json'
    path.write_text(content)
    for command in ('replay', 'inspect'):
        assert main([command, str(path)]) == 1
        err = capsys.readouterr().err
        assert problem in err
        assert 'Expecting value' not in err


def test_inspect_history_out_of_range_says_which_there_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(['inspect', str(REAL), '--history', '3']) == 2
    assert 'holds 1 history (--history 0)' in capsys.readouterr().err
    # A long path (CI's temporary folders) must not wrap the error line.
    folder = tmp_path / ('deep-folder-name-' * 8)
    folder.mkdir()
    path = folder / 'two.json'
    path.write_text(f'[{REAL.read_text()}, {REAL.read_text()}]')
    assert main(['inspect', str(path), '--history', '2']) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1, err
    assert 'holds 2 histories (--history 0 to 1)' in err


def test_an_unknown_summary_model_is_a_usage_error_before_any_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A typo used to replay silently with the static fallback marker in place of every summary.
    for command in ('replay', 'inspect'):
        assert main([command, str(REAL), '-p', 'long_horizon', '--summary-model', 'gpt4-typo']) == 2
        assert "--summary-model 'gpt4-typo'" in capsys.readouterr().err


def test_inspect_rejects_an_empty_or_response_only_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / 'odd.json'
    path.write_text('[[]]')
    assert main(['inspect', str(path)]) == 1
    write_log(path, [m for m in small_log() if isinstance(m, ModelResponse)])
    assert main(['inspect', str(path)]) == 1
    assert 'holds only model responses' in capsys.readouterr().err
    write_log(path, small_log()[:1])  # one request, no response yet: request 1 of 1
    assert main(['inspect', str(path)]) == 0


def test_an_invalid_preset_setting_from_the_environment_exits_2_naming_it() -> None:
    proc = run_module('replay', str(REAL), '-p', 'coding', env={'PYDANTIC_AI_CONTEXT_KEEP_RECENT': '-3'})
    assert proc.returncode == 2, proc.stderr
    assert "PYDANTIC_AI_CONTEXT_KEEP_RECENT='-3'" in proc.stderr
    assert 'Traceback' not in proc.stderr


# --- inspect defaults -----------------------------------------------------------------------------


def test_inspect_defaults_to_coding_and_labels_the_default_window(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(['inspect', str(REAL)]) == 0
    printed = ' '.join(capsys.readouterr().out.split())
    assert 'profile coding' in printed
    assert 'window 128,000 (the default; pass --window N) - output' in printed
    assert 'explicit' not in printed
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_PROFILE', 'transparent')
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW', '64000')
    assert main(['inspect', str(REAL)]) == 0
    printed = ' '.join(capsys.readouterr().out.split())
    assert 'profile transparent' in printed
    assert 'window 64,000 (PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW) - output' in printed


def test_inspect_shows_the_text_that_replaced_compacted_content(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def replaced(path: Path) -> str:
        assert main(['inspect', str(path), '--window', '32000']) == 0
        printed = capsys.readouterr().out
        return printed[printed.index('What the model sees instead') : printed.index('What each policy did')]

    section = replaced(REAL)
    assert '[output masked] error, exit 1' in section  # a masked result's digest, facts included
    assert "AttributeError: 'MockConnection' object has no attribute" in section
    # The recorded run finished and a new one started: its long record is cut, the rest counted.
    log = [
        *ModelMessagesTypeAdapter.validate_json(REAL.read_bytes()),
        ModelResponse(parts=[TextPart('Done.')]),
        ModelRequest(parts=[UserPromptPart('Thanks! Next?')]),
    ]
    followed = tmp_path / 'followed.json'
    followed.write_bytes(ModelMessagesTypeAdapter.dump_json(log))
    assert 'more characters)' in replaced(followed)


# --- the chart ------------------------------------------------------------------------------------


def svg_root(page: str, k: int = 0) -> ET.Element:
    start = -1
    for _ in range(k + 1):
        start = page.index('<svg', start + 1)
    return ET.fromstring(page[start : page.index('</svg>', start) + len('</svg>')])


def svg_texts(root: ET.Element) -> list[str]:
    return [t.text or '' for t in root.iter('{http://www.w3.org/2000/svg}text')]


def test_chart_labels_axes_and_window_names_files_briefly_and_summarises(tmp_path: Path) -> None:
    (tmp_path / 'deep' / 'folder').mkdir(parents=True)
    first = write_log(tmp_path / 'deep' / 'folder' / 'first.json', small_log())
    second = write_log(tmp_path / 'deep' / 'folder' / 'second.json', small_log())
    page_path = tmp_path / 'chart.html'
    args = [
        'replay',
        str(first),
        str(second),
        '-p',
        'test_masking',
        '--window',
        '50000',
        '--plot',
        str(page_path),
    ]
    assert main(args) == 0
    page = page_path.read_text()
    texts = svg_texts(svg_root(page, 1))
    assert 'view tokens (input of each request)' in texts
    assert 'request' in texts
    assert 'window 50k' in texts
    assert '<h2 title="' in page
    assert '>first.json</h2>' in page
    assert '>second.json</h2>' in page
    assert '<h2>All files</h2>' in page  # the summary the terminal prints
    assert page.count('<svg') == 3  # the cost bars of all files, then a chart per file
    bars = svg_root(page, 0)
    assert 'test_masking' in svg_texts(bars)
    assert 'window 50k' in svg_texts(bars)
    clip_ids = [
        c.get('id')
        for k in range(1, 3)
        for c in svg_root(page, k).iter('{http://www.w3.org/2000/svg}clipPath')
    ]
    assert clip_ids == ['plot-0', 'plot-1']  # unique in the page


def test_chart_keeps_profiles_readable_when_none_is_far_above_them() -> None:
    from pydantic_ai_context.cli import charts

    values = {'none': [1_000 * i for i in range(1, 101)], 'coding': [5_000] * 100}
    y_max, clipped = charts.y_scale(values, window=8_000)
    assert clipped
    assert y_max <= 10_000  # the profiles and the window fill the chart, not 5% of it
    root = ET.fromstring(charts.svg(values, window=8_000))
    assert any('none (off scale, peak 100k)' in t for t in svg_texts(root))
    # Close together: nothing is clipped.
    y_max, clipped = charts.y_scale({'none': [9_000], 'coding': [5_000]}, window=8_000)
    assert not clipped
    assert y_max >= 9_000


def test_cost_bars_draw_each_profile_per_window_with_the_perfect_cache_floor() -> None:
    from pydantic_ai_context.cli import charts

    groups: dict[str, dict[str, charts.Bar]] = {
        '128k': {'coding': (0.53, 0.41), 'harness': (0.95, None)},
        '16k': {'coding': (0.50, 0.30), 'harness': (1.66, 0.9), 'broken': (None, None)},
    }
    root = ET.fromstring(charts.cost_bars(groups))
    ns = '{http://www.w3.org/2000/svg}'
    bars = [r for r in root.iter(f'{ns}rect') if r.find(f'{ns}title') is not None]
    assert [(r.find(f'{ns}title').text or '') for r in bars] == [  # type: ignore[union-attr]
        'coding 128k: 0.530',
        'harness 128k: 0.950',
        'coding 16k: 0.500',
        'harness 16k: 1.660',
    ]
    heights = [float(r.get('height', 0)) for r in bars]
    assert heights[3] > heights[1] > heights[0] > heights[2] > 0  # taller for a higher cost
    # The floor: a black tick inside each bar that has one, lower than its top.
    ticks = [line for line in root.iter(f'{ns}line') if line.get('stroke') == '#000']
    assert len(ticks) == 3 + 1  # three floors and the legend's
    texts = svg_texts(root)
    assert 'failed' in texts
    assert {'128k', '16k', 'coding', 'harness', 'broken', 'none (1.0)'} <= set(texts)
    assert float(texts[5]) >= 1.66  # the y-axis reaches the highest bar (its top tick label)


def test_cli_replay_credits_read_back_like_the_library(tmp_path: Path) -> None:
    # The progress-bar wrapper once hid the profile's read-back, so the CLI charged every fact a
    # view left out as lost (unrecoverable) where `replay()` itself credits what read-back reaches.
    import asyncio

    from pydantic_ai_context import profile
    from pydantic_ai_context.replay import replay
    from pydantic_ai_context.tokens import TiktokenCounter

    path = data.TRAJECTORY_DIR / 'oh_sdk_sonnet4_pylint_recursive_ignore_paths.json'
    out_json = tmp_path / 'out.json'
    args = ['replay', str(path), '-p', 'coding', '--window', '16000', '--no-progress']
    assert main([*args, '--json', str(out_json)]) == 0
    (entry,) = json.loads(out_json.read_text())['histories']
    cli = next(r for r in entry['results'] if r['profile'] == 'coding')

    messages = ModelMessagesTypeAdapter.validate_json(path.read_bytes())
    counter = TiktokenCounter()
    coding = profile('coding', context_window=16_000, counter=counter)
    lib = asyncio.run(replay(messages, coding, context_window=16_000, counter=counter))
    assert lib.recall_round_trips > 0  # this run needs read-back at 16k: the check below means something
    assert cli['recall_charged_cost'] == pytest.approx(lib.recall_charged_cost)
    assert cli['recall_round_trips'] == lib.recall_round_trips
    assert cli['needed_or_recoverable'] == pytest.approx(lib.to_dict()['needed_or_recoverable'])
