"""Context-management policies for pydantic-ai agents.

Keep the model's view of a long conversation small, valid and cheap, while the full
conversation (the canonical log) stays intact for the application.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import presets as _presets  # noqa: F401  (registers the presets)
from .budget import ContextBudget, resolve_context_window, resolve_input_limit
from .commands import CompactResult, HistoryStats, clear, compact, compact_result, history_stats
from .errors import (
    ContextBudgetExceeded,
    ContextError,
    ContextSettingsError,
    ContextWarning,
    HistoryIntegrityError,
    StoreEntryMissing,
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
from .overhead import RequestOverhead, measure_overhead
from .policies import (
    CheckBudget,
    DedupeReads,
    FitToBudget,
    InMemorySummaryCache,
    IsolateBoundaries,
    MaskObservations,
    SummarizeWindow,
    SummaryCache,
    TrimToolOutputs,
    check_budget,
    dedupe_reads,
    fit_to_budget,
    isolate_boundaries,
    mask_observations,
    summarize_window,
    trim_tool_outputs,
)
from .profiles import ContextProfile, available_profiles, profile, register_profile
from .readback import readback_toolset
from .readback.archive import ContextArchive, MemoryReadbackStore, ReadbackStore
from .request_tokens import RequestTokens, weigh_request
from .session import ContextSession, StoreSummaryCache
from .session.readback import StoreReadbackStore
from .settings import ContextSettings
from .store import Artifact, ArtifactStore, MemoryStore, SessionInfo, SessionStore, SqliteStore, open_store
from .store._compat import CONVERSATION_STORE_NAMES, HAS_CONVERSATION_STORE, require_conversation_store
from .tokens import HeuristicCounter, TiktokenCounter, TokenCounter
from .views import (
    CompileContext,
    Policy,
    RunSpan,
    compile_view,
    conversation_view,
    current_prompt,
    current_run,
    run_spans,
)

if TYPE_CHECKING or HAS_CONVERSATION_STORE:
    from .store import MemoryConversationStore as MemoryConversationStore
    from .store import PostgresConversationStore as PostgresConversationStore
    from .store import SqliteConversationStore as SqliteConversationStore

__all__ = [
    'Artifact',
    'ArtifactStore',
    'CheckBudget',
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
    'RequestOverhead',
    'RequestTokens',
    'RunSpan',
    'SessionInfo',
    'SessionStore',
    'SqliteStore',
    'StoreEntryMissing',
    'StoreError',
    'StoreReadbackStore',
    'StoreSummaryCache',
    'SummarizeWindow',
    'SummaryCache',
    'TiktokenCounter',
    'TokenCounter',
    'ToolPair',
    'TrimToolOutputs',
    'analyze_pairs',
    'available_profiles',
    'check_budget',
    'clear',
    'compact',
    'compact_result',
    'compile_view',
    'conversation_view',
    'current_prompt',
    'current_run',
    'dedupe_reads',
    'fit_to_budget',
    'from_openai',
    'history_stats',
    'isolate_boundaries',
    'mask_observations',
    'measure_overhead',
    'normalize',
    'normalize_with_repairs',
    'open_store',
    'patch_dangling_tool_calls',
    'profile',
    'readback_toolset',
    'register_profile',
    'resolve_context_window',
    'resolve_input_limit',
    'run_spans',
    'safe_cut_points',
    'summarize_window',
    'to_openai',
    'trim_tool_outputs',
    'validate_view',
    'weigh_request',
]
if HAS_CONVERSATION_STORE:
    __all__ += [name for name in CONVERSATION_STORE_NAMES if name != 'POSTGRES_MIGRATIONS']


def __getattr__(name: str) -> Any:
    # On a pydantic-ai without ConversationStore these names raise ImportError naming the version.
    if name in CONVERSATION_STORE_NAMES:
        require_conversation_store(name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


__version__ = '0.1.0'
