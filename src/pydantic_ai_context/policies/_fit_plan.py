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
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from pydantic_ai_context import _markers, _parts
from pydantic_ai_context._boundaries import is_tool_content
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
    spans: list[tuple[str, tuple[int, int] | list[str], bool]] = field(default_factory=list)
    """What the latest `build` dropped, to keep for read-back: (ref, (start, end), False) of each
    dropped step, then the note's own span (ref, the steps' refs, True), rewritten as it grows."""
    reading: _Reading | None = None
    kinds: list[int] = field(default_factory=list)
    """The kind of each unit (`_STEP`, `_CONVERSATION`, `_NEVER`)."""
    prompt_at: int | None = None
    """Where the current run's prompt is, when its step is one of `units` (not in the head)."""

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
        first_prompt = next((i for i, m in enumerate(messages) if _parts.has_user_prompt(m)), None)
        if first_prompt is None:
            first_prompt = next((i for i, m in enumerate(messages) if isinstance(m, ModelRequest)), 0)
        head_end = first_prompt + 1
        responses = reading.responses
        n = len(messages)
        cuts = safe_cut_points(messages)
        kinds = reading.kinds
        # What the previous plan found before the first message that changed is reused when the
        # safe cut points there are the same (see `_Reading.plan`): a plan costs the new steps.
        reused = reading.reusable_plan(head_end, cuts, prompt_at)
        old_kinds: list[int] = []
        old_steps: list[int] = []
        old_conversation: list[int] = []
        if reused is None:
            starts = [i for i in cuts if head_end <= i < n and responses[i]]
            closed, old_limit = 0, 0
        else:
            valid, old_starts, old_kinds, old_steps, old_conversation, old_limit = reused
            kept = bisect.bisect_left(old_starts, valid)
            starts = old_starts[:kept]
            starts += [i for i in cuts[bisect.bisect_left(cuts, valid) :] if i < n and responses[i]]
            # Units whose both ends lie before `valid` have the same messages, so the same kind.
            closed = max(kept - 1, 0)
        plan_starts = starts
        units = list(zip(starts, [*starts[1:], n], strict=True)) if starts else []
        if starts:
            # Messages between the head and the first step (only in a malformed view) stay with the head.
            head_end = starts[0]
        unit_kinds = old_kinds[:closed]
        unit_kinds += [max(kinds[start:end]) for start, end in units[closed:]]
        if prompt_at is not None and units and prompt_at >= units[0][0]:
            # The current run's prompt is task framing (DESIGN.md invariant 1): its step stays.
            at = bisect.bisect_right(starts, prompt_at) - 1
            unit_kinds[at] = _NEVER
        limit = max(len(units) - keep_last_steps, 0)
        # The previous lists hold the units below its own limit only.
        same = min(closed, limit, old_limit)
        steps = old_steps[: bisect.bisect_left(old_steps, same)]
        steps += [u for u in range(same, limit) if unit_kinds[u] == _STEP]
        conversation = old_conversation[: bisect.bisect_left(old_conversation, same)]
        conversation += [u for u in range(same, limit) if unit_kinds[u] == _CONVERSATION]
        reading.plan = (
            first_prompt + 1,
            cuts,
            plan_starts,
            unit_kinds,
            steps,
            conversation,
            limit,
            prompt_at,
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
        )

    def build(self, dropped: set[int], sizes: list[int]) -> list[ModelMessage]:
        if not dropped:
            return list(self.messages)
        reading = self.reading
        assert reading is not None
        messages, units = self.messages, self.units
        gone = sorted(dropped)
        # The kept messages, as slices between the dropped steps.
        out: list[ModelMessage] = list(messages[: units[gone[0]][0]])
        note_at = len(out) - 1
        for u, v in zip(gone, [*gone[1:], len(units)], strict=True):
            if v > u + 1:
                out.extend(messages[units[u + 1][0] : units[v - 1][1]])
        observations = reading.observations
        n = sum(units[u][1] - units[u][0] for u in gone)
        tokens = sum(sizes[u] for u in gone)
        count = sum(observations[units[u][1]] - observations[units[u][0]] for u in gone)
        refs = [reading.step_ref(messages, units[u]) for u in gone]
        made: list[tuple[ModelMessage, dict[str, Any], ModelMessage]] = []
        view, self.spans = _with_note(
            out,
            note_at,
            n,
            tokens,
            count,
            refs,
            [units[u] for u in gone],
            notes=reading.notes,
            noted=reading.noted,
            notes_out=made,
        )
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
    """Span ref of each step read so far, by its (start, end) in `messages`."""
    sink: Any = None
    """The read-back sink `kept` refers to."""
    kept: set[str] = field(default_factory=set[str])
    """Refs of the step spans kept in `sink`, and of the note span as last written."""
    note_span: tuple[str, tuple[str, ...]] | None = None
    noted: tuple[ModelMessage, dict[str, Any], ModelMessage] | None = None
    """The request the latest note went into, the note's record, and the request with the note."""
    plan: tuple[int, list[int], list[int], list[int], list[int], list[int], int, int | None] | None = None
    """What the latest `_Plan.of` found: the head's end it started from, the safe cut points, the
    steps' starts, their kinds, the droppable steps and conversation units (in order), how many
    units were droppable, and where the current run's prompt was."""
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

    def reusable_plan(
        self, head_end: int, cuts: list[int], prompt_at: int | None = None
    ) -> tuple[int, list[int], list[int], list[int], list[int], int] | None:
        """The previous plan's (valid, starts, kinds, steps, conversation units, limit) when what it found
        before message `valid` (the first one that changed) holds for `cuts` too: the same head, the
        same current prompt, and the same safe cut points before `valid` (a new result may answer an
        old call)."""
        plan, valid = self.plan, self.plan_valid
        if plan is None or plan[0] != head_end or valid <= head_end or plan[7] != prompt_at:
            return None
        _, old_cuts, starts, kinds, steps, conversation, limit, _ = plan
        below = bisect.bisect_left(cuts, valid)
        if below != bisect.bisect_left(old_cuts, valid) or cuts[:below] != old_cuts[:below]:
            return None
        return valid, starts, kinds, steps, conversation, limit

    def step_ref(self, messages: Sequence[ModelMessage], unit: tuple[int, int]) -> str:
        found = self.refs.get(unit)
        if found is None:
            found = self.refs[unit] = _markers.span_ref(messages[unit[0] : unit[1]])
        return found

    def keep_spans(
        self,
        spans: list[tuple[str, tuple[int, int] | list[str], bool]],
        sink: _markers.OriginalsSink | None,
        messages: Sequence[ModelMessage],
    ) -> None:
        """Keep the dropped steps' spans in `sink` (each once: a span's ref names its messages) and
        the note's span (again only when its list of steps changed)."""
        if sink is None:
            return
        if sink != self.sink:
            self.sink, self.kept, self.note_span = sink, set(), None
        for ref, items, replace in spans:
            if isinstance(items, tuple):
                if ref not in self.kept:
                    sink.keep_span(ref, list(messages[items[0] : items[1]]), replace=replace)
                    self.kept.add(ref)
            elif self.note_span != (ref, tuple(items)):
                sink.keep_span(ref, list[ModelMessage | str](items), replace=replace)
                self.note_span = (ref, tuple(items))


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
