"""Replay a recorded agent run through a profile and measure what the model would have been sent.

Every `ModelResponse` in a recorded log marks one model request whose input was everything
before it. Replaying compiles the view of that input with a profile (or sends it as is, for the
`none` baseline) and records, per request, the view's tokens, how much of it a provider could
serve from its prompt cache, how long compiling took, and how many *execution facts* (file paths
and error lines from tool output) the view still shows. `ReplayResult` aggregates them into the
numbers used to choose a profile: total input tokens, cache-weighted cost, peak tokens, requests
over the window and fact retention.

This module computes and never prints; `bench/replay.py` and the command line render it.

Fact definitions:

- *execution facts*: file paths (`PATH_PATTERN`) and error lines (lines matching
  `ERROR_PATTERN`, stripped, cut to their first 120 characters, kept when longer than 8) in the
  text of every `ToolReturnPart` before the request;
- *needed facts*: the paths among them that the agent goes on to use, i.e. that appear in the
  arguments of a tool call or the text of a `ModelResponse` at or after the request's response;
- *retention*: the share of those facts (as a set) present as substrings of the view's text
  (`_parts.message_text` of every message). A request with no facts so far counts as 1.0:
  nothing could have been lost.

The package's rooms: `engine` (the replay loop, `replay`, `ViewCompiler`), `results`
(`RequestRecord`, `ReplayResult`, averaging helpers), `breakpoints` (what a provider that caches at
explicit breakpoints would read), `facts` (`FactIndex`, `paths_in`,
`error_lines`), `recall` (what reading back would have cost), `loading` (`load_history`,
`load_histories`) and `extractive` (the offline summariser model). Arrows point one way:
`engine` imports `breakpoints`, `facts`, `recall` and `results`; `recall` imports `facts`; nothing imports back.
This module computes and never prints; `bench/replay.py` and the command line render it.
"""

from __future__ import annotations

from .engine import ViewCompiler, replay
from .extractive import extractive_summary, extractive_summary_model
from .facts import ERROR_PATTERN, PATH_PATTERN, FactIndex, error_lines, paths_in
from .loading import HistoryLoadError, load_histories, load_history
from .results import ReplayResult, RequestRecord, geometric_mean, percentile

__all__ = (
    'ERROR_PATTERN',
    'PATH_PATTERN',
    'FactIndex',
    'HistoryLoadError',
    'ReplayResult',
    'RequestRecord',
    'ViewCompiler',
    'error_lines',
    'extractive_summary',
    'extractive_summary_model',
    'geometric_mean',
    'load_histories',
    'load_history',
    'paths_in',
    'percentile',
    'replay',
)
