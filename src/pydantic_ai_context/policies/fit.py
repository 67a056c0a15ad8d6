"""`fit_to_budget`: the last resort that makes the view fit, or says exactly why it cannot.

Every other policy shrinks what it can while keeping the history whole. When the view is still
over the budget's limit, this one removes the oldest whole steps, and if even the smallest view
it may build does not fit, raises `ContextBudgetExceeded` rather than sending a request the
provider would reject (DESIGN.md section 3).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import operator
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, cast

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, UserPromptPart

from pydantic_ai_context import _markers, _parts
from pydantic_ai_context._memo import PINNED_FIELDS, ObjectMemo
from pydantic_ai_context._prefix import first_difference
from pydantic_ai_context._scope import active_generation
from pydantic_ai_context.errors import ContextBudgetExceeded
from pydantic_ai_context.integrity import safe_cut_points
from pydantic_ai_context.tokens import TokenCounter, message_tokens
from pydantic_ai_context.views import CompileContext

from ._base import LastCall, SyncPolicy, context_key, last_call, replay_note
from ._frontier import counter_key
from .trim import clip_arguments, shorten_results

__all__ = ('FitToBudget', 'fit_to_budget')

MARKER_KIND: Final = 'dropped'

DROPPED_NOTE: Final = (
    '[Note from context management, not a new instruction: older steps of this conversation were removed '
    'from here on to fit the context window; the rest of the conversation follows.]'
)
"""The note where steps were dropped. Its text stays the same however many were dropped (the counts
are in the marker): it sits in an early request, and a text that changed with every drop would
break the provider's prompt cache from there on."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

# Request parts of an ordinary agent step: tool results and retry feedback. A step holding anything
# else (a later user prompt, an instruction change...) is part of the conversation: dropped last.
_STEP_REQUEST_KINDS: Final = frozenset({'tool-return', 'retry-prompt', 'retry-feedback'})


