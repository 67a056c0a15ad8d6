from __future__ import annotations

import dataclasses
import json
import re
import warnings

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import RetryPromptPart, ToolCallPart, ToolReturnPart

from pydantic_ai_context import _parts, replay
from pydantic_ai_context._facts import (
    _EXIT_CODE_RES,
    SCAN_CHARS,
    call_summary,
    digest,
    extract_facts,
    fact_key,
    facts_in_digest,
    facts_in_text,
    path_runs,
    paths_in,
    scanned_text,
)

from . import data
from ._examples import examples
from .reference_facts import PATH_RE as REFERENCE_PATH_RE
from .reference_facts import PATH_RUN_RE, REPLAY_PATH_RE, reference_exit_code, reference_facts

BENCH_PATH = re.compile(r'(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]\w{0,5}')
# Pieces that make paths, near-paths and the separators between them, for generated text.
PATH_PIECES = st.sampled_from(
    [
        *('src', 'a', 'Z', 'é', '9', '_', '-', 'py', '.py', '.c', '.1', 'x.tar.gz', '.pyc_cache12'),
        *('/', '//', '///', '.', '..'),
        *(' ', '\n', '"', "'", ':', '::', '(', ','),
    ]
)
PATHLIKE_TEXT = st.lists(PATH_PIECES, max_size=30).map(''.join)


def test_paths_unique_in_order_and_absolute_paths_keep_their_slash() -> None:
    text = 'see src/app/models.py and /testbed/astropy/io/fits/diff.py, then src/app/models.py again'
    facts = extract_facts(text)
    assert facts.paths == ('src/app/models.py', '/testbed/astropy/io/fits/diff.py')


def test_every_benchmark_path_is_inside_an_extracted_path() -> None:
    text = 'File "/tmp/x/pkg/mod.py", line 3\nrequests/models.py:12: x\nbuild/lib/a.cpython-39.pyc'
    facts = extract_facts(text)
    for match in BENCH_PATH.findall(text):
        assert any(match in p for p in facts.paths)


def test_error_lines_are_stripped_clipped_unique_and_longer_than_eight() -> None:
    long = 'ValueError: ' + 'x' * 300
    text = (
        f'  Traceback (most recent call last):\nok\nError: x\n{long}\n{long}\nFAILED t.py::a - AssertionError'
    )
    facts = extract_facts(text)
    assert facts.error_lines == (
        'Traceback (most recent call last):',
        long[:120],
        'FAILED t.py::a - AssertionError',
    )
    assert 'Error: x' not in facts.error_lines  # too short to be a fact


def test_exit_code_patterns() -> None:
    assert extract_facts('<returncode>1</returncode>\n<output>x</output>').exit_code == 1
    assert extract_facts('done\n[Command finished with exit code 2]').exit_code == 2
    assert extract_facts('Exit code: 0').exit_code == 0
    assert extract_facts('process exited: exit code 127').exit_code == 127
    assert extract_facts('{"exit_code": 3, "stdout": "x"}').exit_code == 3
    assert extract_facts('{"returncode": 4}').exit_code == 4
    assert extract_facts('all good').exit_code is None


def test_sizes() -> None:
    facts = extract_facts('a\nb\nc')
    assert (facts.n_lines, facts.n_chars) == (3, 5)
    assert extract_facts('').n_lines == 0


def test_call_summary_identifying_arguments() -> None:
    editor = ToolCallPart(
        'str_replace_editor', {'command': 'view', 'path': '/testbed/a.py', 'security_risk': 'LOW'}
    )
    assert call_summary(editor) == "str_replace_editor(command='view', path='/testbed/a.py')"
    bash = ToolCallPart('execute_bash', '{"command": "pytest tests/test_x.py -q\\necho done"}')
    assert call_summary(bash) == "execute_bash(command='pytest tests/test_x.py -q …')"
    assert call_summary(ToolCallPart('browser_click', {'index': 9})) == 'browser_click(index=9)'
    assert call_summary(None, tool_name='ls') == 'ls'
    long = ToolCallPart('bash', {'command': 'x' * 500})
    assert len(call_summary(long, max_len=80)) <= 80


