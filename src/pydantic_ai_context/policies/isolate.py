"""`isolate_boundaries`: a finished run shows its prompt and answer, and only a record of its tool trace.

Once a run has answered, the steps that led to the answer matter less than the answer itself:
the next run needs to know what was done and found, not every byte every tool printed. But the
agent's own words (its thoughts, plans, decisions) are small and say why; they stay. The current
run is never touched (DESIGN.md invariant 6), and a run is only finished where it really ended
(`views.run_spans`: a change of run id, or without run ids a user prompt that does not continue
the task).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolReturnPart,
)

from pydantic_ai_context import _markers, _parts, _scope
from pydantic_ai_context._boundaries import (
    closes_run,
    group_texts,
    is_tool_content,
    request_group,
    starts_at,
)
from pydantic_ai_context._facts import call_summary, digest
from pydantic_ai_context._markers import OriginalsSink
from pydantic_ai_context._memo import ObjectMemo
from pydantic_ai_context._prefix import begins_with
from pydantic_ai_context.tokens import TokenCounter
from pydantic_ai_context.views import (
    CompileContext,
    RunSpan,
    current_run,
    merged_run_id,
    prompt_texts_before,
    run_spans,
)

from ._base import SyncPolicy, context_key, extend_or_resume
from ._frontier import counter_key, nominal_part_tokens
from .summarize._summary_block import ACK_KIND, KEPT_KIND
from .summarize._summary_block import MARKER_KIND as SUMMARY_KIND

__all__ = ('IsolateBoundaries', 'IsolateMode', 'isolate_boundaries')

IsolateMode = Literal['keep', 'mask', 'digest', 'drop']

MARKER_KIND: Final = 'isolated'

DIGEST_HEADER: Final = (
    '[Record kept by context management, not a new instruction: the steps taken while answering '
    "this request ({n} tool {calls}; their outputs are no longer shown): the assistant's own notes "
    'as written, and one line per tool call with its status and the facts of its result:'
)

NOTES_HEADER: Final = (
    "[Record kept by context management, not a new instruction: the assistant's own notes while "
    'answering this request, as written (its tool calls and their outputs are no longer shown):'
)

SHORTENED: Final = " [… {n} more characters: read_context('{ref}')]"
"""How a note shortened for room ends: the span's ref reads the whole step back."""

NOTE_HEAD_CHARS: Final = 240
"""What a shortened note keeps of its start."""

NOTES_SHARE: Final = 0.25
"""Over the soft threshold, collapsed runs' notes may take this share of the soft limit; beyond it,
the oldest runs' notes are shortened first (whole runs at a time, so the prefix changes rarely)."""

MASK_TEMPLATE: Final = '[output omitted: this turn is finished; {digest}]'

_SUMMARY_BLOCK: Final = frozenset({SUMMARY_KIND, KEPT_KIND, ACK_KIND})

# Request parts a collapsed step may hold: tool results and retry feedback. A step with anything
# else (a user or system prompt, an instruction change, a part this package does not know) is kept.
_TRACE_REQUEST_KINDS: Final = frozenset({'tool-return', 'retry-prompt', 'retry-feedback'})


