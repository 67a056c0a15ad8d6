"""Moved modules stay importable at their documented paths (issue 21), as the same objects."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

import pydantic_ai_context
from pydantic_ai_context import archive, replay, session, session_readback, session_summaries
from pydantic_ai_context import readback as readback_package
from pydantic_ai_context.policies import _fit_note, _fit_plan, fit
from pydantic_ai_context.readback import archive as readback_archive
from pydantic_ai_context.readback import tools as readback_tools
from pydantic_ai_context.session import readback, summaries


@pytest.mark.parametrize(
    ('shim', 'home'),
    [(session_readback, readback), (session_summaries, summaries), (archive, readback_archive)],
    ids=['session_readback', 'session_summaries', 'archive'],
)
def test_an_old_public_module_path_re_exports_the_moved_module(shim: ModuleType, home: ModuleType) -> None:
    names = home.__all__
    assert tuple(shim.__all__) == tuple(names)
    for name in names:
        assert getattr(shim, name) is getattr(home, name), name


def test_the_replay_package_offers_every_name_the_module_did() -> None:
    offered = {
        'ERROR_PATTERN', 'PATH_PATTERN', 'FactIndex', 'HistoryLoadError', 'ReplayResult', 'RequestRecord',
        'ViewCompiler', 'error_lines', 'extractive_summary', 'extractive_summary_model', 'geometric_mean',
        'load_histories', 'load_history', 'paths_in', 'percentile', 'replay',
    }  # fmt: skip
    assert offered <= set(dir(replay))
    assert set(replay.__all__) == offered


def test_the_session_package_exports_what_the_module_did() -> None:
    assert set(session.__all__) == {
        'ContextSession',
        'MessageInput',
        'StoreSummaryCache',
        'SummaryIndex',
        'summary_index_key',
    }
    assert session.StoreSummaryCache is summaries.StoreSummaryCache
    assert pydantic_ai_context.StoreReadbackStore is readback.StoreReadbackStore
    assert pydantic_ai_context.ContextSession is session.ContextSession


@pytest.mark.parametrize(
    'gone', ['pydantic_ai_context._recall', 'pydantic_ai_context._session_log', 'pydantic_ai_context._search']
)
def test_private_modules_moved_without_a_shim(gone: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(gone)


def test_the_readback_package_offers_every_name_the_module_did() -> None:
    public = {
        'READBACK_INSTRUCTION', 'READ_CONTEXT', 'SEARCH_CONTEXT', 'read_context', 'readback_toolset',
        'search_context', 'shows_markers', 'with_readback_instruction',
    }  # fmt: skip
    assert set(readback_package.__all__) == public
    for name in [
        *public,
        'PAGE_LINES',
        'PAGE_CHARS',
        'ECHO_CHARS',
        'SEARCH_HITS',
        'MAX_SEARCH_HITS',
        'logger',
    ]:
        assert getattr(readback_package, name) is getattr(readback_tools, name), name
    # The logger names did not move with the code (handlers and filters configured by name).
    assert readback_tools.logger.name == 'pydantic_ai_context.readback'
    assert archive.logger.name == 'pydantic_ai_context.archive'
    assert readback_package._search.logger.name == 'pydantic_ai_context._search'


def test_fit_offers_every_name_it_did_after_the_split() -> None:
    from_note = ['DROPPED_NOTE', 'MARKER_KIND', '_EPOCH', '_with_note', '_without_note', 'drop_record']
    from_plan = [
        '_CONVERSATION', '_KINDS', '_KIND_CODES', '_NEVER', '_STEP', '_STEP_REQUEST_KINDS', '_Dropped', '_Plan',
        '_Reading', '_unit_kind',
    ]  # fmt: skip
    for module, names in ((_fit_note, from_note), (_fit_plan, from_plan)):
        for name in names:
            assert getattr(fit, name) is getattr(module, name), name
    assert fit.__all__ == ('FitToBudget', 'fit_to_budget')
    assert fit.FitToBudget.__module__ == 'pydantic_ai_context.policies.fit'