@dataclass(kw_only=True)
class FitToBudget(SyncPolicy):
    """Drop the oldest whole steps until the view fits `context.budget.limit`; raise if it cannot.

    A step is a model response and the request that answers it (its tool results), so dropping
    one never leaves a tool call or result without its partner. Always kept: the first request up
    to the first user prompt (system prompt and task), steps with pinned content or system
    prompts, and the last `keep_last_steps` steps (the newest request always). Steps are dropped
    oldest first; steps carrying a later user prompt (the conversation itself) only once no other
    step is left. One user-role note, in the request right before the first gap, says how many
    messages and tokens were removed; its message carries the metadata marker
    `{'kind': 'dropped', 'messages': n, 'tokens': t}`.

    Steps go in chunks of `drop_granularity` × the limit, so while the log grows the same steps
    stay dropped and the view is the previous view plus the new messages (the prompt cache keeps
    hitting) until the next chunk is due. With no budget in the context, nothing happens.

    Raises:
        ContextBudgetExceeded: even with every droppable step gone the view is over the limit;
            `detail` names what is left and, when one message alone exceeds the limit, which.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart

        from pydantic_ai_context import ContextBudget, HeuristicCounter
        from pydantic_ai_context.policies.fit import fit_to_budget
        from pydantic_ai_context.views import CompileContext

        log = [ModelRequest(parts=[UserPromptPart('Summarise the logs.')])]
        for i in range(20):
            log.append(ModelResponse(parts=[ToolCallPart('read_log', {'n': i}, tool_call_id=f'c{i}')]))
            log.append(ModelRequest(parts=[ToolReturnPart('read_log', f'entry {i} ' * 300, tool_call_id=f'c{i}')]))
        context = CompileContext(counter=HeuristicCounter(), budget=ContextBudget(context_window=12_000))
        view = fit_to_budget().apply(log, context)
        assert context.counter.count_messages(view) <= context.budget.limit
        assert view[0].parts[0].content == 'Summarise the logs.'  # the task stays
        assert 'older steps' in view[0].parts[-1].content  # the note on what was removed
        assert view[-1] is log[-1]  # the newest step stays
        ```
    """

    name: str = 'fit_to_budget'
    """The step's name in a profile's chain."""
    keep_last_steps: int = 2
    """Steps (response + following request) at the end of the view that are never dropped (at least 1)."""
    trim_tokens: int = 200
    """When no step is left to drop, the recency window's tool results (all but the newest
    request's) are cut to about this many tokens, head + tail, before anything fails."""
    clip_chars: int = 80
    """With no step left to drop, long string arguments of the recency window's tool calls are
    clipped to this many characters too (paths and a command's first line stay whole)."""
    clamp_fresh: bool = False
    """Clamp the newest request's tool results (head + tail, the original size in the marker,
    read-back reaching the rest) to the room the other messages leave, rather than drop older
    steps for them, when that room holds at least `trim_tokens`; when steps must go anyway, the
    chunk is sized without the fresh results' excess if that leaves them half their size. For
    chains whose earlier policies compact results once they leave the recency window (the presets):
    there the next request compacts the fresh result, the view fits whole again, and steps dropped
    for it would come back, breaking the cached prefix twice (replay at 16k, `coding`: 1.063 ->
    0.682 of no compaction on `mini_gemini3pro_requests_1142`). Off, a fresh result is clamped only
    once no step is left to drop."""
    drop_granularity: float = 0.2
    """Steps are dropped in chunks of this share of the limit, so the view shrinks well below the limit
    and stays put for a while (0 drops just enough, breaking the prompt cache on every request; replay at
    32k: 0.05 -> cost 0.56 of no compaction, 0.2 -> 0.50, at 95% fact retention)."""
    _last: LastCall | None = field(default=None, init=False, repr=False, compare=False)
    _reading: _Reading | None = field(default=None, init=False, repr=False, compare=False)
    _earlier: dict[int, LastCall] = field(
        default_factory=dict[int, LastCall], init=False, repr=False, compare=False
    )
    """The latest drop for each of the last few other targets (see `apply`)."""

    def __post_init__(self) -> None:
        if self.keep_last_steps < 0:
            raise ValueError(f'keep_last_steps must be >= 0, got {self.keep_last_steps}')
        if not 0 <= self.drop_granularity < 1:
            raise ValueError(f'drop_granularity must be in [0, 1), got {self.drop_granularity}')

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        budget = context.budget
        if budget is None or not messages:
            return list(messages)
        counter = context.counter
        used = counter.count_messages(messages)
        limit = budget.limit
        if used <= limit:
            return list(messages)
        quantum = max(1, math.floor(limit * self.drop_granularity))
        target = math.ceil((used - limit) / quantum) * quantum
        # A fresh large result is clamped rather than make older steps go (see `clamp_fresh`).
        fresh = self._fresh_excess(messages, counter) if self.clamp_fresh else 0
        if fresh and used - fresh <= limit:
            clamped = self._clamp_fresh(messages, used, limit, context)
            if clamped is not None:
                return clamped
            fresh = 0
        elif fresh:
            # Steps go anyway: the chunk is sized without the fresh result's excess, when that
            # leaves it at least half its size (else each request drops steps for a large result,
            # and clamping it deeply would only trade it for steps that go at the next request).
            newest = message_tokens(counter, messages[-1])
            smaller = math.ceil((used - fresh - limit) / quantum) * quantum
            if limit - (used - newest) + smaller >= newest / 2:
                target = smaller
            else:
                fresh = 0
        # The same target over the same oldest steps drops the same ones: when the new messages
        # still fit beside them, the view is the previous one plus the new messages. (Exact only
        # when the previous drop reached its target with plain tool steps: new steps join the
        # order before later user prompts, and after the steps already dropped.)
        key = context_key(context)
        last = self._last
        drop = last.extra if last is not None else None
        if not (isinstance(drop, _Dropped) and drop.target == target) and target in self._earlier:
            # The input's size crossed a multiple of the quantum, often only to cross back at the
            # next request (an older result trimmed or masked): the latest drop for this target is
            # resumed as the latest one would be, rather than planned again.
            last = self._earlier[target]
            drop = last.extra
        if (
            last is not None
            and isinstance(drop, _Dropped)
            and drop.target == target
            and drop.extendable
            and (extended := last.extended(messages, key) or self._resumed(last, drop, messages, key))
            is not None
            and counter.count_messages(extended) <= limit
        ):
            replay_note(last, context)
            reading = self._reading
            if last is not self._last and drop.note is not None and reading is not None:
                # The read-back sink holds the note's span as the other target's drop wrote it.
                reading.keep_spans([(*drop.note, True)], context.originals, messages)
            self._remember(LastCall(tuple(messages), extended, key, last.note, last.extra))
            return extended
        view = self._drop(messages, used, limit, quantum, target, context, fresh=fresh > 0)
        return view

    def _clamp_fresh(
        self, messages: list[ModelMessage], used: int, limit: int, context: CompileContext
    ) -> list[ModelMessage] | None:
        """`messages` (the input, or the view with a chunk of steps dropped) with the newest
        request's tool results clamped to the room the rest leaves, when that room holds at least
        `trim_tokens` and the clamped request fits it; `None` otherwise (then steps are dropped)."""
        last = messages[-1]
        counter = context.counter
        if not isinstance(last, ModelRequest) or not self._fresh_excess(messages, counter):
            return None
        others = used - message_tokens(counter, last)
        if others + self.trim_tokens > limit:
            return None
        candidate, fitted = _clamp_results(last, limit - others, counter, context.originals)
        if candidate is last or others + fitted > limit:
            return None
        context.note(
            f'clamped the newest tool results to fit the limit of {limit:,} tokens (older steps kept)',
            clamped_newest=1,
        )
        return [*messages[:-1], candidate]

    def _fresh_excess(self, messages: Sequence[ModelMessage], counter: TokenCounter) -> int:
        """Tokens of the newest request beyond `trim_tokens`, when they are tool results that may be
        clamped (not pinned); 0 otherwise."""
        last = messages[-1]
        if not isinstance(last, ModelRequest) or not _parts.tool_results(last) or _parts.message_pinned(last):
            return 0
        return max(message_tokens(counter, last) - self.trim_tokens, 0)

    def _resumed(
        self, last: LastCall, drop: _Dropped, messages: list[ModelMessage], key: Hashable
    ) -> list[ModelMessage] | None:
        """The previous view with its kept messages after the last dropped step taken from `messages`,
        when `messages` changed only after that step (a recent tool result trimmed as it aged):
        exactly what `_drop` would build, or `None`.

        `_drop` drops a prefix of its order; when the previous one stopped at the first step that
        reached the target (`drop.first_stop`), the same steps with the same sizes reach it again,
        so it drops the same ones if the view fits (the caller checks). The steps are the same when
        the cut points up to the end of the last dropped one are, and enough steps stay after it
        for the recency window; the note is the same when no note to merge (and strip) sits after
        them: none arrived, and the previous view kept the messages after them as they were.
        """
        end = drop.end
        if (
            not drop.first_stop
            or last.generation is None
            or last.generation != active_generation()
            or key != last.key
        ):
            return None
        same = first_difference(last.messages, messages)
        if same <= end or any(drop_record(m) is not None for m in messages[same:]):
            return None
        cuts = safe_cut_points(messages)
        upto = bisect.bisect_right(cuts, end)
        if cuts[:upto] != drop.cuts:
            return None
        n, kept, needed = len(messages), 0, max(self.keep_last_steps, 1)
        for i in cuts[upto - 1 :]:
            if kept >= needed or i >= n:
                break
            kept += isinstance(messages[i], ModelResponse)
        if kept < needed:
            return None
        tail = len(last.messages) - end
        output = last.output
        if tail > len(output) or not all(
            map(operator.is_, output[len(output) - tail :], last.messages[end:])
        ):
            return None
        return [*output[: len(output) - tail], *messages[end:]]

    def _drop(
        self,
        messages: list[ModelMessage],
        used: int,
        limit: int,
        quantum: int,
        target: int,
        context: CompileContext,
        *,
        fresh: bool = False,
    ) -> list[ModelMessage]:
        counter = context.counter
        reading = self._reading = _Reading.of(messages, counter, self._reading)
        plan = _Plan.of(messages, keep_last_steps=max(self.keep_last_steps, 1), reading=reading)
        acc = [0, *itertools.accumulate(reading.tokens)]
        sizes = [acc[e] - acc[s] for s, e in plan.units]
        dropped: set[int] = set()
        freed = 0
        clamped_fresh = False
        view: list[ModelMessage] | None = None
        for unit in plan.order:
            if freed < target:
                dropped.add(unit)
                freed += sizes[unit]
                continue
            # The chunk is dropped; the note and per-message framing may still leave it a little over.
            view = plan.build(dropped, sizes)
            size = counter.count_messages(view)
            if size <= limit:
                break
            if fresh and (clamped := self._clamp_fresh(view, size, limit, context)) is not None:
                view, clamped_fresh = clamped, True
                break
            fresh = False
            view = None
            dropped.add(unit)
            freed += sizes[unit]
        if view is None:
            view = plan.build(dropped, sizes)
        reading.keep_spans(plan.spans, context.originals, messages)
        final = counter.count_messages(view)
        degraded = False
        extra = 0
        if final > limit:
            view, final, extra = self._degrade(view, plan, dropped, sizes, limit, context)
            degraded = True
        n = sum(plan.units[u][1] - plan.units[u][0] for u in dropped) + extra
        if n:
            context.note(
                f'dropped {n} oldest messages ({freed:,} tokens) to fit the limit of {limit:,} tokens',
                dropped_messages=n,
                dropped_tokens=freed,
            )
        # Extending later is exact only if this drop stopped on the target (not by running out of
        # steps: the next request's longer view has more to offer) and dropped plain steps only.
        # A clamped newest result is no longer newest in the next request's input.
        extendable = (
            not degraded
            and not clamped_fresh
            and freed >= target
            and all(plan.kinds[u] == _STEP for u in dropped)
        )
        end = plan.units[max(dropped)][1] if dropped else 0
        cuts = safe_cut_points(messages) if dropped else []
        last_unit = max(dropped) if dropped else None
        first_stop = last_unit is not None and freed - sizes[last_unit] < target
        note = next(
            ((ref, list(items)) for ref, items, _ in reversed(plan.spans) if isinstance(items, list)), None
        )
        drop = _Dropped(target, extendable, first_stop, end, cuts[: bisect.bisect_right(cuts, end)], note)
        self._remember(last_call(messages, view, context_key(context), context, drop))
        return view

    def _remember(self, last: LastCall) -> None:
        """Make `last` the latest call, keeping the previous one as the latest for its own target."""
        previous = self._last
        if previous is not None and isinstance(previous.extra, _Dropped) and previous is not last:
            self._earlier[previous.extra.target] = previous
            while len(self._earlier) > _EARLIER_TARGETS:
                del self._earlier[next(iter(self._earlier))]
        if isinstance(last.extra, _Dropped):
            self._earlier.pop(last.extra.target, None)
        self._last = last

    def _degrade(
        self,
        view: list[ModelMessage],
        plan: _Plan,
        dropped: set[int],
        sizes: list[int],
        limit: int,
        context: CompileContext,
    ) -> tuple[list[ModelMessage], int, int]:
        """What still keeps the run going once no step is left to drop (DESIGN.md invariant 3).

        First the tool results of the recency window are trimmed, all but the newest request's,
        and its calls' long arguments clipped; then the newest request's results are clamped to
        the room left (head + tail, the original size in the marker). If that is not enough, the
        recency window's older steps go too, and the same is tried on the task framing and the
        newest step alone. Raises `ContextBudgetExceeded` when even that does not fit, saying
        whether the task framing or the newest step is too large. Returns the view, its tokens and
        how many more messages were dropped.
        """
        out, used = self._shrink_recent(view, plan, limit, context)
        if used <= limit:
            return out, used, 0
        # The recency window's older steps (never pinned ones or system prompts) go last.
        older = {
            u for u in range(len(plan.units) - plan.protected, len(plan.units) - 1) if plan.kinds[u] != _NEVER
        }
        if older - dropped:
            smaller = plan.build(dropped | older, sizes)
            out, used = self._shrink_recent(smaller, plan, limit, context)
            if used <= limit:
                return out, used, sum(plan.units[u][1] - plan.units[u][0] for u in older - dropped)
        raise ContextBudgetExceeded(
            used,
            limit,
            detail=plan.explain_degraded(out, counter=context.counter, limit=limit),
            policy=self.name,
        )

    def _shrink_recent(
        self, view: list[ModelMessage], plan: _Plan, limit: int, context: CompileContext
    ) -> tuple[list[ModelMessage], int]:
        """`view` with the recency window trimmed and, if needed, the newest results clamped."""
        counter = context.counter
        out = list(view)
        newest = len(out) - 1
        trimmed = 0
        for i in range(plan.head_end, newest):
            message = out[i]
            if isinstance(message, ModelRequest) and _parts.tool_results(message):
                shorter = shorten_results(
                    message, max_tokens=self.trim_tokens, counter=counter, originals=context.originals
                )
                if shorter is not message:
                    out[i] = shorter
                    trimmed += 1
        # The calls of the recency window have been made: their long arguments (file contents
        # sent to an editor) can be clipped like old ones; paths and commands stay whole.
        for i in range(plan.head_end, len(out)):
            message = out[i]
            if isinstance(message, ModelResponse) and not _parts.message_pinned(message):
                clipped = clip_arguments(message, max_chars=self.clip_chars, counter=counter)
                if clipped is not message:
                    out[i] = clipped
                    trimmed += 1
        used = counter.count_messages(out)
        clamped = 0
        last = out[newest]
        if used > limit and isinstance(last, ModelRequest) and _parts.tool_results(last):
            others = used - message_tokens(counter, last)
            candidate, fitted = _clamp_results(last, limit - others, counter, context.originals)
            out[newest] = candidate
            used = others + fitted
            clamped = 1 if candidate is not last else 0
        if used <= limit:
            context.note(
                f'nothing left to drop: trimmed {trimmed} recent messages'
                + (' and clamped the newest' if clamped else ''),
                trimmed_recent=trimmed,
                clamped_newest=clamped,
            )
        return out, used


