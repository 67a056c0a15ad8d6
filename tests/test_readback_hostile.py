"""Read-back under hostile input: tool outputs and ids a careless tool or model produces, and
queries and refs a model may send. Every answer is a page, a hit list or a retryable tool error."""

from __future__ import annotations

import contextlib
import copy
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import BinaryContent, ModelMessage, ModelRequest

from pydantic_ai_context import (
    ContextBudgetExceeded,
    ContextProfile,
    HeuristicCounter,
    normalize_with_repairs,
    profile,
)
from pydantic_ai_context._markers import ref_of
from pydantic_ai_context.readback import _search, read_context, search_context
from pydantic_ai_context.replay import extractive_summary_model

from ._examples import examples
from .builders import History, Tool, long_text
from .invariants import assert_all
from .strategies import HOSTILE_IDS, hostile_histories

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
        n = int(ref.partition('-')[2] or 1)
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
    grown, _ = normalize_with_repairs([*log, *History().step(Tool('ls', {}, 'x', id='call_0-3')).build()])
    assert grown[: len(view)] == view
    assert grown[-1].parts[0].tool_call_id == 'call_0-3-2', 'a literal id never collides with a renamed one'
    assert normalize_with_repairs(view) == (view, [])


def reads_back(ref: str, log: list[ModelMessage], p: ContextProfile) -> None:
    """`ref` reads back, or is a blank original or a (clamped) read-back page: a retry that says so."""
    try:
        read_context(ref, log, p.archive, limit=100_000)
    except ModelRetry as exc:
        assert re.search(r'is empty|is the result of a read_context call', exc.message), exc.message  # noqa: PT017


def call_ids(view: list[ModelMessage]) -> list[str]:
    return [part.tool_call_id for message in view for part in message.parts if hasattr(part, 'tool_call_id')]


@pytest.mark.timeout(120, method='thread')
@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=hostile_histories(), query=st.sampled_from([*FTS5_SYNTAX[:-1], 'masked', 'summary', *HOSTILE_IDS]))
async def test_hostile_steps_keep_the_invariants_and_every_ref_reads_back(
    log: list[ModelMessage], query: str
) -> None:
    """Reused, empty, quoted and multi-line ids, tools named `read_context`, outputs imitating our
    markers and frames: through every preset, the view is valid, idempotent, and each ref reads back."""
    snapshot = copy.deepcopy(log)
    for name in ('coding', 'chat', 'long_horizon', 'transparent'):
        p = profile(
            name, context_window=4_000, counter=HeuristicCounter(), summary_model=extractive_summary_model()
        )
        try:
            view = await p.compile(log)
        except ContextBudgetExceeded:
            # Only the preset that never compacts may refuse: the others clamp the newest step's
            # text; an image or a document is kept or dropped whole, and may not fit 4k on its own.
            assert name == 'transparent' or _has_attachments(log)
            continue
        assert_all(log, snapshot, view)
        ids = call_ids(view)
        assert len(ids) == 2 * len(set(ids)), 'each call id names one call and its result'
        assert await p.compile(view) == view
        for ref, _ in marked_results(view):
            reads_back(ref, log, p)
        with contextlib.suppress(ModelRetry):
            search_context(query, log, p.archive)


@pytest.mark.parametrize('call_id', ['', '  ', ' padded ', "it's", 'a\nb', 'back\\slash', 'x' * 300])
async def test_an_id_a_marker_cannot_name_is_renamed_and_reads_back(call_id: str) -> None:
    # `[original: read_context('')]` or `read_context('it's')` named an original no call could read.
    h = History().user('task')
    h.step(Tool('read_file', {'path': 'a.py'}, 'ORIGINAL\n' + long_text(300), id=call_id))
    for i in range(4):
        h.step(Tool('read_file', {'path': f'b{i}.py'}, f'OTHER {i}\n' + long_text(300)))
    log = h.build()
    view = await profile('coding', context_window=8_000, counter=HeuristicCounter()).compile(log)
    (ref, renamed), *_ = marked_results(view)
    assert ref == renamed != call_id
    assert "'" not in ref
    assert '\\' not in ref
    assert ref == ref.strip()
    assert ref.isprintable()
    assert len(ref) <= 120
    assert f"[original: read_context('{ref}')]" in view[2].parts[0].content
    assert 'ORIGINAL' in read_context(ref, log)


async def test_a_read_back_page_too_large_for_the_window_is_clamped() -> None:
    # A page (up to 20,000 characters) or a user's tool named read_context in the newest step was
    # never shortened: at a small window the compile raised ContextBudgetExceeded instead of clamping.
    h = History().user('task')
    h.step(Tool('read_file', {'path': 'a.py'}, 'ORIGINAL\n' + long_text(300), id='c1'))
    h.step(Tool('read_context', {'ref': 'c1'}, '[c1: read_file result]\n' + long_text(300), id='r1'))
    log = h.build()
    view = await profile('coding', context_window=4_000, counter=HeuristicCounter()).compile(log)
    page = view[-1].parts[0]
    assert page.tool_call_id == 'r1'
    assert 'trimmed by pydantic-ai-context' in page.content


@pytest.mark.parametrize('name', ['coding', 'chat', 'long_horizon'])
async def test_outputs_holding_lone_surrogates_compile(name: str) -> None:
    # summarize_window's cache key serialised each message to JSON: a lone surrogate crashed the compile.
    h = History().user('list the dump directory')
    for i in range(8):
        h.step(Tool('bash', {'command': f'ls d{i}'}, f'name-\udcff{i}.bin\n' + long_text(40), id=f'c{i}'))
    log = h.build()
    p = profile(
        name, context_window=8_000, counter=HeuristicCounter(), summary_model=extractive_summary_model()
    )
    view = await p.compile(log)
    assert_all(log, [*log], view)
    assert await p.compile(view) == view


def test_a_summary_cache_key_reads_lone_surrogates() -> None:
    from pydantic_ai_context.policies.summarize import summarize_window

    (_, step, result) = History().user('go').step(Tool('bash', {}, 'name-\udcff.bin', id='c1')).build()
    policy = summarize_window()
    assert policy.ledger.message_digest(result) != policy.ledger.message_digest(step)


def _has_attachments(log: list[ModelMessage]) -> bool:
    def items(content: Any) -> list[Any]:  # a part's content: text, a list, a dict, a number
        return list(content) if isinstance(content, (list, tuple)) else [content]

    return any(
        isinstance(item, BinaryContent)
        for message in log
        for part in message.parts
        for item in items(getattr(part, 'content', None))
    )
