"""The policies a profile chains, cheapest first. Each is also a pydantic-ai history processor."""

from __future__ import annotations

from .check import CheckBudget, check_budget
from .dedupe import DedupeReads, dedupe_reads, read_key, read_path
from .fit import FitToBudget, fit_to_budget
from .isolate import IsolateBoundaries, IsolateMode, isolate_boundaries
from .mask import MaskObservations, mask_observations
from .summarize import InMemorySummaryCache, SummarizeWindow, SummaryCache, summarize_window
from .trim import TrimToolOutputs, trim_tool_outputs

__all__ = (
    'CheckBudget',
    'DedupeReads',
    'FitToBudget',
    'InMemorySummaryCache',
    'IsolateBoundaries',
    'IsolateMode',
    'MaskObservations',
    'SummarizeWindow',
    'SummaryCache',
    'TrimToolOutputs',
    'check_budget',
    'dedupe_reads',
    'fit_to_budget',
    'isolate_boundaries',
    'mask_observations',
    'read_key',
    'read_path',
    'summarize_window',
    'trim_tool_outputs',
)