def _clamp_results(
    request: ModelRequest, room: int, counter: TokenCounter, originals: _markers.OriginalsSink | None
) -> tuple[ModelRequest, int]:
    """`request` with its tool results clamped (head + tail, the original size in the marker) so
    that it takes at most `room` tokens if it can, and its tokens; the request itself when nothing
    could be clamped."""
    out, tokens = request, message_tokens(counter, request)
    n_results = len(_parts.tool_results(request))
    # The marker and the facts listed after the cut take room too: aim lower and retry.
    for share in (0.8, 0.6, 0.4):
        per_result = math.floor(room * share / n_results)
        if per_result < 1:
            break
        out = shorten_results(
            request, max_tokens=per_result, counter=counter, recent=True, originals=originals
        )
        tokens = message_tokens(counter, out)
        if tokens <= room:
            break
    return out, tokens


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


def fit_to_budget(**settings: Any) -> FitToBudget:
    """Drop the oldest whole steps until the view fits the budget, else raise; see `FitToBudget`.

    Example:
        ```python
        from pydantic_ai_context.policies.fit import fit_to_budget

        policy = fit_to_budget(keep_last_steps=4)
        assert policy.name == 'fit_to_budget' and policy.keep_last_steps == 4
        ```
    """
    return FitToBudget(**settings)


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

    @classmethod
    def of(cls, messages: Sequence[ModelMessage], *, keep_last_steps: int, reading: _Reading) -> _Plan:
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
        reused = reading.reusable_plan(head_end, cuts)
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
        limit = max(len(units) - keep_last_steps, 0)
        # The previous lists hold the units below its own limit only.
        same = min(closed, limit, old_limit)
        steps = old_steps[: bisect.bisect_left(old_steps, same)]
        steps += [u for u in range(same, limit) if unit_kinds[u] == _STEP]
        conversation = old_conversation[: bisect.bisect_left(old_conversation, same)]
        conversation += [u for u in range(same, limit) if unit_kinds[u] == _CONVERSATION]
        reading.plan = (first_prompt + 1, cuts, plan_starts, unit_kinds, steps, conversation, limit)
        reading.plan_valid = n
        return cls(
            messages,
            head_end,
            units,
            steps + conversation,
            min(keep_last_steps, len(units)),
            reading=reading,
            kinds=unit_kinds,
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


_EARLIER_TARGETS: Final = 2
"""Drops remembered for targets other than the latest one's (the size crossing a boundary back and forth)."""

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
    plan: tuple[int, list[int], list[int], list[int], list[int], list[int], int] | None = None
    """What the latest `_Plan.of` found: the head's end it started from, the safe cut points, the
    steps' starts, their kinds, the droppable steps and conversation units (in order) and how many
    units were droppable."""
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
        self, head_end: int, cuts: list[int]
    ) -> tuple[int, list[int], list[int], list[int], list[int], int] | None:
        """The previous plan's (valid, starts, kinds, steps, conversation units, limit) when what it found
        before message `valid` (the first one that changed) holds for `cuts` too: the same head,
        and the same safe cut points before `valid` (a new result may answer an old call)."""
        plan, valid = self.plan, self.plan_valid
        if plan is None or plan[0] != head_end or valid <= head_end:
            return None
        _, old_cuts, starts, kinds, steps, conversation, limit = plan
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
            getattr(p, 'part_kind', None) not in _STEP_REQUEST_KINDS for p in message.parts
        ):
            kind = 'conversation'
    return kind