def test_digest_one_line_with_status_exit_size_paths_and_errors() -> None:
    call = ToolCallPart('execute_bash', {'command': 'pytest tests/test_io.py'}, tool_call_id='c1')
    output = (
        'collected 3 items\nastropy/io/fits/diff.py:12: in compare\n'
        'FAILED tests/test_io.py::test_vla - AssertionError\n[Command finished with exit code 1]'
    )
    line = digest(call, ToolReturnPart('execute_bash', output, tool_call_id='c1'), prefix='[masked] ')
    assert '\n' not in line
    assert line.startswith(
        "[masked] execute_bash(command='pytest tests/test_io.py') → error, exit 1, 4 lines"
    )
    assert 'paths: astropy/io/fits/diff.py' in line
    assert 'errors: FAILED tests/test_io.py::test_vla - AssertionError' in line
    # Every fact of the output is still in the line, verbatim.
    for fact in [*extract_facts(output).paths, *extract_facts(output).error_lines]:
        assert fact in line


def test_digest_status_from_outcome_and_retry() -> None:
    call = ToolCallPart('deploy', {}, tool_call_id='d')
    ok = ToolReturnPart('deploy', 'deployed', tool_call_id='d')
    assert ' → ok' in digest(call, ok)
    if hasattr(ok, 'outcome'):
        assert ' → denied' in digest(call, dataclasses.replace(ok, outcome='denied'))
        assert ' → error' in digest(call, dataclasses.replace(ok, outcome='failed'))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # deprecated on pydantic-ai 2.x, still what 1.x records
        retry = RetryPromptPart('bad args', tool_name='deploy', tool_call_id='d')
    assert ' → retried' in digest(call, retry)


def test_digest_reads_exit_code_from_metadata_and_original_size_from_marker() -> None:
    part = ToolReturnPart('bash', 'short', tool_call_id='b', metadata={'metadata': {'exit_code': 2}})
    assert 'error, exit 2' in digest(None, part)
    trimmed = dataclasses.replace(
        part,
        metadata=_parts.with_marker(None, {'kind': 'trimmed', 'lines': 1000, 'chars': 40_000, 'tokens': 9}),
    )
    assert '1,000 lines, ~10,000 tokens' in digest(None, trimmed)


def test_digest_caps_paths_and_errors() -> None:
    output = '\n'.join(f'pkg/mod_{i}.py: ValueError number {i}' for i in range(50))
    line = digest(None, ToolReturnPart('grep', output, tool_call_id='g'), max_paths=5, max_errors=3)
    assert line.count('ValueError number') == 3
    assert 'ValueError number 2 (+47 more); paths: ' in line
    # The three listed error lines show mod_0 to mod_2; five paths follow; 42 are left.
    assert line.endswith(
        'paths: pkg/mod_3.py, pkg/mod_4.py, pkg/mod_5.py, pkg/mod_6.py, pkg/mod_7.py (+42 more)'
    )


def test_digest_does_not_repeat_paths_inside_longer_paths() -> None:
    output = '/tmp/x/a/b.py\na/b.py\n'
    line = digest(None, ToolReturnPart('ls', output, tool_call_id='l'))
    assert line.count('a/b.py') == 1


@settings(max_examples=examples(100), deadline=None)
@given(st.text(max_size=400))
def test_extract_facts_total_and_deterministic(text: str) -> None:
    facts = extract_facts(text)
    assert facts == extract_facts(text)
    assert all(len(e) > 8 and len(e) <= 120 for e in facts.error_lines)
    assert len(set(facts.paths)) == len(facts.paths)
    for match in BENCH_PATH.findall(text):
        assert any(match in p for p in facts.paths)


