"""Context-management policies for pydantic-ai agents.

Keep the model's view of a long conversation small, valid and cheap, while the full
conversation (the canonical log) stays intact for the application.
"""

from __future__ import annotations

from . import presets as _presets  # noqa: F401  (registers the presets)
from .budget import ContextBudget, resolve_context_window
from .commands import CompactResult, HistoryStats, clear, compact, compact_result, history_stats
from .errors import ContextBudgetExceeded, ContextError, ContextWarning, HistoryIntegrityError, StoreError
from .events import CompactionEvent, EventHandler
from .integrity import (
    PairingReport,
    Repair,
    ToolPair,
    analyze_pairs,
    normalize,
    normalize_with_repairs,
    patch_dangling_tool_calls,
    safe_cut_points,
    validate_view,
)
from .policies.summarize import InMemorySummaryCache, SummarizeWindow, SummaryCache, summarize_window
from .profiles import ContextProfile, available_profiles, profile, register_profile
from .store import MemoryStore, SessionInfo, SessionStore, SqliteStore
from .tokens import HeuristicCounter, TiktokenCounter, TokenCounter
from .views import CompileContext, Policy, RunSpan, compile_view, conversation_view, current_run, run_spans

__all__ = (
    'CompactResult',
    'CompactionEvent',
    'CompileContext',
    'ContextBudget',
    'ContextBudgetExceeded',
    'ContextError',
    'ContextProfile',
    'ContextWarning',
    'EventHandler',
    'HeuristicCounter',
    'HistoryIntegrityError',
    'HistoryStats',
    'InMemorySummaryCache',
    'MemoryStore',
    'PairingReport',
    'Policy',
    'Repair',
    'RunSpan',
    'SessionInfo',
    'SessionStore',
    'SqliteStore',
    'StoreError',
    'SummarizeWindow',
    'SummaryCache',
    'TiktokenCounter',
    'TokenCounter',
    'ToolPair',
    'analyze_pairs',
    'available_profiles',
    'clear',
    'compact',
    'compact_result',
    'compile_view',
    'conversation_view',
    'current_run',
    'history_stats',
    'normalize',
    'normalize_with_repairs',
    'patch_dangling_tool_calls',
    'profile',
    'register_profile',
    'resolve_context_window',
    'run_spans',
    'safe_cut_points',
    'summarize_window',
    'validate_view',
)

__version__ = '0.1.0'
