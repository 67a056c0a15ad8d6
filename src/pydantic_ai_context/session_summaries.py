"""Moved: a session's summaries in its store now live in `pydantic_ai_context.session.summaries`.

This module keeps the documented import path working; it re-exports that module's names.
"""

from __future__ import annotations

from .session.summaries import (
    SESSION_SUMMARIES_NAMESPACE,
    SUMMARIES_NAMESPACE,
    SUMMARY_INDEX_PREFIX,
    StoreSummaryCache,
    SummaryIndex,
    summary_index_key,
)

__all__ = (
    'SESSION_SUMMARIES_NAMESPACE',
    'SUMMARIES_NAMESPACE',
    'SUMMARY_INDEX_PREFIX',
    'StoreSummaryCache',
    'SummaryIndex',
    'summary_index_key',
)
