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
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
import time
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

import pydantic
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from . import _facts, _parts, _recall
from ._model_texts import ModelTexts
from .errors import ContextBudgetExceeded, ContextError
from .overhead import measure_overhead
from .request_tokens import RequestTokens, weigh_request
from .tokens import TokenCounter

__all__ = (
    'ERROR_PATTERN',
    'PATH_PATTERN',
    'FactIndex',
    'HistoryLoadError',
    'ReplayResult',
    'RequestRecord',
    'ViewCompiler',
    'error_lines',
    'extractive_summary_model',
    'geometric_mean',
    'load_histories',
    'load_history',
    'paths_in',
    'replay',
)

PATH_PATTERN = re.compile(r'(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]\w{0,5}')
"""A file path with at least one directory and an extension (issue 3's definition).

The definition, not the search: `paths_in` finds exactly its matches in linear time. Searching a text
with it directly rescans a long run of word characters from every start position (quadratic)."""
ERROR_PATTERN = re.compile(r'Error|Exception|FAILED|Traceback|error:|FAIL:')
"""A line reporting an error (issue 3's definition)."""
_ERROR_LINE_CHARS = 120
_ERROR_LINE_MIN = 8


class HistoryLoadError(ContextError, ValueError):
    """A recorded history could not be loaded: the message names the file and, for validation
    failures, the index of the offending message."""


@runtime_checkable
class ViewCompiler(Protocol):
    """Anything that turns a log into the view sent to the model: a `ContextProfile`, or an adapter
    around another library's compaction (as `bench/replay.py` does for pydantic-ai-harness)."""

    name: str

    def compile(self, messages: Sequence[ModelMessage]) -> Awaitable[list[ModelMessage]]: ...


# --- loading ----------------------------------------------------------------------------------


