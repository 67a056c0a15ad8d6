"""`fit_to_budget`: the last resort that makes the view fit, or says exactly why it cannot.

Every other policy shrinks what it can while keeping the history whole. When the view is still
over the budget's limit, this one removes the oldest whole steps, and if even the smallest view
it may build does not fit, raises `ContextBudgetExceeded` rather than sending a request the
provider would reject (DESIGN.md section 3).

The policy and its decisions are here; what it keeps between compiles to resume a drop (the
reading of its input, the plan, the last drop) is in `_fit_plan.py`, the note it leaves where
steps went in `_fit_note.py`. Every name importable from this module before stays importable.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from pydantic_ai_context import _markers, _native_tools, _parts
from pydantic_ai_context._prefix import first_difference
from pydantic_ai_context._scope import active_generation
from pydantic_ai_context.errors import ContextBudgetExceeded
from pydantic_ai_context.integrity import safe_cut_points
from pydantic_ai_context.tokens import TokenCounter, message_tokens
from pydantic_ai_context.views import CompileContext, current_prompt

from ._base import LastCall, SyncPolicy, context_key, last_call, replay_note
from ._fit_note import _EPOCH as _EPOCH
from ._fit_note import DROPPED_NOTE as DROPPED_NOTE
from ._fit_note import MARKER_KIND as MARKER_KIND
from ._fit_note import _with_note as _with_note
from ._fit_note import _without_note as _without_note
from ._fit_note import drop_record
from ._fit_plan import _CONVERSATION as _CONVERSATION
from ._fit_plan import _KIND_CODES as _KIND_CODES
from ._fit_plan import _KINDS as _KINDS
from ._fit_plan import _NEVER, _STEP, _Dropped, _Plan, _Reading
from ._fit_plan import _STEP_REQUEST_KINDS as _STEP_REQUEST_KINDS
from ._fit_plan import _unit_kind as _unit_kind
from ._prompt_clamp import clamp_prompt
from .trim import clip_arguments, shorten_native_results, shorten_results

__all__ = ('FitToBudget', 'fit_to_budget')


@dataclass(kw_only=True)
class FitToBudget(SyncPolicy):
    """Drop the oldest whole steps until the view fits `context.budget.limit`; raise if it cannot.

    A step is a model response and the request that answers it (its tool results), so dropping
    one never leaves a tool call or result without its partner. Always kept: the first request up
    to the first user prompt (system prompt and task), the step holding the current run's prompt
    (the task at hand; when it alone is larger than the room left once nothing else can go, its
    text is clamped to head + tail, readable back), steps with pinned content or system
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
                reading.keep_spans((), (), drop.note, context.originals, messages)
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
        plan = _Plan.of(
            messages,
            keep_last_steps=max(self.keep_last_steps, 1),
            reading=reading,
            prompt_at=current_prompt(messages, run_id=context.run_id),
        )
        sizes = plan.sizes()
        dropped, freed, first = plan.reaching(target, sizes)
        clamped_fresh = False
        view: list[ModelMessage] | None = None
        for unit in plan.order[first:]:
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
        reading.keep_spans(plan.dropped_refs, plan.dropped_units, plan.note_span, context.originals, messages)
        final = counter.count_messages(view)
        degraded = False
        extra = 0
        if final > limit:
            view, final, extra = self._degrade(view, plan, dropped, sizes, limit, context)
            degraded = True
        n = plan.messages_in(dropped) + extra
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
            # Kinds are ordered (`_STEP` lowest): the largest says whether all are plain steps.
            and max(map(plan.kinds.__getitem__, dropped), default=_STEP) == _STEP
        )
        end = plan.units[max(dropped)][1] if dropped else 0
        cuts = plan.cuts if dropped else []
        last_unit = max(dropped) if dropped else None
        first_stop = last_unit is not None and freed - sizes[last_unit] < target
        note = (plan.note_span[0], list(plan.note_span[1])) if plan.note_span is not None else None
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
        extra = 0
        if older - dropped:
            smaller = plan.build(dropped | older, sizes)
            out, used = self._shrink_recent(smaller, plan, limit, context)
            extra = sum(plan.units[u][1] - plan.units[u][0] for u in older - dropped)
            if used <= limit:
                return out, used, extra
        # The current run's prompt, larger than the room left on its own, is clamped (readable back).
        clamped = clamp_prompt(out, plan.prompt(), used, limit, context)
        if clamped is not None:
            return clamped[0], clamped[1], extra
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
        # sent to an editor) can be clipped like old ones; paths and commands stay whole. Native
        # tool results in its responses are trimmed like the requests' results.
        for i in range(plan.head_end, len(out)):
            message = out[i]
            if isinstance(message, ModelResponse) and not _parts.message_pinned(message):
                clipped = clip_arguments(message, max_chars=self.clip_chars, counter=counter)
                if _native_tools.native_returns(clipped):
                    clipped = shorten_native_results(
                        clipped, max_tokens=self.trim_tokens, counter=counter, originals=context.originals
                    )
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


_EARLIER_TARGETS: Final = 2
"""Drops remembered for targets other than the latest one's (the size crossing a boundary back and forth)."""
