"""Moved modules stay importable at their documented paths (issue 21), as the same objects."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

import pydantic_ai_context
from pydantic_ai_context import replay, session, session_readback, session_summaries
from pydantic_ai_context.session import readback, summaries


@pytest.mark.parametrize(
    ('shim', 'home'),
    [(session_readback, readback), (session_summaries, summaries)],
    ids=['session_readback', 'session_summaries'],
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


@pytest.mark.parametrize('gone', ['pydantic_ai_context._recall', 'pydantic_ai_context._session_log'])
def test_private_modules_moved_without_a_shim(gone: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(gone)