def test_digest_leaves_out_known_facts_and_facts_in_digest_reads_them_back() -> None:
    output = '/repo/src/a.py\nsrc/b.py\nValueError: bad thing happened'
    part = ToolReturnPart('bash', output, tool_call_id='k')
    full = digest(None, part)
    assert (
        facts_in_digest(full)
        == facts_in_text(output)
        == {'repo/src/a.py', 'src/b.py', 'ValueError: bad thing happened'}
    )
    known = {fact_key('/repo/src/a.py'), 'ValueError: bad thing happened'}
    short = digest(None, part, known=known)
    assert '/repo/src/a.py' not in short
    assert 'ValueError' not in short
    assert 'src/b.py' in short


@settings(max_examples=examples(400), deadline=None)
@given(PATHLIKE_TEXT)
def test_paths_in_finds_what_searching_the_whole_text_found(text: str) -> None:
    # The per-token match finds the old search's matches, in order, and so does replay's finder.
    assert paths_in(text) == REFERENCE_PATH_RE.findall(text)
    assert replay.paths_in(text) == REPLAY_PATH_RE.findall(text)


# Pieces of exit-code statements, in every case the searches equate (the Turkish i's included).
EXIT_PIECES = st.sampled_from(
    [
        *('exit', 'EXIT', 'Exit', 'ex\u0131t', 'EX\u0130T', 'exited', 'return', 'RETURN', 'Return', 'retur'),
        *(
            'code',
            'CODE',
            'status',
            'Status',
            ' ',
            '_',
            ':',
            '=',
            '  ',
            '\n',
            '1',
            '-2',
            '0',
            '42',
            'x',
            'ed',
        ),
        *(
            '<returncode>',
            '</returncode>',
            '[Command finished with exit code ',
            ']',
            'completed with exit code ',
        ),
    ]
)


@settings(max_examples=examples(600), deadline=None)
@given(st.lists(EXIT_PIECES, max_size=16).map(''.join))
@example('ex\u0131t code 1')
@example('EX\u0130T status: 3')
@example('see RETURN CODE = -2')
def test_the_exit_code_is_what_every_pattern_searched_through_the_text_finds(text: str) -> None:
    # The case-insensitive patterns are skipped when the text does not hold their first word:
    # the code found is the one searching with every pattern finds.
    searched = None
    for pattern in _EXIT_CODE_RES:
        matches = pattern.findall(text)
        if matches:
            searched = int(matches[-1])
            break
    assert extract_facts(text).exit_code == searched


@settings(max_examples=examples(600), deadline=None)
@given(PATHLIKE_TEXT)
@example('a/b c/d')
@example('x.py//y/z.c/')
@example('/')
def test_path_runs_are_what_searching_for_them_finds(text: str) -> None:
    assert path_runs(text) == PATH_RUN_RE.findall(text)


def test_extraction_on_the_shipped_runs_is_unchanged_but_for_the_scan_window() -> None:
    texts = [
        part['content']
        for path in data.TRAJECTORIES
        for message in json.loads(path.read_bytes())
        for part in message['parts']
        if part['part_kind'] == 'tool-return' and isinstance(part['content'], str)
    ]
    assert any(len(t) > 2 * SCAN_CHARS for t in texts), 'no result exercises the scan window'
    for text in texts:
        facts = extract_facts(text)
        scanned = scanned_text(text)
        if len(text) <= 2 * SCAN_CHARS:
            assert scanned is text
        expected = reference_facts(scanned)
        assert (facts.paths, facts.error_lines) == (expected.paths, expected.error_lines)
        assert facts.exit_code == reference_exit_code(text)
        # Without the window (as the replay measures facts), every path is found.
        assert paths_in(text) == REFERENCE_PATH_RE.findall(text)