def _with_note(
    view: list[ModelMessage],
    at: int,
    messages: int,
    tokens: int,
    observations: int,
    step_refs: list[str],
    steps: list[tuple[int, int]],
    *,
    notes: bool = True,
    noted: tuple[ModelMessage, dict[str, Any], ModelMessage] | None = None,
    notes_out: list[tuple[ModelMessage, dict[str, Any], ModelMessage]] | None = None,
) -> tuple[list[ModelMessage], list[tuple[str, tuple[int, int] | list[str], bool]]]:
    """`view` with the note on what was dropped in the request at `at` (merging an earlier note),
    and the spans to keep for read-back.

    The note records how many observations (tool-result requests) went with the dropped steps:
    the compaction frontier still counts them, so a view of this view compacts the same messages.

    Each dropped step (its ref in `step_refs`, its input range in `steps`) is a span of its own
    (kept once); the note names a span listing them, whose ref comes from the first step dropped
    after the head. Drops start there every time, so the ref, and with it the note's text, stays
    the same as more steps are dropped: the request holding the note stays in the provider's
    prompt cache. `notes=False`: the input holds no earlier note (nothing to merge). `noted`: the
    (request, record, noted request) of an earlier call, reused when the same again; a new one is
    appended to `notes_out`.
    """
    earlier_ref: str | None = None
    earlier_steps: list[str] = []
    for i, message in enumerate(view if notes else ()):
        found = drop_record(message)
        if found is not None:
            # A view of a view under a smaller budget: one note for everything removed.
            messages += int(found.get('messages', 0))
            tokens += int(found.get('tokens', 0))
            observations += int(found.get('observations', 0))
            if isinstance(found.get('ref'), str):
                earlier_ref = found['ref']
                earlier_steps = [r for r in found.get('steps', []) if isinstance(r, str)]
            view[i] = _without_note(message, found)
    all_steps = list(dict.fromkeys([*earlier_steps, *step_refs]))
    ref = earlier_ref or (f'd{step_refs[0][1:]}' if step_refs else _markers.span_ref([]))
    target = view[at]
    note = _markers.with_ref(DROPPED_NOTE, ref)
    record = {
        'kind': MARKER_KIND,
        'messages': messages,
        'tokens': tokens,
        'observations': observations,
        'note': note,
        'ref': ref,
        'steps': all_steps,
    }
    if isinstance(target, ModelRequest):
        # A fixed timestamp: the view must be the same, byte for byte, every time it is compiled.
        stamp = target.timestamp or next(
            (p.timestamp for p in target.parts if hasattr(p, 'timestamp')), _EPOCH
        )
        existing = _parts.marker(target)
        # The request may already be a summary (merged into the task framing): its record stays,
        # with the drop's nested under it.
        combined = {**existing, MARKER_KIND: record} if existing is not None else record
        if noted is not None and noted[0] is target and noted[1] == combined:
            # The same note on the same request as the previous compile: the same object, so
            # what is remembered of the view's prefix (totals, validity) stays valid.
            view[at] = noted[2]
        else:
            view[at] = dataclasses.replace(
                target,
                parts=[*target.parts, UserPromptPart(note, timestamp=stamp)],
                metadata=_parts.with_marker(target.metadata, combined),
            )
            if notes_out is not None:
                notes_out.append((target, combined, view[at]))
    else:
        # Only in a malformed view (two responses in a row): the note gets a request of its own.
        request = ModelRequest(
            parts=[UserPromptPart(note, timestamp=_EPOCH)],
            metadata=_parts.with_marker(None, record),
            run_id=getattr(target, 'run_id', None),
        )
        view.insert(at + 1, request)
    spans: list[tuple[str, tuple[int, int] | list[str], bool]] = [
        (step_ref, step, False) for step_ref, step in zip(step_refs, steps, strict=True)
    ]
    spans.append((ref, all_steps, True))
    return view, spans


def drop_record(message: ModelMessage) -> dict[str, Any] | None:
    """The record of a drop note the message carries: its own marker, or nested under another
    record (a summary merged into the task framing keeps its own marker)."""
    record = _parts.marker(message)
    if record is None:
        return None
    if record.get('kind') == MARKER_KIND:
        return record
    nested = record.get(MARKER_KIND)
    return nested if isinstance(nested, dict) else None


def _without_note(message: ModelMessage, record: dict[str, Any]) -> ModelMessage:
    note = record.get('note')
    parts = [p for p in message.parts if not (isinstance(p, UserPromptPart) and p.content == note)]
    outer = _parts.marker(message)
    if outer is not None and outer.get('kind') != MARKER_KIND:
        rest = {k: v for k, v in outer.items() if k != MARKER_KIND}
        kept: ModelMessage = dataclasses.replace(
            cast(Any, message), parts=parts, metadata=_parts.with_marker(message.metadata, rest)
        )
        return kept
    meta = {k: v for k, v in (message.metadata or {}).items() if k != _parts.META_KEY}
    stripped: ModelMessage = dataclasses.replace(cast(Any, message), parts=parts, metadata=meta or None)
    return stripped
