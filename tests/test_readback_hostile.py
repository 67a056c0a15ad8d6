"""Read-back under hostile input: tool outputs and ids a careless tool or model produces, and
queries and refs a model may send. Every answer is a page, a hit list or a retryable tool error."""

from __future__ import annotations

import pytest
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelMessage, ModelRequest

from pydantic_ai_context import HeuristicCounter, _search, normalize_with_repairs, profile
from pydantic_ai_context._markers import ref_of
from pydantic_ai_context.readback import read_context, search_context
from pydantic_ai_context.replay import extractive_summary_model

from .builders import History, Tool, long_text
from .invariants import assert_all

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


def reused_ids_log() -> list[ModelMessage]:
    """Seven reads that all came back as `call_0` (a model numbering its calls per response)."""
    h = History().user('read the modules', system='You are a coding agent.')
    for i in range(7):
        h.step(Tool('read_file', {'path': f'm{i}.py'}, f'MODULE-{i}\n' + long_text(300), id='call_0'))
    return h.build()


def marked_results(view: list[ModelMessage]) -> list[tuple[str, str]]:
    """(ref, tool_call_id) of every tool result of `view` that is a marker."""
    return [
        (ref, part.tool_call_id)
        for message in view
        if isinstance(message, ModelRequest)
        for part in message.parts
        if (ref := ref_of(part)) is not None
    ]


@pytest.mark.parametrize('name', ['coding', 'chat', 'long_horizon'])
async def test_a_reused_call_id_reads_back_each_original(name: str) -> None:
    # Every marker named `call_0` and read_context('call_0') returned the newest result only.
    log = reused_ids_log()
    snapshot = [*log]
    p = profile(
        name, context_window=8_000, counter=HeuristicCounter(), summary_model=extractive_summary_model()
    )
    view = await p.compile(log)
    assert_all(log, snapshot, view)
    ids = [part.tool_call_id for message in view for part in message.parts if hasattr(part, 'tool_call_id')]
    assert len(set(ids)) * 2 == len(ids), 'each call id names one call and its result'
    marked = marked_results(view)
    assert len(marked) >= 3
    for ref, call_id in marked:
        assert ref == call_id
        n = int(ref.partition('~')[2] or 1)
        assert f'MODULE-{n - 1}\n' in read_context(ref, log), ref
        # pydantic-ai 1.x: the view is the history, and the side store holds the originals.
        assert f'MODULE-{n - 1}\n' in read_context(ref, view, p.archive), ref
    assert await p.compile(view) == view
    hits = search_context('MODULE-0', log).splitlines()
    assert hits[1].startswith('- call_0 (read_file result)')


def test_renamed_call_ids_are_logged_and_stable_as_the_log_grows() -> None:
    log = reused_ids_log()
    view, repairs = normalize_with_repairs(log)
    assert [r.kind for r in repairs] == ['renamed_call_id'] * 6
    assert [r.index for r in repairs] == [3, 5, 7, 9, 11, 13]
    grown, _ = normalize_with_repairs([*log, *History().step(Tool('ls', {}, 'x', id='call_0~3')).build()])
    assert grown[: len(view)] == view
    assert grown[-1].parts[0].tool_call_id == 'call_0~3~2', 'a literal id never collides with a renamed one'
    assert normalize_with_repairs(view) == (view, [])
