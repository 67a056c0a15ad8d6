"""What `fit_to_budget` keeps from one compile to the next, so that a drop resumes rather than re-plans.

`_Reading` is what it read of each message of its input (tokens, kind, running observation
counts, step refs, the spans already kept for read-back, the previous plan); the next compile of
the same conversation reads only the messages from the first one that changed. `_Plan` cuts the
view into a kept head and droppable steps, in the order to drop them, reusing what the previous
plan found before the first changed message, and builds the view with a chunk of them dropped.
`_Dropped` is what the policy remembers of its last drop (with `LastCall`), to tell whether the
next view extends it. The decisions (which target, when to resume, clamp or degrade) stay in
`fit.py`.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from pydantic_ai_context import _markers, _parts
from pydantic_ai_context._boundaries import first_prompt_at, is_tool_content
from pydantic_ai_context._memo import PINNED_FIELDS, ObjectMemo
from pydantic_ai_context._prefix import first_difference
from pydantic_ai_context._scope import active_generation
from pydantic_ai_context.integrity import safe_cut_points
from pydantic_ai_context.tokens import TokenCounter, message_tokens

from ._fit_note import _with_note, drop_record
from ._frontier import counter_key

__all__ = (
    '_CONVERSATION',
    '_KINDS',
    '_KIND_CODES',
    '_NEVER',
    '_STEP',
    '_STEP_REQUEST_KINDS',
    '_Dropped',
    '_Plan',
    '_Reading',
    '_unit_kind',
)

# Request parts of an ordinary agent step: tool results and retry feedback (and content a tool
# returned beside its result). A step holding anything else (a later user prompt, an instruction
# change...) is part of the conversation: dropped last.
_STEP_REQUEST_KINDS: Final = frozenset({'tool-return', 'retry-prompt', 'retry-feedback'})


@dataclass(frozen=True, slots=True)
class _Dropped:
    """What `FitToBudget` remembers of its last drop, to tell whether the next view extends it."""

    target: int
    extendable: bool
    """The drop reached its target with plain tool steps (new steps join the order after them)."""
    first_stop: bool
    """The last step dropped was the first to reach the target (none was added for the note's room)."""
    end: int
    """Where the last dropped step ended in the input."""
    cuts: list[int]
    """The input's safe cut points up to `end`: the steps before it."""
    note: tuple[str, list[str]] | None = None
    """The note's read-back span as this drop wrote it: its ref and the steps' refs."""


@dataclass
class _Plan:
    """The view cut into a kept head, droppable steps (`units`) and the order to drop them in."""

    messages: Sequence[ModelMessage]
    head_end: int
    """`messages[:head_end]` is the framing, always kept."""
    units: list[tuple[int, int]]
    """(start, end) of each step after the head; a step starts at a response at a safe cut point."""
    order: list[int]
    """Indices into `units`, in the order they may be dropped; units not listed are never dropped."""
    protected: int
    """How many units at the end form the recency window."""
    dropped_refs: list[str] = field(default_factory=list[str])
    """The span ref of each step the latest `build` dropped, in order (each kept for read-back once)."""
    dropped_units: list[tuple[int, int]] = field(default_factory=list[tuple[int, int]])
    """Their (start, end) in `messages`."""
    note_span: tuple[str, list[str]] | None = None
    """The note's read-back span as the latest `build` wrote it: its ref and the steps' refs."""
    reading: _Reading | None = None
    kinds: list[int] = field(default_factory=list)
    """The kind of each unit (`_STEP`, `_CONVERSATION`, `_NEVER`)."""
    prompt_at: int | None = None
    """Where the current run's prompt is, when its step is one of `units` (not in the head)."""
    cuts: list[int] = field(default_factory=list[int])
    """The safe cut points of `messages`."""

    def prompt(self) -> ModelMessage | None:
        """The request holding the current run's prompt, when it is outside the head."""
        return self.messages[self.prompt_at] if self.prompt_at is not None else None

    @classmethod
    def of(
        cls,
        messages: Sequence[ModelMessage],
        *,
        keep_last_steps: int,
        reading: _Reading,
        prompt_at: int | None = None,
    ) -> _Plan:
        """The plan of `messages`. `prompt_at`: where the current run's prompt is (the task at hand):
        the step holding it is never dropped, like the head."""
        first_prompt = first_prompt_at(messages)
        if first_prompt is None:
            first_prompt = next((i for i, m in enumerate(messages) if isinstance(m, ModelRequest)), 0)
        head_end = first_prompt + 1
        responses = reading.responses
        n = len(messages)
        cuts = safe_cut_points(messages)
        kinds = reading.kinds
        # What the previous plan found before the first message that changed is reused when the
        # safe cut points there are the same (see `_Reading.plan`): a plan costs the new steps.
        reused = reading.reusable_plan(head_end, cuts)
        if reused is None:
            starts = [i for i in cuts if head_end <= i < n and responses[i]]
            closed = 0
            old = _PlanState(head_end, cuts, [], [], [], [], [], [], 0, None)
        else:
            valid, old = reused
            kept = bisect.bisect_left(old.starts, valid)
            starts = old.starts[:kept]
            starts += [i for i in cuts[bisect.bisect_left(cuts, valid) :] if i < n and responses[i]]
            # Units whose both ends lie before `valid` have the same messages, so the same kind
            # and the same span ref.
            closed = max(kept - 1, 0)
        units = old.units[:closed]
        if starts:
            units += zip(starts[closed:], [*starts[closed + 1 :], n], strict=True)
            # Messages between the head and the first step (only in a malformed view) stay with the head.
            head_end = starts[0]
        kinds_read = old.kinds[:closed]
        kinds_read += [max(kinds[start:end]) for start, end in units[closed:]]
        refs = old.refs[:closed]
        refs += map(reading.refs.get, units[closed:])
        unit_kinds = kinds_read
        prompt_unit: int | None = None
        if prompt_at is not None and units and prompt_at >= units[0][0]:
            # The current run's prompt is task framing (DESIGN.md invariant 1): its step stays.
            prompt_unit = bisect.bisect_right(starts, prompt_at) - 1
            unit_kinds = list(kinds_read)
            unit_kinds[prompt_unit] = _NEVER
        limit = max(len(units) - keep_last_steps, 0)
        # The previous lists hold the units below its own limit only, and are those of the kinds
        # read below the previous and the current prompt's step (a log whose every observation is
        # a prompt moves it at every request).
        same = min(closed, limit, old.limit, *(u for u in (old.prompt_unit, prompt_unit) if u is not None))
        steps = old.steps[: bisect.bisect_left(old.steps, same)]
        steps += [u for u in range(same, limit) if unit_kinds[u] == _STEP]
        conversation = old.conversation[: bisect.bisect_left(old.conversation, same)]
        conversation += [u for u in range(same, limit) if unit_kinds[u] == _CONVERSATION]
        reading.plan = _PlanState(
            first_prompt + 1, cuts, starts, units, kinds_read, refs, steps, conversation, limit, prompt_unit
        )
        reading.plan_valid = n
        return cls(
            messages,
            head_end,
            units,
            steps + conversation,
            min(keep_last_steps, len(units)),
            reading=reading,
            kinds=unit_kinds,
            prompt_at=prompt_at if prompt_at is not None and units and prompt_at >= units[0][0] else None,
            cuts=cuts,
        )

    def sizes(self) -> list[int]:
        """The tokens of each unit."""
        assert self.reading is not None
        acc = [0, *itertools.accumulate(self.reading.tokens)]
        units = self.units
        return list(
            map(
                operator.sub,
                map(acc.__getitem__, map(_SECOND, units)),
                map(acc.__getitem__, map(_FIRST, units)),
            )
        )

    def reaching(self, target: int, sizes: list[int]) -> tuple[set[int], int, int]:
        """The shortest prefix of the order that frees `target` tokens (all of it if none does):
        its units, the tokens they free and its length. Found in C: a long log may drop most of
        its steps at every request."""
        order = self.order
        if target <= 0 or not order:
            return set(), 0, 0
        freed_by = list(itertools.accumulate(map(sizes.__getitem__, order)))
        first = min(bisect.bisect_left(freed_by, target) + 1, len(order))
        return set(order[:first]), freed_by[first - 1], first

    def messages_in(self, units: Iterable[int]) -> int:
        """How many messages `units` hold."""
        spans = list(map(self.units.__getitem__, units))
        return int(sum(map(_SECOND, spans)) - sum(map(_FIRST, spans)))

    def build(self, dropped: set[int], sizes: list[int]) -> list[ModelMessage]:
        if not dropped:
            return list(self.messages)
        reading = self.reading
        assert reading is not None
        assert reading.plan is not None
        messages, units = self.messages, self.units
        # Most of a long log's steps may be dropped: what is summed or listed per dropped step is
        # done in C (`map`), and only the kept runs are walked here.
        gone = sorted(dropped)
        out: list[ModelMessage] = list(messages[: units[gone[0]][0]])
        note_at = len(out) - 1
        run_start: int | None = None
        for u in sorted(set(range(gone[0] + 1, len(units))).difference(dropped)):
            if run_start is None:
                run_start = previous = u
            elif u != previous + 1:
                out.extend(messages[units[run_start][0] : units[previous][1]])
                run_start = u
            previous = u
        if run_start is not None:
            out.extend(messages[units[run_start][0] : units[previous][1]])
        gone_units = list(map(units.__getitem__, gone))
        starts = list(map(_FIRST, gone_units))
        ends = list(map(_SECOND, gone_units))
        observations = reading.observations
        n = sum(ends) - sum(starts)
        tokens = sum(map(sizes.__getitem__, gone))
        count = sum(map(observations.__getitem__, ends)) - sum(map(observations.__getitem__, starts))
        unit_refs = reading.plan.refs
        found = list(map(unit_refs.__getitem__, gone))
        if None in found:
            i = found.index(None)
            while True:
                start, end = gone_units[i]
                found[i] = unit_refs[gone[i]] = reading.refs[(start, end)] = _markers.span_ref(
                    messages[start:end]
                )
                try:
                    i = found.index(None, i + 1)
                except ValueError:
                    break
        refs = cast(list[str], found)  # every one found now
        made: list[tuple[ModelMessage, dict[str, Any], ModelMessage]] = []
        view, self.note_span = _with_note(
            out,
            note_at,
            n,
            tokens,
            count,
            refs,
            notes=reading.notes,
            noted=reading.noted,
            notes_out=made,
        )
        self.dropped_refs, self.dropped_units = refs, gone_units
        if made:
            reading.noted = made[-1]
        return view

    def explain_degraded(self, view: list[ModelMessage], counter: TokenCounter, limit: int) -> str:
        """Why the view does not fit even with the recency window trimmed and the newest result clamped."""
        head = sum(message_tokens(counter, m) for m in view[: self.head_end])
        length = self.units[-1][1] - self.units[-1][0] if self.units else 1
        newest = sum(message_tokens(counter, m) for m in view[len(view) - length :])
        if head > limit:
            return (
                f'the task framing alone is {head:,} tokens (messages 0-{self.head_end - 1}), '
                f'more than the limit of {limit:,}'
            )
        if head + newest > limit:
            return (
                f'the task framing ({head:,} tokens) and the newest step, its results clamped '
                f'({newest:,} tokens), do not fit the limit of {limit:,} together'
            )
        rest = counter.count_messages(view) - head - newest
        return (
            f'the task framing ({head:,} tokens), the newest step ({newest:,} tokens) and the steps '
            f'that must stay (pinned or system prompts, the recency window, trimmed: {rest:,} tokens) '
            f'do not fit the limit of {limit:,}'
        )

    def explain(self, view: list[ModelMessage], dropped: set[int], counter: TokenCounter, limit: int) -> str:
        """Why the smallest view does not fit: what it still holds, and any message too large on its own."""
        newest = len(self.messages) - 1
        newest_tokens = message_tokens(counter, self.messages[newest])
        if newest_tokens > limit:
            kind = 'request' if isinstance(self.messages[newest], ModelRequest) else 'message'
            return (
                f'the newest {kind} alone is {newest_tokens:,} tokens (message {newest}), '
                f'more than the limit of {limit:,}'
            )
        head = sum(message_tokens(counter, m) for m in self.messages[: self.head_end])
        recent_units = self.units[len(self.units) - self.protected :]
        recent = sum(message_tokens(counter, m) for s, e in recent_units for m in self.messages[s:e])
        detail = (
            f'after dropping {len(dropped)} of {len(self.units)} steps, the view still holds the task framing '
            f'({head:,} tokens), the last {self.protected} steps ({recent:,} tokens) and '
            f'{len(self.units) - self.protected - len(dropped)} steps that must stay (pinned or system prompts)'
        )
        largest = max(range(len(self.messages)), key=lambda i: message_tokens(counter, self.messages[i]))
        largest_tokens = message_tokens(counter, self.messages[largest])
        if largest_tokens > limit:
            detail += f'; message {largest} alone is {largest_tokens:,} tokens'
        return detail


_KINDS: ObjectMemo[str] = ObjectMemo(max_bytes=16 * 1024 * 1024, fields=PINNED_FIELDS)
"""The kind of each message seen (as a one-message unit), while it lives unchanged."""

_STEP: Final = 0
_CONVERSATION: Final = 1
_NEVER: Final = 2
_KIND_CODES: Final = {'step': _STEP, 'conversation': _CONVERSATION, 'never': _NEVER}


@dataclass(eq=False)
class _Reading:
    """What `fit_to_budget` reads of each message of its input, kept from one compile to the next.

    Per message: its tokens, its kind, whether it is a response, and running counts of observations
    (tool-result requests); per step: its span ref, and which step spans the read-back sink already
    holds. The next compile of the same conversation (same generation of the compiling scope: no
    message edited in place since) reads only the messages from the first one that changed, so a
    plan costs the new messages plus a few passes over plain lists, never a token count or a digest
    per old message.
    """

    messages: tuple[ModelMessage, ...]
    generation: int | None
    counter: Hashable
    tokens: list[int]
    """`message_tokens` of each message."""
    kinds: list[int]
    """`_STEP`, `_CONVERSATION` or `_NEVER` of each message as a one-message unit."""
    responses: list[bool]
    observations: list[int]
    """Observations before each message, and of all (one longer than `messages`)."""
    notes: bool
    """Some message carries a drop note's record (a view of a view)."""
    refs: dict[tuple[int, int], str] = field(default_factory=dict[tuple[int, int], str])
    """Span ref of each step a drop has needed, by its (start, end) in `messages`."""
    sink: Any = None
    """The read-back sink `kept` refers to."""
    kept: set[str] = field(default_factory=set[str])
    """Refs of the step spans kept in `sink`, and of the note span as last written."""
    note_span: tuple[str, list[str]] | None = None
    noted: tuple[ModelMessage, dict[str, Any], ModelMessage] | None = None
    """The request the latest note went into, the note's record, and the request with the note."""
    plan: _PlanState | None = None
    """What the latest `_Plan.of` found."""
    plan_valid: int = 0
    """`plan` holds for `messages[:plan_valid]`: the messages it was made for that no later reading
    found changed (0: no plan)."""

    @classmethod
    def of(
        cls, messages: Sequence[ModelMessage], counter: TokenCounter, previous: _Reading | None
    ) -> _Reading:
        generation = active_generation()
        key = counter_key(counter)
        same = 0
        if previous is not None and generation is not None and previous.generation == generation:
            same = first_difference(previous.messages, messages)
        if previous is None or same == 0:
            reading = cls((), generation, key, [], [], [], [0], False)
        else:
            reading = cls(
                previous.messages[:same],
                generation,
                key,
                previous.tokens[:same] if previous.counter == key else [],
                previous.kinds[:same],
                previous.responses[:same],
                previous.observations[: same + 1],
                previous.notes and any(map(drop_record, previous.messages[:same])),
                previous.refs
                if same == len(previous.messages)
                else {k: v for k, v in previous.refs.items() if k[1] <= same},
                previous.sink,
                previous.kept,
                previous.note_span,
                previous.noted,
                previous.plan,
                min(previous.plan_valid, same),
            )
        reading._read(messages, counter)
        return reading

    def _read(self, messages: Sequence[ModelMessage], counter: TokenCounter) -> None:
        start = len(self.messages)
        tokens, kinds, responses, observations = self.tokens, self.kinds, self.responses, self.observations
        for message in messages[len(tokens) : start]:
            tokens.append(message_tokens(counter, message))
        count = observations[-1]
        notes = self.notes
        for message in messages[start:]:
            tokens.append(message_tokens(counter, message))
            found = _KINDS.get(message)
            if found is None:
                found = _KINDS.put(message, _unit_kind((message,)))
            kinds.append(_KIND_CODES[found])
            is_response = isinstance(message, ModelResponse)
            responses.append(is_response)
            if not is_response and _parts.tool_results(message):
                count += 1
            observations.append(count)
            notes = notes or drop_record(message) is not None
        self.messages = tuple(messages)
        self.notes = notes

    def reusable_plan(self, head_end: int, cuts: list[int]) -> tuple[int, _PlanState] | None:
        """The previous plan, and the first message that changed since (`valid`), when what it
        found before `valid` holds for `cuts` too: the same head, and the same safe cut points
        before `valid` (a new result may answer an old call)."""
        plan, valid = self.plan, self.plan_valid
        if plan is None or plan.head_from != head_end or valid <= head_end:
            return None
        old_cuts = plan.cuts
        below = bisect.bisect_left(cuts, valid)
        if below != bisect.bisect_left(old_cuts, valid) or cuts[:below] != old_cuts[:below]:
            return None
        return valid, plan

    def keep_spans(
        self,
        refs: Sequence[str],
        units: Sequence[tuple[int, int]],
        note: tuple[str, list[str]] | None,
        sink: _markers.OriginalsSink | None,
        messages: Sequence[ModelMessage],
    ) -> None:
        """Keep the dropped steps' spans (`refs`, their `units` in `messages`) in `sink`, each once
        (a span's ref names its messages), then the note's span (again only when its list of steps
        changed)."""
        if sink is None:
            return
        if sink != self.sink:
            self.sink, self.kept, self.note_span = sink, set(), None
        kept = self.kept
        if not kept.issuperset(refs):
            for ref, (start, end) in zip(refs, units, strict=True):
                if ref not in kept:
                    sink.keep_span(ref, list(messages[start:end]), replace=False)
                    kept.add(ref)
        if note is not None:
            ref, items = note
            if self.note_span is None or self.note_span[0] != ref or self.note_span[1] != items:
                sink.keep_span(ref, list[ModelMessage | str](items), replace=True)
                self.note_span = (ref, list(items))


@dataclass(slots=True)
class _PlanState:
    """What the latest `_Plan.of` found, for the next one to reuse before the first changed message."""

    head_from: int
    """The head's end it started from."""
    cuts: list[int]
    """The safe cut points."""
    starts: list[int]
    """Where each unit starts."""
    units: list[tuple[int, int]]
    kinds: list[int]
    """The kind of each unit as read (the current prompt's step is `_NEVER` in the plan only)."""
    refs: list[str | None]
    """Each unit's span ref, once a drop has needed it."""
    steps: list[int]
    """The droppable plain steps, in order."""
    conversation: list[int]
    """The droppable conversation units, in order."""
    limit: int
    """How many units were droppable."""
    prompt_unit: int | None
    """The unit holding the current run's prompt (never dropped), if not in the head."""


_FIRST: Final = operator.itemgetter(0)
_SECOND: Final = operator.itemgetter(1)


def _unit_kind(segment: Sequence[ModelMessage]) -> str:
    kind = 'step'
    for message in segment:
        if _parts.message_pinned(message) or _parts.has_system_prompt(message):
            return 'never'
        if isinstance(message, ModelRequest) and any(
            getattr(p, 'part_kind', None) not in _STEP_REQUEST_KINDS and not is_tool_content(p, message)
            for p in message.parts
        ):
            kind = 'conversation'
    return kind