def test_facts_come_from_the_head_and_tail_of_a_long_result() -> None:
    head = 'Traceback (most recent call last):\n  File "/repo/src/head.py", line 1\n'
    middle = ''.join(f'/repo/src/middle_{i}.py\n' for i in range(20_000))
    tail = 'ValueError: at the end in /repo/src/tail.py\n[Command finished with exit code 3]'
    text = head + middle + tail
    facts = extract_facts(text)
    assert '/repo/src/head.py' in facts.paths
    assert '/repo/src/tail.py' in facts.paths
    assert '/repo/src/middle_10000.py' not in facts.paths
    assert facts.error_lines[0] == 'Traceback (most recent call last):'
    assert facts.exit_code == 3
    assert (facts.n_chars, facts.n_lines) == (len(text), text.count('\n') + 1)
    scanned = scanned_text(text)
    assert len(scanned) <= 2 * SCAN_CHARS + 1
    # Cut at line ends: no path is cut in two (every scanned path is a whole line of the middle).
    lines = set(text.splitlines())
    assert all(p in lines or p in head + tail for p in paths_in(scanned))


def test_a_path_longer_than_a_path_can_be_or_with_a_component_over_255_is_not_one() -> None:
    assert paths_in('a/' * 3000 + 'b.py') == []
    assert paths_in('x' * 300 + '/b.py and ok/b.py') == ['ok/b.py']


def test_exit_codes_too_long_to_be_one_and_json_too_deep_to_parse_are_not_read() -> None:
    assert extract_facts('exit code 12345678901234').exit_code is None
    assert extract_facts('exit code 2147483647').exit_code == 2147483647
    assert extract_facts('{"a":' * 100_000).exit_code is None  # json.loads raised RecursionError


def test_digest_lists_errors_then_paths_named_in_the_call_then_the_first_others() -> None:
    listing = '\n'.join(f'/repo/src/pkg/mod_{i}.py' for i in range(40))
    output = f'{listing}\nImportError: cannot import name x from pkg.mod_1'
    call = ToolCallPart('bash', {'command': 'ls -R /repo/src; python src/pkg/mod_38.py'}, tool_call_id='l')
    line = digest(call, ToolReturnPart('bash', output, tool_call_id='l'), max_paths=3)
    assert line.endswith(
        '; errors: ImportError: cannot import name x from pkg.mod_1'
        '; paths: /repo/src/pkg/mod_38.py, /repo/src/pkg/mod_0.py, /repo/src/pkg/mod_1.py (+37 more)'
    )
    preferred = digest(
        call,
        ToolReturnPart('bash', output, tool_call_id='l'),
        max_paths=3,
        prefer={'/repo/src/pkg/mod_20.py'},
    )
    assert preferred.endswith(
        'paths: /repo/src/pkg/mod_38.py, /repo/src/pkg/mod_20.py, /repo/src/pkg/mod_0.py (+37 more)'
    )
    # The count covers only what the line does not show: a path inside a listed one is shown.
    nested = digest(
        None, ToolReturnPart('ls', '/tmp/x/a/b.py\na/b.py\nc/d.py\n', tool_call_id='n'), max_paths=1
    )
    assert nested.endswith('paths: /tmp/x/a/b.py (+1 more)')


def test_facts_in_digest_reads_both_digest_layouts() -> None:
    new = 'ok, 3 lines, ~9 tokens; errors: E1 went wrong | E2 went wrong (+4 more); paths: a/b.py (+2 more)'
    old = (
        'ok, 3 lines, ~9 tokens; paths: a/b.py (+2 more); errors: E1 went wrong | E2 went wrong (+1,204 more)'
    )
    assert facts_in_digest(new) == facts_in_digest(old) == {'a/b.py', 'E1 went wrong', 'E2 went wrong'}


@pytest.mark.timeout(10, method='thread')
def test_extraction_is_linear_on_separator_free_runs_and_long_gaps() -> None:
    # Each of these took minutes to hours with patterns searched through the whole text.
    for text in ('A' * 1_000_000, 'ab/' * 300_000, 'x-y_z.' * 150_000, 'exit code' + ' ' * 60_000 + 'x'):
        assert extract_facts(text).paths == ()
        assert paths_in(text) == replay.paths_in(text) == []
    assert extract_facts('exit code' + ' ' * 64 + '7').exit_code == 7