def load_history(path: str | Path) -> list[ModelMessage] | list[list[ModelMessage]]:
    """Load a pydantic-ai JSON history (as written by `ModelMessagesTypeAdapter`), or a JSON list of them.

    Returns the history, or a list of histories when the file holds a list of lists. Raises
    `HistoryLoadError` naming the file for an unreadable file, invalid JSON, or a history that
    fails validation (with the index of the offending message).

    Example:
        ```python
        import tempfile
        from pathlib import Path

        from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

        from pydantic_ai_context.replay import load_history

        log = [ModelRequest(parts=[UserPromptPart('hi')])]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / 'run.json'
            path.write_bytes(ModelMessagesTypeAdapter.dump_json(log))
            assert load_history(path) == log
        ```
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise HistoryLoadError(f'{path}: cannot read the file ({exc.strerror or exc})') from exc
    if not raw.strip():
        raise HistoryLoadError(f'{path}: the file is empty (expected a JSON list of pydantic-ai messages)')
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HistoryLoadError(f'{path}: not valid JSON ({exc})') from exc
    if not isinstance(data, list):
        raise HistoryLoadError(f'{path}: expected a JSON list of messages (or a list of such lists)')
    if data and all(isinstance(item, list) for item in data):
        return [_validate(path, item, history=n) for n, item in enumerate(data)]
    return _validate(path, data)


def load_histories(path: str | Path) -> list[list[ModelMessage]]:
    """Like `load_history`, but always a list of histories (one for a single-history file)."""
    loaded = load_history(path)
    if loaded and isinstance(loaded[0], list):
        return [h for h in loaded if isinstance(h, list)]
    return [loaded] if loaded else []  # type: ignore[list-item]


def _validate(path: Path, data: list[Any], *, history: int | None = None) -> list[ModelMessage]:
    where = f'{path}' if history is None else f'{path}: history {history}'
    try:
        return ModelMessagesTypeAdapter.validate_python(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        loc = first.get('loc', ())
        index = loc[0] if loc and isinstance(loc[0], int) else None
        at = f'message {index}' if index is not None else 'the history'
        rest = '.'.join(str(x) for x in loc[1:]) if index is not None else '.'.join(str(x) for x in loc)
        detail = f'{first.get("msg", "invalid")}' + (f' at {rest}' if rest else '')
        item = data[index] if index is not None and index < len(data) else None
        hint = ''
        if isinstance(item, dict) and 'role' in item and 'kind' not in item:
            hint = (
                '; it looks like OpenAI chat format: convert it with pydantic_ai_context.from_openai '
                'and save ModelMessagesTypeAdapter.dump_json(messages)'
            )
        raise HistoryLoadError(
            f'{where}: {at} is not a valid pydantic-ai message: {detail} ({exc.error_count()} error(s)){hint}'
        ) from exc


# --- execution facts --------------------------------------------------------------------------


def paths_in(text: str) -> list[str]:
    """File paths in `text`, by `PATH_PATTERN`, in order of appearance (duplicates kept).

    The whole text is searched, in linear time, by `pydantic_ai_context._facts.paths_in` (which keeps
    an absolute path's leading slash; the pattern leaves it out). The paths are those of
    `PATH_PATTERN.findall(text)`, except inside a run of path characters longer than 4,096 or with a
    component longer than 255 (a dump or a blob, not a path).
    """
    return [path[1:] if path.startswith('/') else path for path in _facts.paths_in(text)]


def error_lines(text: str) -> list[str]:
    """Error lines in `text`: lines matching `ERROR_PATTERN`, stripped, first 120 chars, longer than 8."""
    out: list[str] = []
    for line in text.splitlines():
        if ERROR_PATTERN.search(line):
            fact = line.strip()[:_ERROR_LINE_CHARS]
            if len(fact) > _ERROR_LINE_MIN:
                out.append(fact)
    return out


def _tool_return_text(message: ModelMessage) -> str:
    if not isinstance(message, ModelRequest):
        return ''
    texts = [_parts.tool_content_text(p.content) for p in message.parts if isinstance(p, ToolReturnPart)]
    return '\n'.join(t for t in texts if t)


def _agent_text(message: ModelResponse) -> str:
    """What the agent wrote itself: tool call arguments and text (not thinking)."""
    chunks: list[str] = []
    for part in message.parts:
        if _parts.is_tool_call(part):
            chunks.append(_parts.args_text(part))
        elif isinstance(part, TextPart):
            chunks.append(part.content)
    return '\n'.join(chunks)


@dataclass(kw_only=True, eq=False)
class FactIndex:
    """The execution facts of one log, ordered by first appearance, and which views keep them.

    Profile-independent: build it once per log (`FactIndex.build`) and pass it to every `replay`
    of that log; the per-text search results it caches are shared too.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
        from pydantic_ai.messages import UserPromptPart

        from pydantic_ai_context.replay import FactIndex

        output = 'src/app.py\\nValueError: bad input'
        log = [
            ModelRequest(parts=[UserPromptPart('fix it')]),
            ModelResponse(parts=[ToolCallPart('bash', {'command': 'ls'}, tool_call_id='1')]),
            ModelRequest(parts=[ToolReturnPart('bash', output, tool_call_id='1')]),
            ModelResponse(parts=[ToolCallPart('bash', {'command': 'cat src/app.py'}, tool_call_id='2')]),
        ]
        facts = FactIndex.build(log)
        assert facts.facts == ['src/app.py', 'ValueError: bad input']
        assert facts.retention(3, log[:3]) == (1.0, 1.0)
        ```
    """

    facts: list[str]
    """Every fact of the log, in order of first appearance."""
    first_seen: list[int]
    """For each fact, the index of the first message whose tool returns contain it."""
    is_path: list[bool]
    last_use: list[int]
    """For each path fact, the index of the last response that uses it (-1: never)."""
    sources: list[frozenset[int]]
    """For each fact, the ids of the log's messages whose tool returns contain it."""
    source_calls: list[tuple[str, ...]] = field(default_factory=list[tuple[str, ...]])
    """For each fact, the `tool_call_id`s of the tool returns that contain it, in log order."""
    _log: Sequence[ModelMessage] = ()
    _found: dict[str, frozenset[int]] = field(default_factory=dict[str, frozenset[int]], repr=False)
    _texts: dict[int, tuple[ModelMessage, str]] = field(default_factory=dict[int, tuple[ModelMessage, str]])

    @classmethod
    def build(cls, messages: Sequence[ModelMessage]) -> FactIndex:
        """Extract the facts of `messages` (one pass over the tool returns and one over the responses)."""
        index: dict[str, int] = {}
        facts: list[str] = []
        first_seen: list[int] = []
        is_path: list[bool] = []
        sources: list[set[int]] = []
        calls: list[dict[str, None]] = []
        for i, message in enumerate(messages):
            if not isinstance(message, ModelRequest):
                continue
            for part in message.parts:
                if not isinstance(part, ToolReturnPart):
                    continue
                text = _parts.tool_content_text(part.content)
                for fact, path in [
                    *((p, True) for p in paths_in(text)),
                    *((e, False) for e in error_lines(text)),
                ]:
                    k = index.get(fact)
                    if k is None:
                        k = index[fact] = len(facts)
                        facts.append(fact)
                        first_seen.append(i)
                        is_path.append(path)
                        sources.append(set())
                        calls.append({})
                    # A string can be both a path and inside an error line; as a path it may be needed.
                    is_path[k] = is_path[k] or path
                    sources[k].add(id(message))
                    calls[k][part.tool_call_id] = None
        last_use = [-1] * len(facts)
        path_ids = [k for k in range(len(facts)) if is_path[k]]
        pending = set(path_ids)
        # Walk responses newest first: the first hit for a path is its last use.
        for i in range(len(messages) - 1, -1, -1):
            message = messages[i]
            if not pending:
                break
            if not isinstance(message, ModelResponse):
                continue
            text = _agent_text(message)
            if not text:
                continue
            hits = [k for k in pending if facts[k] in text]
            for k in hits:
                last_use[k] = i
            pending.difference_update(hits)
        return cls(
            facts=facts,
            first_seen=first_seen,
            is_path=is_path,
            last_use=last_use,
            sources=[frozenset(s) for s in sources],
            source_calls=[tuple(c) for c in calls],
            _log=messages,
        )

    def known_before(self, index: int) -> list[int]:
        """Fact ids seen in tool returns before message `index`."""
        return [k for k, seen in enumerate(self.first_seen) if seen < index]

    def needed_before(self, index: int) -> list[int]:
        """Path fact ids seen before message `index` that a response at or after `index` uses."""
        return [k for k, seen in enumerate(self.first_seen) if seen < index and self.last_use[k] >= index]

    def used_at(self, index: int) -> list[int]:
        """Fact ids seen before message `index` that the response at `index` uses (its call arguments or text)."""
        message = self._log[index] if index < len(self._log) else None
        if not isinstance(message, ModelResponse):
            return []
        text = _agent_text(message)
        return [k for k in self.known_before(index) if self.facts[k] in text] if text else []

    def present(self, view: Sequence[ModelMessage]) -> set[int]:
        """Fact ids the view's text shows."""
        return self._present(view)

    def retention(self, index: int, view: Sequence[ModelMessage]) -> tuple[float, float]:
        """(fact retention, needed-fact retention) of `view` for the request answered by message `index`.

        With no facts (or no needed facts) the share is 1.0: nothing could have been lost.
        """
        known = self.known_before(index)
        needed = [k for k in known if self.last_use[k] >= index]
        if not known:
            return 1.0, 1.0
        present = self._present(view)
        kept = sum(1 for k in known if k in present)
        kept_needed = sum(1 for k in needed if k in present)
        return kept / len(known), (kept_needed / len(needed) if needed else 1.0)

    def _present(self, view: Sequence[ModelMessage]) -> set[int]:
        # Facts hold no newline, so a fact is in the joined view text iff it is in one message's text.
        ids = {id(m) for m in view}
        present = {k for k, src in enumerate(self.sources) if not ids.isdisjoint(src)}
        for message in view:
            present.update(self._found_in(self._text(message)))
        return present

    def _text(self, message: ModelMessage) -> str:
        # Keyed by identity (the message is kept alive alongside): unchanged messages are the same
        # objects request after request, so their text is built once.
        cached = self._texts.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        text = _parts.message_text(message)
        self._texts[id(message)] = (message, text)
        return text

    def _found_in(self, text: str) -> frozenset[int]:
        # Keyed by text: policies may rebuild an equal placeholder on every compile.
        found = self._found.get(text)
        if found is None:
            found = self._found[text] = frozenset(k for k, fact in enumerate(self.facts) if fact in text)
        return found


# --- replay -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RequestRecord:
    """What one replayed model request would have sent, and what it cost."""

    index: int
    """Index in the log of the response this request produced (its input is `log[:index]`)."""
    log_messages: int
    log_tokens: int
    """Tokens of the uncompacted input."""
    view_messages: int
    view_tokens: int
    """Tokens of the request (what the provider bills as input): the view's messages, the newest
    request's instructions once, and any tools or overhead supplied to `replay`."""
    cached_tokens: int
    """Tokens of the longest run of leading view messages equal to the previous request's view (as
    sent: metadata, which providers never receive, is not compared)."""
    output_tokens: int
    """Tokens of the recorded response."""
    compile_ms: float
    """Wall time of compiling the view (0 for the `none` baseline)."""
    over_window: bool
    """The view is larger than the context window (a provider would reject the request)."""
    facts: int
    fact_retention: float
    needed_facts: int
    needed_fact_retention: float
    summary_calls: int = 0
    summary_input_tokens: int = 0
    summary_output_tokens: int = 0
    dropped_messages: int = 0
    """Messages `fit_to_budget` dropped from this view (0 when it dropped none)."""
    summarised: bool = False
    """The view holds a summary (new or reused) of earlier messages."""
    error: str | None = None
    """Set when compiling raised `ContextBudgetExceeded`; the uncompacted input then stands in for
    the view and the request counts as over the window."""
    recall_missing: int = 0
    """Facts the recorded response uses that the view does not show."""
    recall_unrecoverable: int = 0
    """Of those, facts no read-back reaches (no read-back tools, or no marker names them)."""
    recall_round_trips: int = 0
    """Extra requests reading back would have taken before this response (see `_recall`)."""
    recall_cached_tokens: int = 0
    recall_uncached_tokens: int = 0
    recall_kept_round_trips: int = 0
    """Extra requests when read-back pages stay in the run's later views (they are never compacted)."""
    recall_kept_tokens: int = 0
    """Tokens the kept accounting adds to this request: its round trips and the earlier pages it re-sends."""
    recall_kept_uncached_tokens: int = 0
    """Of `recall_kept_tokens`, those sent uncached (the new calls and pages); the rest is cached."""
    needed_or_recoverable: float = 1.0
    """Share of the needed facts the view shows or read-back reaches (1.0 with none needed)."""
    instructions_tokens: int = 0
    """Of `view_tokens`, the instructions the request sends (counted once)."""
    overhead_tokens: int = 0
    """Of `view_tokens`, what the messages do not carry: tool definitions and instructions of the
    agent given to `replay`, and its `overhead_tokens`."""
    model_texts_kept: float = 1.0
    """Share of the model's own earlier texts (response `TextPart`s of 40+ characters) the view shows
    verbatim (1.0 with none; see `_model_texts`)."""

    @property
    def uncached_tokens(self) -> int:
        return self.view_tokens - self.cached_tokens


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    """The records of one replay and their aggregates.

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context import HeuristicCounter
        from pydantic_ai_context.replay import replay

        log = [ModelRequest(parts=[UserPromptPart('hi')]), ModelResponse(parts=[TextPart('hello')])]
        result = asyncio.run(replay(log, None, context_window=32_000, counter=HeuristicCounter()))
        assert result.requests == 1 and result.ratio_to(result) == 1.0
        ```
    """

    profile: str
    """`'none'` for no compaction, else the profile's name (or the label given to `replay`)."""
    context_window: int
    records: tuple[RequestRecord, ...]
    messages: list[ModelMessage] = field(repr=False)
    """The replayed log: the recorded messages, each response carrying the simulated usage."""
    cache_read_price: float = 0.1
    summary_input_price: float = 1.0
    summary_output_price: float = 4.0

    @property
    def requests(self) -> int:
        return len(self.records)

    @property
    def input_tokens(self) -> int:
        return sum(r.view_tokens for r in self.records)

    @property
    def cached_tokens(self) -> int:
        return sum(r.cached_tokens for r in self.records)

    @property
    def uncached_tokens(self) -> int:
        return self.input_tokens - self.cached_tokens

    @property
    def summary_calls(self) -> int:
        return sum(r.summary_calls for r in self.records)

    @property
    def cached_share(self) -> float:
        """Share of all input tokens a provider could serve from its prompt cache."""
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def dropping_compiles(self) -> int:
        """Requests whose view had whole steps dropped by `fit_to_budget`."""
        return sum(1 for r in self.records if r.dropped_messages)

    @property
    def summarised_compiles(self) -> int:
        """Requests whose view held a summary of earlier messages."""
        return sum(1 for r in self.records if r.summarised)

    @property
    def summary_input_tokens(self) -> int:
        return sum(r.summary_input_tokens for r in self.records)

    @property
    def summary_output_tokens(self) -> int:
        return sum(r.summary_output_tokens for r in self.records)

    @property
    def cost(self) -> float:
        """Cache-weighted cost in input-token units: uncached x1.0, cached x`cache_read_price`,
        summariser input x`summary_input_price` and output x`summary_output_price`."""
        return (
            self.uncached_tokens
            + self.cached_tokens * self.cache_read_price
            + self.summary_input_tokens * self.summary_input_price
            + self.summary_output_tokens * self.summary_output_price
        )

    @property
    def recall_round_trips(self) -> int:
        return sum(r.recall_round_trips for r in self.records)

    @property
    def recall_cost(self) -> float:
        """What the read-back round trips cost: their prefix cached, their calls and pages uncached."""
        return sum(
            r.recall_uncached_tokens + r.recall_cached_tokens * self.cache_read_price for r in self.records
        )

    @property
    def recall_charged_cost(self) -> float:
        """`cost` plus `recall_cost`: what the run costs when every fact the agent uses must be in reach."""
        return self.cost + self.recall_cost

    @property
    def recall_kept_cost(self) -> float:
        """`cost` plus read-back when each page stays in the run's later views: its round trips once,
        then the page re-sent (cached) by every later request of the run."""
        kept = sum(
            r.recall_kept_uncached_tokens
            + (r.recall_kept_tokens - r.recall_kept_uncached_tokens) * self.cache_read_price
            for r in self.records
        )
        return self.cost + kept

    @property
    def unrecoverable_facts(self) -> int:
        """Facts the agent used that the view lacked and no read-back could reach (summed over requests)."""
        return sum(r.recall_unrecoverable for r in self.records)

    @property
    def needed_or_recoverable(self) -> float:
        """Mean over requests of the share of needed facts shown or reachable by read-back."""
        return _mean(r.needed_or_recoverable for r in self.records)

    @property
    def model_texts_kept(self) -> float:
        """Mean over requests of the share of the model's own earlier texts the view shows verbatim."""
        return _mean(r.model_texts_kept for r in self.records)

    @property
    def peak_view_tokens(self) -> int:
        return max((r.view_tokens for r in self.records), default=0)

    @property
    def requests_over_window(self) -> int:
        return sum(1 for r in self.records if r.over_window)

    @property
    def errors(self) -> int:
        """Requests whose compile raised `ContextBudgetExceeded`."""
        return sum(1 for r in self.records if r.error is not None)

    @property
    def fact_retention(self) -> float:
        """Mean over requests of the share of execution facts the view still shows."""
        return _mean(r.fact_retention for r in self.records)

    @property
    def needed_fact_retention(self) -> float:
        """Mean over requests of the share of needed facts the view still shows."""
        return _mean(r.needed_fact_retention for r in self.records)

    @property
    def compile_ms_median(self) -> float:
        times = [r.compile_ms for r in self.records]
        return statistics.median(times) if times else 0.0

    @property
    def compile_ms_p95(self) -> float:
        return percentile([r.compile_ms for r in self.records], 95)

    def ratio_to(self, baseline: ReplayResult, metric: str = 'cost') -> float:
        """This result's `metric` (`'cost'`, `'input_tokens'`, `'peak_view_tokens'`...) over `baseline`'s."""
        mine, theirs = float(getattr(self, metric)), float(getattr(baseline, metric))
        if theirs == 0:
            return 1.0 if mine == 0 else math.inf
        return mine / theirs

    def summary(self) -> dict[str, Any]:
        """The aggregates as a flat JSON-ready dict."""
        return {
            'profile': self.profile,
            'context_window': self.context_window,
            'requests': self.requests,
            'input_tokens': self.input_tokens,
            'cached_tokens': self.cached_tokens,
            'uncached_tokens': self.uncached_tokens,
            'cost': self.cost,
            'peak_view_tokens': self.peak_view_tokens,
            'requests_over_window': self.requests_over_window,
            'errors': self.errors,
            'fact_retention': self.fact_retention,
            'needed_fact_retention': self.needed_fact_retention,
            'needed_or_recoverable': self.needed_or_recoverable,
            'model_texts_kept': self.model_texts_kept,
            'recall_charged_cost': self.recall_charged_cost,
            'recall_kept_cost': self.recall_kept_cost,
            'recall_round_trips': self.recall_round_trips,
            'unrecoverable_facts': self.unrecoverable_facts,
            'summary_calls': self.summary_calls,
            'cached_share': self.cached_share,
            'dropping_compiles': self.dropping_compiles,
            'summarised_compiles': self.summarised_compiles,
            'summary_input_tokens': self.summary_input_tokens,
            'summary_output_tokens': self.summary_output_tokens,
            'compile_ms_median': self.compile_ms_median,
            'compile_ms_p95': self.compile_ms_p95,
        }

    def to_dict(self) -> dict[str, Any]:
        """`summary()` plus every request record."""
        return {**self.summary(), 'records': [dataclasses.asdict(r) for r in self.records]}


async def replay(
    messages: Sequence[ModelMessage],
    profile: ViewCompiler | None,
    *,
    context_window: int,
    counter: TokenCounter,
    cache_read_price: float = 0.1,
    summary_input_price: float = 1.0,
    summary_output_price: float = 4.0,
    facts: FactIndex | None = None,
    label: str | None = None,
    parameters: Any = None,
    overhead_tokens: int = 0,
) -> ReplayResult:
    """Replay a recorded log through `profile` (`None`: no compaction) and measure every request.

    For each `ModelResponse` at index `i`, the request's input is the replayed log up to `i`, and
    the view is `await profile.compile(input)`. The simulated provider then reports, on that
    response, `RequestUsage(input_tokens=<view tokens>, output_tokens=<response tokens>)`
    (the recorded usage measured the original agent's context, not this view), so policies that
    anchor on usage see consistent numbers. Pass a `FactIndex` built once when replaying the same
    log through several profiles. `label` names the result (default: the profile's name).

    Summariser usage comes from the `CompactionEvent`s the profile appended to `profile.events`
    during each compile: their `details` keys `summary_input_tokens`, `summary_output_tokens` and
    `summary_calls` (one call per event with input tokens when absent). A compile that raises
    `ContextBudgetExceeded` is recorded (`RequestRecord.error`), not raised.

    A profile used here should be fresh (its summary cache and events belong to this replay).

    Each request is weighed as pydantic-ai sends it (`request_tokens.weigh_request`): the messages,
    the newest request's instructions once, and what a recorded log cannot show. `parameters`
    (a `ModelRequestParameters`, e.g. from `agent_parameters`) adds the agent's tool definitions and
    instructions, measured by `measure_overhead` as the live path does, and is passed to the
    profile's `compile` so it reserves them; `overhead_tokens` adds a fixed number to every request
    (the profile should reserve it: `reserved_system`).

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context import HeuristicCounter, profile
        from pydantic_ai_context.replay import replay

        log = [
            ModelRequest(parts=[UserPromptPart('hi')]),
            ModelResponse(parts=[TextPart('hello')]),
            ModelRequest(parts=[UserPromptPart('and now?')]),
            ModelResponse(parts=[TextPart('still here')]),
        ]
        transparent = profile('transparent')
        result = asyncio.run(replay(log, transparent, context_window=32_000, counter=HeuristicCounter()))
        assert [r.index for r in result.records] == [1, 3]
        assert result.records[1].cached_tokens == result.records[0].view_tokens
        ```
    """
    index = facts if facts is not None else FactIndex.build(messages)
    texts = ModelTexts.build(messages)
    events = getattr(profile, 'events', None)
    # Read-back reaches originals only with the tools, through the refs the profile's markers name.
    archive = getattr(profile, 'archive', None) if getattr(profile, 'readback', False) else None
    ledger = _recall.RecallLedger(index, messages, archive, counter)
    replayed: list[ModelMessage] = []
    records: list[RequestRecord] = []
    previous: Sequence[ModelMessage] = ()
    previous_weight: RequestTokens | None = None
    last_event: object = events[-1] if events else None
    for i, message in enumerate(messages):
        if not isinstance(message, ModelResponse):
            replayed.append(message)
            continue
        log_input = list(replayed)
        error: str | None = None
        compile_ms = 0.0
        if profile is None:
            view = log_input
        else:
            started = time.perf_counter()
            try:
                compiled = (
                    profile.compile(log_input)
                    if parameters is None
                    else cast(Any, profile).compile(log_input, parameters=parameters)
                )
                view = await compiled
            except ContextBudgetExceeded as exc:
                view, error = log_input, str(exc)
            compile_ms = (time.perf_counter() - started) * 1000
            # The recorded model answered before the next request: a summary written ahead in the
            # background lands meanwhile (without this a replay never yields to it, and a
            # summarising profile looks like one that only drops).
            settle = getattr(profile, 'settle_background', None)
            if settle is not None:
                await settle()
        weight = _weigh(view, counter, parameters, overhead_tokens, per_message=True)
        view_tokens = weight.total_tokens
        cached = _cached_prefix_tokens(view, weight, previous, previous_weight)
        output_tokens = counter.count_message(message)
        fact_share, needed_share = index.retention(i, view)
        present = index.present(view)
        recall, reached = ledger.charge(i, view, view_tokens, present, history=log_input)
        needed = index.needed_before(i)
        lacking = [k for k in needed if k not in present]
        reachable = _recall.recoverable(index, lacking, view, ledger.spans, reached)
        new_events, last_event = _new_events(events, last_event)
        summary_calls, summary_in, summary_out = _summary_usage(new_events)
        records.append(
            RequestRecord(
                index=i,
                log_messages=len(log_input),
                log_tokens=_weigh(log_input, counter, parameters, overhead_tokens).total_tokens,
                instructions_tokens=weight.instructions_tokens,
                overhead_tokens=weight.overhead_tokens,
                view_messages=len(view),
                view_tokens=view_tokens,
                cached_tokens=cached,
                output_tokens=output_tokens,
                compile_ms=compile_ms,
                over_window=error is not None or view_tokens > context_window,
                facts=len(index.known_before(i)),
                fact_retention=fact_share,
                needed_facts=len(index.needed_before(i)),
                needed_fact_retention=needed_share,
                summary_calls=summary_calls,
                summary_input_tokens=summary_in,
                summary_output_tokens=summary_out,
                dropped_messages=sum(_int(e, 'dropped_messages') for e in new_events),
                summarised=any((_parts.marker(m) or {}).get('kind') == 'summary' for m in view),
                error=error,
                recall_missing=recall.used_missing,
                recall_unrecoverable=recall.unrecoverable,
                recall_round_trips=recall.round_trips,
                recall_cached_tokens=recall.cached_tokens,
                recall_uncached_tokens=recall.uncached_tokens,
                recall_kept_round_trips=recall.kept_round_trips,
                recall_kept_tokens=recall.kept_uncached_tokens
                + recall.kept_cached_tokens
                + recall.carried_tokens,
                recall_kept_uncached_tokens=recall.kept_uncached_tokens,
                needed_or_recoverable=(len(needed) - len(lacking) + reachable) / len(needed)
                if needed
                else 1.0,
                model_texts_kept=texts.kept(i, view),
            )
        )
        replayed.append(
            dataclasses.replace(
                message, usage=RequestUsage(input_tokens=view_tokens, output_tokens=output_tokens)
            )
        )
        previous, previous_weight = view, weight
    close = getattr(profile, 'close_background', None)
    if close is not None and records:
        # Summaries made ahead and never used are spent too: charged to the last request.
        await close()
        late, last_event = _new_events(events, last_event)
        if late:
            calls, tokens_in, tokens_out = _summary_usage(late)
            last = records[-1]
            records[-1] = dataclasses.replace(
                last,
                summary_calls=last.summary_calls + calls,
                summary_input_tokens=last.summary_input_tokens + tokens_in,
                summary_output_tokens=last.summary_output_tokens + tokens_out,
            )
    name = label or ('none' if profile is None else str(getattr(profile, 'name', type(profile).__name__)))
    return ReplayResult(
        profile=name,
        context_window=context_window,
        records=tuple(records),
        messages=replayed,
        cache_read_price=cache_read_price,
        summary_input_price=summary_input_price,
        summary_output_price=summary_output_price,
    )


def _weigh(
    view: Sequence[ModelMessage],
    counter: TokenCounter,
    parameters: Any,
    extra: int,
    *,
    per_message: bool = False,
) -> RequestTokens:
    overhead = (
        measure_overhead(view, counter=counter, parameters=parameters) if parameters is not None else None
    )
    return weigh_request(
        view, counter=counter, overhead=overhead, overhead_tokens=extra, per_message=per_message
    )


def _cached_prefix_tokens(
    view: Sequence[ModelMessage],
    weight: RequestTokens,
    previous: Sequence[ModelMessage],
    previous_weight: RequestTokens | None,
) -> int:
    """The request's leading tokens a provider could serve from the previous request's cache.

    Tools and instructions lead the request: unchanged, they are cached with the longest run of
    leading messages equal to the previous view's; changed, nothing is."""
    if previous_weight is None:
        return 0
    fixed = (weight.instructions, weight.instructions_tokens, weight.tools_tokens, weight.extra_tokens)
    before_fixed = (
        previous_weight.instructions,
        previous_weight.instructions_tokens,
        previous_weight.tools_tokens,
        previous_weight.extra_tokens,
    )
    if fixed != before_fixed:
        return 0
    cached = weight.instructions_tokens + weight.tools_tokens + weight.extra_tokens
    assert weight.per_message is not None
    for message, tokens, before in zip(view, weight.per_message, previous, strict=False):
        if message is not before and _sent(message) != _sent(before):
            break
        cached += tokens
    return cached


def _sent(message: ModelMessage) -> ModelMessage:
    """`message` as a provider receives it: metadata (this package's markers included) is never sent."""
    originals: list[Any] = list(message.parts)
    parts = [
        dataclasses.replace(part, metadata=None) if getattr(part, 'metadata', None) else part
        for part in originals
    ]
    sent: Any = message
    return cast(ModelMessage, dataclasses.replace(sent, parts=parts, metadata=None))


def _summary_usage(events: Sequence[Any]) -> tuple[int, int, int]:
    """Summariser calls, input and output tokens the events report (a call per event with input
    tokens when it does not count its calls)."""
    calls = sum(_int(e, 'summary_calls') or (1 if _int(e, 'summary_input_tokens') else 0) for e in events)
    return (
        calls,
        sum(_int(e, 'summary_input_tokens') for e in events),
        sum(_int(e, 'summary_output_tokens') for e in events),
    )


def _new_events(events: Any, last: object) -> tuple[list[Any], object]:
    """Events appended to the profile's deque since `last` (compared by identity)."""
    if not events:
        return [], last
    new: list[Any] = []
    for event in reversed(events):
        if event is last:
            break
        new.append(event)
    new.reverse()
    return new, events[-1]


def _int(event: Any, key: str) -> int:
    details = getattr(event, 'details', None)
    value = details.get(key) if isinstance(details, dict) else None
    return int(value) if isinstance(value, int | float) else 0


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 1.0


def percentile(values: Sequence[float], pct: float) -> float:
    """The `pct` percentile of `values` (nearest rank); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def geometric_mean(values: Iterable[float]) -> float:
    """Geometric mean of positive ratios (the usual way to average ratios across files)."""
    items = [v for v in values if v > 0 and math.isfinite(v)]
    if not items:
        return math.nan
    return math.exp(sum(math.log(v) for v in items) / len(items))


# --- a deterministic summariser for offline replays ----------------------------------------------


def extractive_summary_model(*, max_chars: int = 2_400) -> FunctionModel:
    """A deterministic, offline stand-in for a summariser model, for replays and tests.

    It answers the summariser's prompt with an *extractive* summary under the sections the
    prompt asks for (`SUMMARY_SECTIONS`): the first lines of the task, every file path, the
    commands run, every error line (the execution facts replay measures, newest first when they
    do not all fit), and the end of the last assistant text. It stays within the size the prompt
    asks for (about 4 characters a token), else `max_chars`. A real model writes better
    summaries; this one makes summarising profiles measurable without a network, and its cost is
    charged like a real call (input x1.0, output x4.0).

    Example:
        ```python
        from pydantic_ai import Agent

        from pydantic_ai_context.replay import extractive_summary_model

        agent = Agent(extractive_summary_model())
        out = agent.run_sync('<transcript>user: fix src/app.py\\nValueError: boom</transcript>').output
        assert 'src/app.py' in out and 'ValueError: boom' in out
        assert out.startswith('Task and constraints:')
        ```
    """

    def summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = '\n'.join(
            p.content
            for m in messages
            for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        )
        hint = _SIZE_HINT.search(prompt)
        budget = int(hint.group(1).replace(',', '')) * 4 if hint else max_chars
        return ModelResponse(parts=[TextPart(extractive_summary(prompt, max_chars=budget))])

    return FunctionModel(summarise, model_name='extractive-summariser')


_SIZE_HINT = re.compile(r'Stay within about ([\d,]+) tokens')
_CALL_LINE = re.compile(r'^assistant called (\S+) \[[^\]]*\]: (.*)$')


def extractive_summary(prompt: str, *, max_chars: int) -> str:
    """The extractive summary of a summariser prompt (see `extractive_summary_model`)."""
    from .policies.summariser import SUMMARY_SECTIONS

    lines = [line.strip() for line in prompt.splitlines() if line.strip()]
    previous = _section_lines(prompt)
    task = (
        previous.get(SUMMARY_SECTIONS[0])
        or [line.removeprefix('user: ') for line in lines if line.startswith('user: ')][:2]
        or [line for line in lines if not line.startswith('<')][:2]
    )
    paths = list(dict.fromkeys(reversed(paths_in(prompt))))
    errors = list(dict.fromkeys(reversed(error_lines(prompt))))
    commands = list(
        dict.fromkeys(
            f'{m.group(1)} {m.group(2)[:100]}' for line in reversed(lines) if (m := _CALL_LINE.match(line))
        )
    )
    said = [line.removeprefix('assistant: ') for line in lines if line.startswith('assistant: ')]
    state = said[-1][-300:] if said else ''.join(previous.get(SUMMARY_SECTIONS[4], []))[-300:]
    decisions = (
        ' / '.join(said[-3:-1])[-300:] if len(said) > 1 else ' / '.join(previous.get(SUMMARY_SECTIONS[3], []))
    )
    fixed = [
        f'{SUMMARY_SECTIONS[0]}: ' + ' / '.join(task)[:400],
        f'{SUMMARY_SECTIONS[3]}: {decisions}',
        f'{SUMMARY_SECTIONS[4]}: {state}',
    ]
    room = max(max_chars - sum(len(s) + 1 for s in fixed) - 120, 0)
    # Paths and error lines share the room (the facts); a few commands come with them.
    # One error line a line, verbatim, so the next update reads each back as it was. Errors take
    # up to 40% of the room, paths what is left of 90%, a few commands the rest.
    errs = _fit(errors, room * 4 // 10, '\n')
    files = _fit(paths, room * 9 // 10 - len(errs), ', ')
    cmds = _fit(commands[:8], room - len(files) - len(errs), ' | ')
    body = [
        fixed[0],
        f'{SUMMARY_SECTIONS[1]}: {files}',
        f'{SUMMARY_SECTIONS[2]}: {cmds}' + (f'\n{errs}' if errs else ''),
        fixed[1],
        fixed[2],
    ]
    return '\n'.join(body)


def _fit(items: Sequence[str], room: int, sep: str) -> str:
    """As many of `items` (in order) as fit in `room` characters, saying how many were left out."""
    kept: list[str] = []
    used = 0
    for item in items:
        if used + len(item) + len(sep) > room:
            break
        kept.append(item)
        used += len(item) + len(sep)
    text = sep.join(kept)
    left = len(items) - len(kept)
    return text + (f'{sep if sep == chr(10) else " "}(and {left} more)' if left else '')


def _section_lines(prompt: str) -> dict[str, list[str]]:
    """The sections of the previous summary quoted in the prompt, if any."""
    from .policies.summariser import SUMMARY_SECTIONS

    found: dict[str, list[str]] = {}
    start = prompt.find('<previous_summary>')
    end = prompt.find('</previous_summary>')
    if start < 0 or end < start:
        return found
    for line in prompt[start:end].splitlines():
        for name in SUMMARY_SECTIONS:
            if line.startswith(f'{name}: '):
                found[name] = [line.removeprefix(f'{name}: ')]
    return found
