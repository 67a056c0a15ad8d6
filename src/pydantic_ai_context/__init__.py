"""Context-management policies for pydantic-ai agents.

Keep the model's view of a long conversation small, valid and cheap, while the full
conversation (the canonical log) stays intact for the application.
"""

from __future__ import annotations

from . import presets as _presets  # noqa: F401  (registers the presets)
from .archive import ContextArchive, MemoryReadbackStore, ReadbackStore
from .budget import ContextBudget, resolve_context_window
from .commands import CompactResult, HistoryStats, clear, compact, compact_result, history_stats
from .errors import (
    ContextBudgetExceeded,
    ContextError,
    ContextSettingsError,
    ContextWarning,
    HistoryIntegrityError,
    StoreError,
)
from .events import CompactionEvent, ContextEvent, ContextUsageEvent, EventHandler
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
from .openai_format import from_openai, to_openai
from .policies import (
    DedupeReads,
    FitToBudget,
    InMemorySummaryCache,
    IsolateBoundaries,
    MaskObservations,
    SummarizeWindow,
    SummaryCache,
    TrimToolOutputs,
    dedupe_reads,
    fit_to_budget,
    isolate_boundaries,
    mask_observations,
    summarize_window,
    trim_tool_outputs,
)
from .profiles import ContextProfile, available_profiles, profile, register_profile
from .readback import readback_toolset
from .session import ContextSession, StoreSummaryCache
from .settings import ContextSettings
from .store import MemoryStore, SessionInfo, SessionStore, SqliteStore
from .tokens import HeuristicCounter, TiktokenCounter, TokenCounter
from .views import CompileContext, Policy, RunSpan, compile_view, conversation_view, current_run, run_spans

__all__ = (
    'CompactResult',
    'CompactionEvent',
    'CompileContext',
    'ContextArchive',
    'ContextBudget',
    'ContextBudgetExceeded',
    'ContextError',
    'ContextEvent',
    'ContextProfile',
    'ContextSession',
    'ContextSettings',
    'ContextSettingsError',
    'ContextUsageEvent',
    'ContextWarning',
    'DedupeReads',
    'EventHandler',
    'FitToBudget',
    'HeuristicCounter',
    'HistoryIntegrityError',
    'HistoryStats',
    'InMemorySummaryCache',
    'IsolateBoundaries',
    'MaskObservations',
    'MemoryReadbackStore',
    'MemoryStore',
    'PairingReport',
    'Policy',
    'ReadbackStore',
    'Repair',
    'RunSpan',
    'SessionInfo',
    'SessionStore',
    'SqliteStore',
    'StoreError',
    'StoreSummaryCache',
    'SummarizeWindow',
    'SummaryCache',
    'TiktokenCounter',
    'TokenCounter',
    'ToolPair',
    'TrimToolOutputs',
    'analyze_pairs',
    'available_profiles',
    'clear',
    'compact',
    'compact_result',
    'compile_view',
    'conversation_view',
    'current_run',
    'dedupe_reads',
    'fit_to_budget',
    'from_openai',
    'history_stats',
    'isolate_boundaries',
    'mask_observations',
    'normalize',
    'normalize_with_repairs',
    'patch_dangling_tool_calls',
    'profile',
    'readback_toolset',
    'register_profile',
    'resolve_context_window',
    'run_spans',
    'safe_cut_points',
    'summarize_window',
    'to_openai',
    'trim_tool_outputs',
    'validate_view',
)

__version__ = '0.1.0'
