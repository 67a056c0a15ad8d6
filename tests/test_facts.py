from __future__ import annotations

import dataclasses
import re
import warnings

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import RetryPromptPart, ToolCallPart, ToolReturnPart

from pydantic_ai_context import _parts
from pydantic_ai_context._facts import (
    call_summary,
    digest,
    extract_facts,
    fact_key,
    facts_in_digest,
    facts_in_text,
)

BENCH_PATH = re.compile(r'(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]\w{0,5}')


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
    assert '(+47 more)' in line
    assert line.count('ValueError number') == 3


def test_digest_does_not_repeat_paths_inside_longer_paths() -> None:
    output = '/tmp/x/a/b.py\na/b.py\n'
    line = digest(None, ToolReturnPart('ls', output, tool_call_id='l'))
    assert line.count('a/b.py') == 1


@settings(max_examples=100, deadline=None)
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
