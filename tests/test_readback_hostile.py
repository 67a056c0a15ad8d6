"""Read-back under hostile input: tool outputs and ids a careless tool or model produces, and
queries and refs a model may send. Every answer is a page, a hit list or a retryable tool error."""

from __future__ import annotations

import pytest
from pydantic_ai.exceptions import ModelRetry

from pydantic_ai_context import _search
from pydantic_ai_context.readback import read_context, search_context

from .builders import History, Tool

FTS5_SYNTAX = (
    '"',
    'a*',
    'NEAR(alpha beta)',
    'body:alpha',
    'alpha OR -beta',
    '(alpha',
    '^alpha',
    'a' * 100_000,
)


@pytest.mark.parametrize('fts5', [True, False])
def test_search_reads_outputs_holding_lone_surrogates(fts5: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # A tool that decodes bytes with `surrogateescape` (os.fsdecode, a file read that way) hands back
    # lone surrogates: SQLite cannot take them, and search_context raised UnicodeEncodeError.
    monkeypatch.setattr(_search, '_fts5', fts5)
    h = History().user('go')
    h.step(Tool('bash', {'command': 'ls'}, 'name-\udcff.txt alpha\x00nul', id='c1'))
    h.step(Tool('bash', {'command': 'cat x'}, 'beta gamma', id='c2'))
    log = h.build()
    assert search_context('alpha', log).splitlines()[1].startswith('- c1 (bash result): ')
    assert search_context('gamma', log).splitlines()[1].startswith('- c2 ')
    assert 'name-\udcff.txt' in read_context('c1', log)


@pytest.mark.parametrize('query', FTS5_SYNTAX)
def test_search_queries_are_words_never_fts5_syntax(query: str) -> None:
    h = History().user('go')
    h.step(Tool('read_file', {'path': 'a'}, 'alpha beta NEAR body', id='c1'))
    log = h.build()
    try:
        out = search_context(query, log)
    except ModelRetry:
        return
    assert out.splitlines()[1].startswith('- c1 ')