@dataclass(kw_only=True)
class IsolateBoundaries(SyncPolicy):
    """Collapse the tool trace of finished runs, keeping their prompts, answers and the model's own words.

    A run is finished when a later run follows it (`views.run_spans`: with pydantic-ai run ids only
    a change of run id ends a run; without them a user prompt does, unless it continues the task:
    a reminder, a nudge, a repeated prompt). The current run is the one with `context.run_id`,
    else the last, and is never touched.

    When a finished run collapses. A finished run becomes a record when the budget needs the room
    (the log is over the soft threshold, or no budget is known) or when it ended long ago: once
    more than `keep_runs` runs have started after it. The `keep_runs` most recent finished runs
    (none by default) are only masked while there is room: their tool outputs become placeholders
    with the facts, all at once (one cache break per run), and their calls and notes stay.

    How it collapses. Its request with the user prompt (and system prompts) and its final text
    answer stay as they are; what lies between is handled by `mode`:

    - `'digest'` (default): the trace becomes one text record at the start of the final answer:
      per step, the assistant's own notes (its `TextPart`s, verbatim) and one line per tool call
      (tool name, identifying arguments, status, exit code, paths and error lines of its result).
      It is worded as a record, so it does not read as a new instruction.
    - `'mask'`: calls and notes stay; successful tool outputs become a placeholder with the facts.
    - `'drop'`: calls and outputs are removed; a record keeps the assistant's notes.
    - `'keep'`: nothing changes.

    The notes are shortened only when the budget needs room: over the soft threshold, when the
    collapsed runs' notes take more than `NOTES_SHARE` of the soft limit, the oldest runs' notes
    are cut to their first `NOTE_HEAD_CHARS` characters, each ending with how much was cut and the
    ref that reads the whole step back (`read_context`).

    Steps that carry more than tool machinery (pinned content, a user or system prompt, a
    framework part this package does not know) are kept whole in every mode; content a tool
    returned beside its result (`ToolReturn(content=...)`, recorded as a user prompt part) is tool
    machinery, and goes with its step. A run that ended on tool calls (an output tool such as
    `final_result`, or a deferred call left unresolved) collapses like one that ended on a text
    answer, its last response and the results that closed it kept as they are (the record goes
    into that response), so what is pending stays visible (invariant 5). A run that was
    interrupted in the middle of a step keeps its trace. A run whose final answer is pinned is masked rather than digested,
    so the pinned message stays verbatim. Collapsed answers carry a metadata marker, so compiling a
    view of the view changes nothing.

    Example:
        ```python
        from pydantic_ai.messages import (
            ModelRequest,
            ModelResponse,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
            UserPromptPart,
        )

        from pydantic_ai_context.policies.isolate import isolate_boundaries

        log = [
            ModelRequest(parts=[UserPromptPart('Which Python files are there?')]),
            ModelResponse(
                parts=[
                    TextPart('I will list the source tree first, then count the modules.'),
                    ToolCallPart('execute_bash', {'command': 'ls'}, tool_call_id='c1'),
                ]
            ),
            ModelRequest(parts=[ToolReturnPart('execute_bash', 'src/a.py\\nsrc/b.py', tool_call_id='c1')]),
            ModelResponse(parts=[TextPart('Two: a.py and b.py.')]),
            ModelRequest(parts=[UserPromptPart('Thanks. Now add a README.')]),
        ]
        view = isolate_boundaries()(log)
        assert len(view) == 3  # prompt, answer (with the record), the new prompt
        record = view[1].parts[0].content
        assert "execute_bash(command='ls') → ok" in record and 'src/a.py' in record
        assert 'I will list the source tree first, then count the modules.' in record
        assert view[1].parts[1].content == 'Two: a.py and b.py.'
        ```
    """

    name: str = 'isolate_boundaries'
    """The step's name in a profile's chain."""
    mode: IsolateMode = 'digest'
    """What a finished run's tool trace becomes: `'digest'`, `'mask'`, `'drop'` or `'keep'`."""
    keep_runs: int = 0
    """With a budget and the log under its soft threshold, the most recent finished runs that only
    have their tool outputs masked (calls and notes stay) instead of becoming records. Default 0:
    a run has ended long ago once the next one started (replay, held-out multi-turn chat at 128k:
    masking the last finished run instead of recording it costs 0.467 of `none` against 0.422)."""
    _memo: ObjectMemo[Any] = field(default_factory=ObjectMemo[Any], init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in ('keep', 'mask', 'digest', 'drop'):
            raise ValueError(f"mode must be 'keep', 'mask', 'digest' or 'drop', not {self.mode!r}")
        if not isinstance(self.keep_runs, int) or isinstance(self.keep_runs, bool) or self.keep_runs < 0:
            raise ValueError(f'keep_runs must be a non-negative int, not {self.keep_runs!r}')

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        if self.mode == 'keep' or not messages:
            return list(messages)
        # Only finished runs change, so while the new messages start no run (and the log does not
        # cross the soft threshold) the output for a longer log is the previous output plus them.
        # The full pass says whether crossing the threshold would change its output (finished runs
        # decided without pressure) and the log's tokens, which the tail then adds to.
        return extend_or_resume(
            self,
            messages,
            context_key(context),
            context,
            lambda: self._apply(messages, context),
            accept=lambda last, tail: (
                _continues_last_run(last.messages, tail) and not _crosses(last.extra, tail, context)
            ),
        )

    def _apply(
        self, messages: list[ModelMessage], context: CompileContext
    ) -> tuple[list[ModelMessage], _Pressure | None]:
        """The view, and (when finished runs were decided without pressure, so crossing the soft
        threshold would change it) the log's tokens."""
        current = current_run(messages, run_id=context.run_id)
        if current is None:
            return list(messages), None
        finished = [span for span in run_spans(messages) if span.start < current.start]
        if not finished:
            return list(messages), None
        tokens = _log_tokens(messages, context)
        pressed = _over_budget(tokens, context)
        seen = self._seen_runs(messages, context)
        # Runs the budget needs, or that ended long ago, become records; the others (recent, with
        # room to spare) only have their outputs masked, their calls and notes stay.
        due = {n for n in range(len(finished)) if pressed or len(finished) - n > self.keep_runs}
        short = 0
        if pressed:
            sizes = [seen.notes(self, messages, s, context) for n, s in enumerate(finished) if n in due]
            short = _shortened_runs(sizes, context)
        out: list[ModelMessage] = []
        position = 0
        n_runs = 0
        calls = 0
        for n, span in enumerate(finished):
            collapsed = seen.collapsed(
                self, messages, span, context, mode=self.mode if n in due else 'mask', shorten=n < short
            )
            if collapsed is None:
                continue
            out.extend(messages[position : span.start])
            out.extend(collapsed.messages)
            position = span.end
            n_runs += 1
            calls += collapsed.calls
        if n_runs == 0:
            return list(messages), None if pressed else _Pressure(tokens)
        out.extend(messages[position:])
        context.note(
            f'isolated {n_runs} finished run{"s" if n_runs != 1 else ""} '
            f'({self.mode}, {calls} tool call{"s" if calls != 1 else ""})',
            isolated_runs=n_runs,
            isolated_calls=calls,
            mode=self.mode,
        )
        return out, None if pressed else _Pressure(tokens)

    def _seen_runs(self, messages: list[ModelMessage], context: CompileContext) -> _SeenRuns:
        """What the previous full pass of this conversation decided per finished run, when
        `messages` begins with its input (so each of those runs is the same messages, at the same
        place); else a new record. Kept in the compile scope's generation, like `_last`."""
        kept = _scope.owner_cache(self, 'seen runs')
        key = counter_key(context.counter)
        seen = kept.get(None) if kept is not None else None
        if seen is None or seen.key != key or not begins_with(messages, seen.messages):
            seen = _SeenRuns(key, (), {})
        seen = _SeenRuns(key, tuple(messages), seen.values)
        if kept is not None:
            kept[None] = seen
        return seen

    def _collapsed(
        self, run: Sequence[ModelMessage], context: CompileContext, *, mode: IsolateMode, shorten: bool
    ) -> tuple[_Collapsed | None, list[_SinkCall]]:
        """`_collapse` of `run` and what it gave the read-back archive, remembered while its
        messages are the same objects: a new run starting collapses the finished ones again, and
        their records are the same (what they gave the archive is given again)."""

        def collapse() -> tuple[_Collapsed | None, list[_SinkCall]]:
            kept = _KeptOriginals(context.originals)
            return self._collapse(run, context.counter, kept, mode=mode, shorten=shorten), kept.calls

        found = self._per_run(run, ('collapse', mode, shorten, counter_key(context.counter)), collapse)
        if found is None:  # outside a compile
            return collapse()
        (collapsed, calls), hit = found
        if hit:
            _replay(calls, context.originals)
        return collapsed, calls

    def _notes_tokens(self, run: Sequence[ModelMessage], context: CompileContext) -> int:
        """The tokens of the assistant's notes in a run's trace (`_run_notes`), remembered as `_collapsed`."""

        def count() -> int:
            return sum(context.counter.count_text(t) for t in _run_notes(run))

        found = self._per_run(run, ('notes', counter_key(context.counter)), count)
        return count() if found is None else found[0]  # type: ignore[no-any-return]

    def _per_run(
        self, run: Sequence[ModelMessage], tag: tuple[Any, ...], compute: Any
    ) -> tuple[Any, bool] | None:
        """`compute()` for `run` and whether it was remembered: remembered under `tag` while its
        messages are the same objects within one generation of the compiling scope (no message
        was edited in place); `None` outside a compile."""
        generation = _scope.active_generation()
        if generation is None:
            return None
        key = (*tag, generation)
        found = self._memo.get(run[0], key)
        if found is not None and len(found[0]) == len(run) and all(map(operator.is_, found[0], run)):
            return found[1], True
        value = compute()
        self._memo.put(run[0], (tuple(run), value), key)
        return value, False

    def _collapse(
        self,
        run: Sequence[ModelMessage],
        counter: TokenCounter,
        originals: OriginalsSink | None,
        *,
        mode: IsolateMode,
        shorten: bool = False,
    ) -> _Collapsed | None:
        """The run with its trace collapsed, or None when it has nothing to collapse."""
        head_end = next((i for i, m in enumerate(run) if _parts.has_user_prompt(m)), None)
        end = _answer_at(run)
        if head_end is None or end is None or end <= head_end + 1:
            return None
        answer, after = run[end], list(run[end + 1 :])
        if any((_parts.marker(m) or {}).get('kind') in _SUMMARY_BLOCK for m in run):
            # A summary block of a compiled view (summary, acknowledgement, kept steps) is no run
            # of its own: what it kept stays, or a view of the view would differ from the view.
            return None
        assert isinstance(answer, ModelResponse)
        if any(_isolated(m) for m in run):
            # Already collapsed or masked here (a view of a view, or a log a 1.x run rewrote): what
            # was decided stays, so compiling a view again changes nothing.
            return None
        trace = list(run[head_end + 1 : end])
        if mode == 'digest' and _parts.message_pinned(answer):
            mode = 'mask'
        kept, collapsed = _split_steps(trace)
        if mode == 'mask':
            masked, n = _mask(trace, kept, counter, originals)
            if n == 0:
                return None
            return _Collapsed([*run[: head_end + 1], *masked, answer, *after], n)
        if not collapsed:
            return None
        n_calls = sum(len(_parts.tool_calls(m)) for step in collapsed for m in step)
        body = [m for step in kept for m in step]
        span = [m for step in collapsed for m in step]
        ref = _markers.span_ref(span)
        text = _record_text(span, ref, calls=mode == 'digest', shorten=shorten)
        if text is None:  # 'drop' with no notes to keep
            return _Collapsed([*run[: head_end + 1], *body, answer, *after], n_calls)
        _markers.keep_span(originals, ref, span)
        new_answer = dataclasses.replace(
            answer,
            parts=_insert_after_thinking(answer.parts, TextPart(_markers.with_ref(text, ref))),
            metadata=_parts.with_marker(
                answer.metadata,
                {
                    'kind': MARKER_KIND,
                    'mode': mode,
                    'calls': n_calls,
                    'ref': ref,
                    **({'shortened': True} if shorten else {}),
                },
            ),
        )
        return _Collapsed([*run[: head_end + 1], *body, new_answer, *after], n_calls)


@dataclass
class _Pressure:
    """The tokens of the log a view was decided on, without pressure: the tail adds to them."""

    tokens: int


def _log_tokens(messages: Sequence[ModelMessage], context: CompileContext) -> int:
    # Message by message, so that the tokens of a longer log are these plus the tail's; during a
    # compile, a running total resumed from the previous log's.
    counter = context.counter
    return _scope.resumed_fold(
        ('isolate.tokens', counter_key(counter)), messages, lambda: _Tokens(counter), _Tokens.read
    )


class _Tokens:
    """The tokens of each prefix of a log, as a fold."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.messages: list[ModelMessage] = []
        self.totals: list[int] = [0]

    def read(self) -> int:
        return self.totals[-1]

    def truncate(self, n: int) -> None:
        del self.messages[n:], self.totals[n + 1 :]

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        total = self.totals[-1]
        for message in messages[len(self.messages) :]:
            total += self.counter.count_message(message)
            self.messages.append(message)
            self.totals.append(total)


def _over_budget(tokens: int, context: CompileContext) -> bool:
    """Whether the budget needs the room: no budget known, or the log over its soft threshold."""
    return context.budget is None or tokens > context.budget.soft_limit


def _crosses(pressure: Any, tail: Sequence[ModelMessage], context: CompileContext) -> bool:
    """Whether the tail takes a log decided without pressure over the soft threshold (it adds the
    tail's tokens to the record, which the extended call keeps)."""
    if not isinstance(pressure, _Pressure):
        return False
    pressure.tokens += _log_tokens(tail, context)
    return _over_budget(pressure.tokens, context)


@dataclass
class _Collapsed:
    messages: list[ModelMessage]
    calls: int


@dataclass
class _SeenRuns:
    """Per finished run (by its span) of a full pass: its notes' tokens and what it collapsed to.

    A full pass runs whenever a run starts (a new user prompt), and a chat of many runs has
    thousands of finished ones: looking each up in the per-run memo (which checks its messages
    one by one) cost more than the rest of the pass. A log that begins with the previous pass's
    input (of the same conversation, in the same compile generation) holds the same runs at the
    same places.
    """

    key: Any
    messages: tuple[ModelMessage, ...]
    values: dict[tuple[Any, ...], Any]

    def notes(
        self, policy: IsolateBoundaries, messages: list[ModelMessage], span: RunSpan, context: CompileContext
    ) -> int:
        key = ('notes', span.start, span.end)
        found = self.values.get(key)
        if found is None:
            found = self.values[key] = policy._notes_tokens(messages[span.start : span.end], context)
        return found  # type: ignore[no-any-return]

    def collapsed(
        self,
        policy: IsolateBoundaries,
        messages: list[ModelMessage],
        span: RunSpan,
        context: CompileContext,
        *,
        mode: IsolateMode,
        shorten: bool,
    ) -> _Collapsed | None:
        key = ('collapse', span.start, span.end, mode, shorten)
        found = self.values.get(key)
        if found is not None:
            collapsed, calls = found
            _replay(calls, context.originals)  # as a hit of `_collapsed` gives them again
            return collapsed  # type: ignore[no-any-return]
        found = self.values[key] = policy._collapsed(
            messages[span.start : span.end], context, mode=mode, shorten=shorten
        )
        return found[0]


def isolate_boundaries(**settings: Any) -> IsolateBoundaries:
    """Collapse finished runs to prompt + answer + a record of their steps; see `IsolateBoundaries`.

    Example:
        ```python
        from pydantic_ai_context.policies.isolate import isolate_boundaries

        policy = isolate_boundaries(mode='drop')
        assert policy.name == 'isolate_boundaries' and policy.mode == 'drop'
        ```
    """
    return IsolateBoundaries(**settings)


def _continues_last_run(log: Sequence[ModelMessage], tail: Sequence[ModelMessage]) -> bool:
    """`tail` adds to the last run of `log` without starting another (so `run_spans` agrees)."""
    # During a compile read from a fold resumed from the previous log's (`log` is the previous
    # input: a run's log grows by a few messages a request).
    requests, unmarked, current = _scope.resumed_fold('isolate.run_ids', log, _RunIds, _RunIds.read)
    if not requests:
        return False
    if isinstance(log[-1], ModelRequest) and tail and isinstance(tail[0], ModelRequest):
        return False  # the log's last requests are read with the new ones (`starts_at`): re-read
    joined = [log[-1], *tail]
    if not unmarked:
        for j, message in enumerate(tail):
            rid = merged_run_id(joined, j + 1)
            if isinstance(message, ModelRequest) and isinstance(joined[j], ModelRequest):
                continue  # sent with the request before
            if isinstance(message, ModelRequest) and not rid:
                return False  # run ids would no longer mark every run
            if rid is not None and rid != current:
                return False
        return True
    earlier: set[str] | None = None
    for j in range(len(tail)):
        if not any(_parts.has_user_prompt(m) for m in request_group(joined, j + 1)):
            continue
        if earlier is None:  # only a prompt in the tail needs the earlier prompts
            earlier = set(prompt_texts_before(log))
            earlier.update(t for i in range(1, j + 1) for t in group_texts(joined, i))
        if starts_at(joined, j + 1, earlier):
            return False
        earlier.update(group_texts(joined, j + 1))
    return True


class _RunIds:
    """What `_continues_last_run` reads of the log, as a fold: per prefix, its requests, those of
    them without a run id, and the newest run id."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.requests: list[int] = [0]
        self.unmarked: list[int] = [0]
        self.current: list[str | None] = [None]

    def read(self) -> tuple[int, int, str | None]:
        return self.requests[-1], self.unmarked[-1], self.current[-1]

    def truncate(self, n: int) -> None:
        del self.messages[n:], self.requests[n + 1 :], self.unmarked[n + 1 :], self.current[n + 1 :]

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        # The run id of the first of consecutive requests depends on those after it
        # (`merged_run_id`): the trailing requests read so far are read again.
        group = len(self.messages)
        while group and isinstance(self.messages[group - 1], ModelRequest):
            group -= 1
        if group < len(self.messages):
            self.truncate(group)
        requests, unmarked, current = self.requests[-1], self.unmarked[-1], self.current[-1]
        for i in range(len(self.messages), len(messages)):
            message = messages[i]
            rid = merged_run_id(messages, i)
            if isinstance(message, ModelRequest) and not (i and isinstance(messages[i - 1], ModelRequest)):
                requests += 1
                unmarked += not rid
            if rid:
                current = rid
            self.messages.append(message)
            self.requests.append(requests)
            self.unmarked.append(unmarked)
            self.current.append(current)


def _isolated(message: ModelMessage) -> bool:
    """The message, or one of its parts, carries this policy's marker."""
    if (_parts.marker(message) or {}).get('kind') == MARKER_KIND:
        return True
    return any((_parts.marker(p) or {}).get('kind') == MARKER_KIND for p in message.parts)


def _run_notes(run: Sequence[ModelMessage]) -> list[str]:
    """The assistant's notes in a run's trace (not its final answer): what a record would quote."""
    end = _answer_at(run)
    return [
        p.content
        for m in run[: end if end is not None else len(run) - 1]
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, TextPart) and p.content.strip()
    ]


def _shortened_runs(sizes: list[int], context: CompileContext) -> int:
    """How many of the oldest collapsed runs get their notes (of `sizes` tokens each) shortened so
    the rest fit the room."""
    budget = context.budget
    if budget is None:
        return 0
    room = NOTES_SHARE * budget.soft_limit
    total = sum(sizes)
    n = 0
    while n < len(sizes) and total > room:
        total -= sizes[n]
        n += 1
    return n


_SinkCall = tuple[str, str, Any, bool]
"""One call a collapse made of the read-back sink: its kind, ref, value, and `replace`."""


class _KeptOriginals:
    """An originals sink that passes what it is given on, and remembers it to give it again."""

    def __init__(self, sink: OriginalsSink | None) -> None:
        self.sink = sink
        self.calls: list[_SinkCall] = []

    def keep_result(self, ref: str, part: Any) -> None:
        self.calls.append(('result', ref, part, False))
        if self.sink is not None:
            self.sink.keep_result(ref, part)

    def keep_span(self, ref: str, items: Sequence[ModelMessage | str], *, replace: bool = False) -> None:
        self.calls.append(('span', ref, items, replace))
        if self.sink is not None:
            self.sink.keep_span(ref, items, replace=replace)


def _replay(calls: Sequence[_SinkCall], sink: OriginalsSink | None) -> None:
    if sink is None:
        return
    for kind, ref, value, replace in calls:
        if kind == 'result':
            sink.keep_result(ref, value)
        else:
            sink.keep_span(ref, value, replace=replace)


def _is_final_answer(message: ModelMessage | None) -> bool:
    return (
        isinstance(message, ModelResponse)
        and _parts.final_text(message) is not None
        and not _parts.tool_calls(message)
    )


def _answer_at(run: Sequence[ModelMessage]) -> int | None:
    """Where a finished run's answer is: its last message when that is a text answer; else its last
    response when the run ended on tool calls that no later step of it answered (an output tool's
    call with its return, a deferred call left unresolved): that step stays as it is, so whatever is
    still pending stays visible (invariant 5). None for a run that ended otherwise."""
    if not run:
        return None
    if _is_final_answer(run[-1]):
        return len(run) - 1
    end = len(run) - 1
    while end >= 0 and isinstance(run[end], ModelRequest):
        end -= 1
    if end < 0 or not _parts.tool_calls(run[end]):
        return None
    # What follows the last response holds only the results that closed its calls (or none yet).
    for message in run[end + 1 :]:
        if _parts.has_user_prompt(message) or not all(closes_run(p) for p in _parts.tool_results(message)):
            return None
    return end


def _split_steps(trace: list[ModelMessage]) -> tuple[list[list[ModelMessage]], list[list[ModelMessage]]]:
    """Group the trace into steps (a response and the requests after it); split kept from collapsible.

    Steps are kept in their order; a kept step is whole, so no call loses its result.
    """
    steps: list[list[ModelMessage]] = []
    for message in trace:
        if isinstance(message, ModelResponse) or not steps:
            steps.append([message])
        else:
            steps[-1].append(message)
    kept = [s for s in steps if _must_keep(s)]
    collapsed = [s for s in steps if not _must_keep(s)]
    return kept, collapsed


def _must_keep(step: list[ModelMessage]) -> bool:
    for message in step:
        if _parts.message_pinned(message):
            return True
        if isinstance(message, ModelRequest) and any(
            getattr(p, 'part_kind', None) not in _TRACE_REQUEST_KINDS and not is_tool_content(p, message)
            for p in message.parts
        ):
            return True
    # A step that does not start with a response (a malformed trace) is left for normalize.
    return not isinstance(step[0], ModelResponse)


def _mask(
    trace: list[ModelMessage],
    kept: list[list[ModelMessage]],
    counter: TokenCounter,
    originals: OriginalsSink | None,
) -> tuple[list[ModelMessage], int]:
    keep_ids = {id(m) for step in kept for m in step}
    calls = {c.tool_call_id: c for m in trace for c in _parts.tool_calls(m)}
    out: list[ModelMessage] = []
    n = 0
    for message in trace:
        if id(message) in keep_ids or not isinstance(message, ModelRequest):
            out.append(message)
            continue
        parts: list[Any] = []
        changed = False
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and _maskable(part):
                text = MASK_TEMPLATE.format(digest=digest(calls.get(part.tool_call_id), part))
                # The original size goes into the marker: the frontier reads sizes from markers, so
                # it lands in the same place on this view as on the log.
                record = {'kind': MARKER_KIND, 'mode': 'mask', 'tokens': nominal_part_tokens(part, counter)}
                part = _markers.mark_result(part, text, record, originals)
                changed = True
                n += 1
            parts.append(part)
        if changed:
            # What the tools returned beside their results (`ToolReturn` content) goes with them.
            parts = [p for p in parts if not is_tool_content(p, message)]
        out.append(dataclasses.replace(message, parts=parts) if changed else message)
    return out, n


def _maskable(part: ToolReturnPart) -> bool:
    # Failed results stay: they are short, and they are what the answer was up against. Typed
    # subclasses (2.x tool-search returns) declare a content shape a placeholder would break.
    return (
        type(part) is ToolReturnPart
        and not _parts.is_failed_result(part)
        and not _parts.is_pinned(part)
        and _parts.marker(part) is None
        and not _markers.is_readback(part)
    )


def _record_text(trace: list[ModelMessage], ref: str, *, calls: bool, shorten: bool) -> str | None:
    """The record of a collapsed trace: per step the assistant's notes, then (with `calls`) one line
    per tool call. None when there is nothing to record (no calls asked for, no notes)."""
    lines: list[str] = []
    n = 0
    results: dict[str, Any] = {}
    if calls:
        for message in trace:
            for result in _parts.tool_results(message):
                results.setdefault(result.tool_call_id, result)
    for message in trace:
        if isinstance(message, ModelResponse):
            lines.extend(
                _note(p.content, ref, shorten=shorten)
                for p in message.parts
                if isinstance(p, TextPart) and p.content.strip()
            )
        if not calls:
            continue
        for call in _parts.tool_calls(message):
            result = results.get(call.tool_call_id)
            if result is None:
                lines.append(f'- {call_summary(call)} → no result recorded')
            else:
                lines.append(f'- {digest(call, result)}')
            n += 1
        if isinstance(message, ModelRequest):
            for part in message.parts:
                # Retry feedback that answers no call (output validation) is worth one line too.
                if isinstance(part, RetryPromptPart) and part.tool_name is None:
                    lines.append('- (the answer was retried after validation feedback)')
    if not calls and not lines:
        return None
    header = DIGEST_HEADER.format(n=n, calls='call' if n == 1 else 'calls') if calls else NOTES_HEADER
    return '\n'.join([header, *lines]) + ']'


def _note(text: str, ref: str, *, shorten: bool) -> str:
    """A note as written, or (for room) its start and how much of it the ref reads back."""
    if not shorten or len(text) <= NOTE_HEAD_CHARS + len(SHORTENED):
        return text
    return text[:NOTE_HEAD_CHARS] + SHORTENED.format(n=len(text) - NOTE_HEAD_CHARS, ref=ref)


def _insert_after_thinking(parts: Sequence[Any], record: TextPart) -> list[Any]:
    # Providers expect reasoning first in an assistant turn; the record goes right before the answer.
    i = 0
    while i < len(parts) and isinstance(parts[i], ThinkingPart):
        i += 1
    return [*parts[:i], record, *parts[i:]]
