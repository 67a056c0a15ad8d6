"""The compaction frontier: where the part of the view that may be compacted ends.

Everything before the frontier is old enough to compact (mask, trim, dedupe); everything from
it on is the recency window and stays untouched. Providers cache a prompt's prefix, so the
frontier must not creep forward one observation per request (that rewrites the prefix every
time): it moves in *steps*. Observations pile up in the unprotected region until a whole step
of them has gathered (the high watermark, `keep_recent + step`), then the frontier jumps past
all of them at once (down to the low watermark, `keep_recent`). Between two jumps the view of
a longer log is the previous view plus the new messages, and the cache keeps hitting.

The frontier is a function of the messages alone (plus settings, counter and budget), never of
how often compile ran, so a fresh process compiling a stored log gets the view a long-running
one would. It is also the same on a compiled view as on the raw log: sizes are read from the
markers that trimmed and masked parts carry, so compiling a view of a view changes nothing.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest

from pydantic_ai_context import _native_tools, _parts
from pydantic_ai_context._memo import PART_FIELDS, PINNED_FIELDS, ObjectMemo
from pydantic_ai_context._scope import resumed_fold, scope_text_memo
from pydantic_ai_context.budget import ContextBudget
from pydantic_ai_context.tokens import TokenCounter, _MessageCounter
from pydantic_ai_context.views import CompileContext

__all__ = (
    'Frontier',
    'IdentityMemo',
    'compaction_frontier',
    'frontier_from',
    'nominal_message_tokens',
    'nominal_part_tokens',
    'observation_indices',
    'unresolved_failures',
)

IdentityMemo = ObjectMemo
"""Values computed from a message, held weakly and checked against the message's stamp (see `_memo`)."""

_NOMINAL: ObjectMemo[tuple[int, int]] = ObjectMemo(max_bytes=16 * 1024 * 1024, fields=PINNED_FIELDS)
_PART_TOKENS: ObjectMemo[int] = ObjectMemo(max_bytes=16 * 1024 * 1024, fields=PART_FIELDS)


def counter_key(counter: TokenCounter) -> Hashable:
    """What identifies a counter's counts in a memo: its kind and name, never its `id` (ids are
    reused once an object is freed, and a stale count would make the view nondeterministic)."""
    return (type(counter).__module__, type(counter).__qualname__, counter.name)


def _count_text(counter: TokenCounter, text: str) -> int:
    if not text:
        return 0
    # The counter's own memo by text (a part the frontier weighs is often one it has counted).
    return counter._text_tokens(text) if isinstance(counter, _MessageCounter) else counter.count_text(text)


def part_text_tokens(part: Any, counter: TokenCounter) -> int:
    """The tokens of a part's text as it is now, remembered per part (tool outputs are the same
    part objects from one compile to the next) while its content is unchanged, and during a compile
    by text too (a file read twice is counted once; that memo goes with the conversation's state)."""
    key = counter_key(counter)
    found = _PART_TOKENS.get(part, key)
    if found is None:
        text = _parts.part_text(part)
        by_text = scope_text_memo(('frontier.tokens', key))
        found = by_text.get(text) if by_text is not None else None
        if found is None:
            found = _count_text(counter, text)
            if by_text is not None:
                by_text.put(text, found)
        _PART_TOKENS.put(part, found, key)
    return found


def nominal_part_tokens(part: Any, counter: TokenCounter) -> int:
    """The tokens a part had before this package compacted it (its own size when untouched)."""
    record = _parts.marker(part)
    if record is not None:
        original = record.get('tokens')
        if isinstance(original, int):
            return original
    return part_text_tokens(part, counter)


def observation_indices(messages: Sequence[ModelMessage]) -> list[int]:
    """Indices of the requests that carry tool results: one observation per agent step."""
    # During a compile the fold of the previous list is resumed from its first changed message.
    return resumed_fold('frontier.observations', messages, _Observations, _Observations.found)


class _Observations:
    """`observation_indices` as a fold."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.indices: list[int] = []

    def found(self) -> list[int]:
        return list(self.indices)

    def truncate(self, n: int) -> None:
        del self.messages[n:], self.indices[bisect.bisect_left(self.indices, n) :]

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        for i in range(len(self.messages), len(messages)):
            message = messages[i]
            if isinstance(message, ModelRequest) and _parts.tool_results(message):
                self.indices.append(i)
            self.messages.append(message)


def unresolved_failures(messages: Sequence[ModelMessage]) -> set[str]:
    """`tool_call_id`s of failed tool results that no later step has resolved (invariant 5).

    A failure of tool `T` is *resolved* once a later request holds a successful result of the
    same tool `T`: the agent got past it, so the failure is history. Until then it stays visible.
    """
    # During a compile the fold of the previous list is resumed from its first changed message.
    return resumed_fold('frontier.failures', messages, _Failures, _Failures.unresolved)


class _Failures:
    """`unresolved_failures` as a fold from the start: per tool, the failures since its last success
    (a success resolves the failures of earlier messages, not those of its own)."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.pending: dict[str, tuple[str, ...]] = {}
        self.undo: list[Sequence[tuple[str, tuple[str, ...] | None]]] = []
        """Per message: what it changed in `pending` (one shared empty tuple where nothing: most
        messages, and each list is one more object a full collection walks)."""
        self.where: dict[str, int] = {}
        """The message each failed call's result is in."""

    def truncate(self, n: int) -> None:
        for j in range(len(self.messages) - 1, n - 1, -1):
            for name, before in reversed(self.undo[j]):
                if before is None:
                    self.pending.pop(name, None)
                else:
                    self.pending[name] = before
            for part in _parts.tool_results(self.messages[j]):
                if self.where.get(part.tool_call_id) == j:
                    del self.where[part.tool_call_id]
        del self.messages[n:], self.undo[n:]

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        pending = self.pending
        for j in range(len(self.messages), len(messages)):
            message = messages[j]
            changes: list[tuple[str, tuple[str, ...] | None]] = []
            results = _parts.tool_results(message)
            if results:
                for part in results:
                    if not _parts.is_failed_result(part):
                        name = getattr(part, 'tool_name', None) or ''
                        if pending.get(name):
                            changes.append((name, pending[name]))
                            pending[name] = ()
                for part in results:
                    if _parts.is_failed_result(part):
                        name = getattr(part, 'tool_name', None) or ''
                        changes.append((name, pending.get(name)))
                        pending[name] = (*pending.get(name, ()), part.tool_call_id)
                        self.where[part.tool_call_id] = j
            self.messages.append(message)
            self.undo.append(changes or ())

    def unresolved(self) -> set[str]:
        return {cid for ids in self.pending.values() for cid in ids}

    def positions(self) -> list[int]:
        """The messages that hold an unresolved failure, in order."""
        where = self.where
        return sorted({where[cid] for ids in self.pending.values() for cid in ids if cid in where})


def nominal_message_tokens(message: ModelMessage, counter: TokenCounter) -> int:
    """The tokens of a message's parts before this package compacted them (tool-call arguments included)."""
    return _nominal(message, counter)[0]


def _observation_tokens(message: ModelMessage, counter: TokenCounter) -> int:
    return _nominal(message, counter)[1]


def _nominal(message: ModelMessage, counter: TokenCounter) -> tuple[int, int]:
    """(all parts, tool results only), in nominal tokens; memoised per message and counter."""
    found = _NOMINAL.get(message, counter_key(counter))
    if found is not None:
        return found
    record = _parts.marker(message) or {}
    clipped = record.get('args_tokens')
    clipped_args: dict[str, Any] = clipped if isinstance(clipped, dict) else {}
    # Native tool calls and results removed together (see `mask_observations`) count as they were,
    # and the lines standing for them not at all.
    removed = record.get('native_tokens')
    total = results = 0
    for part in message.parts:
        if removed and _native_tools.is_removal_note(part):
            continue
        original = (
            clipped_args.get(getattr(part, 'tool_call_id', None) or '') if _parts.is_tool_call(part) else None
        )
        tokens = original if isinstance(original, int) else nominal_part_tokens(part, counter)
        total += tokens
        if _parts.is_tool_result(part):
            results += tokens
    if isinstance(removed, dict):
        total += sum(n for n in removed.values() if isinstance(n, int))
    return _NOMINAL.put(message, (total, results), counter_key(counter))


class _Tally:
    """What the frontier needs from a list of messages, as a fold (`_scope.resumed_fold`): resumed
    from the first message that differs from a list it read before, and read under the fold lock
    (threads compiling with one profile share it)."""

    def __init__(self, counter: TokenCounter | None) -> None:
        self.counter = counter
        self.messages: list[ModelMessage] = []
        self.obs: list[int] = []
        """Indices of the observation requests."""
        self.hidden: list[int] = [0]
        """Observations removed from the view by later steps (fit, summaries), from their markers:
        the running count before each message, and after the last one."""
        self.obs_tokens: list[int] | None = [] if counter is not None else None
        """Nominal tool-output tokens of each observation (when a counter is given)."""
        self.totals: list[int] = [0]
        """Nominal tokens of the messages before each one, and of all (when a counter is given)."""
        self.saved: dict[int, list[int]] = {}
        """Per estimated size of a compacted observation: what compacting the first k observations
        saves, for k = 0, 1, ... (filled in by `_escalate` as far as it needs, kept as the tally grows)."""

    @property
    def hidden_total(self) -> int:
        return self.hidden[-1]

    @property
    def nominal_total(self) -> int:
        return self.totals[-1]

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        """Read the messages of `messages` after those read (it begins with them)."""
        counter, obs, tokens, hidden, totals = (
            self.counter,
            self.obs,
            self.obs_tokens,
            self.hidden,
            self.totals,
        )
        for i in range(len(self.messages), len(messages)):
            message = messages[i]
            count = hidden[-1]
            record = _parts.marker(message)
            if record is not None:
                # A drop note may sit nested under a summary's record in the same request.
                nested = record.get('dropped')
                for found in (record, nested if isinstance(nested, dict) else {}):
                    value = found.get('observations')
                    if isinstance(value, int) and value > 0:
                        count += value
            hidden.append(count)
            totals.append(
                totals[-1] + (nominal_message_tokens(message, counter) if counter is not None else 0)
            )
            if isinstance(message, ModelRequest) and _parts.tool_results(message):
                obs.append(i)
                if tokens is not None and counter is not None:
                    tokens.append(_observation_tokens(message, counter))
            self.messages.append(message)

    def truncate(self, n: int) -> None:
        """Forget the messages from `n` on."""
        k = bisect.bisect_left(self.obs, n)
        del self.messages[n:], self.obs[k:], self.hidden[n + 1 :], self.totals[n + 1 :]
        if self.obs_tokens is not None:
            del self.obs_tokens[k:]
        for saved in self.saved.values():
            del saved[k + 1 :]


def compaction_frontier(
    messages: Sequence[ModelMessage],
    *,
    keep_recent: int | None = 3,
    keep_recent_tokens: int | None = None,
    step: int = 10,
    counter: TokenCounter | None = None,
    budget: ContextBudget | None = None,
    escalate: bool = True,
    min_recent: int = 1,
    compacted_tokens: int = 80,
    budget_step: float = 0.4,
    slot: Hashable = None,
) -> int:
    """The index of the oldest message that must stay untouched; `messages[:index]` may be compacted.

    Observations are the requests holding tool results. The newest `keep_recent` of them, and the
    newest ones holding `keep_recent_tokens` of tool output, are protected (both limits apply when
    both are set: the larger window wins). The older ones are compacted in whole multiples of `step`,
    so the frontier only moves when `step` more observations have left the window. The frontier
    always falls right after an observation request, never between a call and its result, and the
    newest observation is always protected.

    With a `budget` and `escalate`, the frontier also follows the budget: when the view would exceed
    the budget's soft threshold (estimated from the nominal sizes, each compacted observation
    costing `compacted_tokens`), it advances over as many further observations as it takes to
    save the excess rounded up to whole chunks of `budget_step` x the limit, keeping at least
    `min_recent` observations. Chunks make the frontier move in jumps (the prefix before it stays
    cached), and they are counted in tokens, so an agent with large outputs masks them as soon as
    they no longer fit, however few there are.

    `slot` names the caller (a policy) so the tally of its previous call can be extended.
    """
    if step < 1:
        raise ValueError(f'step must be >= 1, got {step}')
    if keep_recent_tokens is not None and counter is None:
        raise ValueError('a token-based recency window needs a counter')

    def located(tally: _Tally) -> int:
        return _located(
            tally,
            keep_recent,
            keep_recent_tokens,
            step,
            budget,
            escalate,
            min_recent,
            compacted_tokens,
            budget_step,
        )

    # Before each model request the log is the previous one plus a few messages: during a compile,
    # the tally of the previous one is extended rather than rebuilt; when the frontier moved, a
    # policy's input changes near it, and the tally is resumed from the first message that changed.
    if slot is None:
        fresh = _Tally(counter)
        fresh.extend(messages)
        return located(fresh)
    name = ('frontier.tally', slot, counter_key(counter) if counter is not None else None)
    return resumed_fold(name, messages, lambda: _Tally(counter), located)


def _located(
    tally: _Tally,
    keep_recent: int | None,
    keep_recent_tokens: int | None,
    step: int,
    budget: ContextBudget | None,
    escalate: bool,
    min_recent: int,
    compacted_tokens: int,
    budget_step: float,
) -> int:
    obs = tally.obs
    visible = len(obs)
    if visible <= 1:
        return 0
    # Steps are counted from the first observation of the log, including those a later step of
    # the chain removed from this view: the same messages fall behind the frontier on both.
    hidden = tally.hidden_total
    total = visible + hidden
    unprotected = total - 1
    if keep_recent is not None:
        unprotected = min(unprotected, total - keep_recent)
    tokens = tally.obs_tokens
    if keep_recent_tokens is not None:
        assert tokens is not None
        protected_tokens = 0
        start = visible
        while start > 0 and protected_tokens < keep_recent_tokens:
            start -= 1
            protected_tokens += tokens[start]
        unprotected = min(unprotected, start + hidden)
    compacted = max(unprotected, 0) // step * step - hidden
    if escalate and budget is not None and tokens is not None:
        compacted = _escalate(tally, compacted, budget, min_recent, compacted_tokens, budget_step)
    return obs[compacted - 1] + 1 if compacted > 0 else 0


def _escalate(
    tally: _Tally,
    compacted: int,
    budget: ContextBudget,
    min_recent: int,
    compacted_tokens: int,
    budget_step: float,
) -> int:
    # Estimated from nominal sizes (what parts held before compaction), so the estimate, and the
    # frontier, are the same on the raw log and on a view compiled from it.
    ceiling = len(tally.obs) - min_recent
    if compacted >= ceiling:
        return compacted
    # Extended in place: the tally is read under the fold lock.
    saved = tally.saved.setdefault(compacted_tokens, [0])
    tokens = tally.obs_tokens or []
    for i in range(len(saved) - 1, len(tokens)):  # only the observations new since the last call
        saved.append(saved[-1] + max(tokens[i] - compacted_tokens, 0))
    over = tally.nominal_total - budget.soft_limit
    if over <= saved[max(compacted, 0)]:
        return compacted
    # The savings needed, rounded up to whole chunks: the frontier stays put while the log grows
    # by less than a chunk, and jumps by about a chunk when it moves.
    chunk = max(1, math.floor(budget.limit * budget_step))
    need = math.ceil(over / chunk) * chunk
    if tally.hidden_total:
        # A view of a view: what fit and summaries removed no longer counts in `nominal_total`,
        # and their savings cannot be replayed exactly, so one chunk less may be asked (never
        # more than the log asked for: compaction is kept, so a later frontier would change it).
        need -= chunk
    target = bisect.bisect_left(saved, need)
    return max(compacted, min(target, ceiling))


@dataclass(frozen=True, kw_only=True)
class Frontier:
    """Where compaction stops: a recency window of observations or tokens, moved in cache-stable steps.

    Pass the same `Frontier` to several policies (trim, mask, dedupe) so they compact the same
    prefix and the view's cached prefix changes only at the frontier's jumps.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
        from pydantic_ai.messages import UserPromptPart as U

        from pydantic_ai_context import CompileContext, HeuristicCounter
        from pydantic_ai_context.policies._frontier import Frontier

        log = [ModelRequest(parts=[U('go')])]
        for i in range(7):
            log.append(ModelResponse(parts=[ToolCallPart('ls', {}, tool_call_id=f'c{i}')]))
            log.append(ModelRequest(parts=[ToolReturnPart('ls', 'a.py', tool_call_id=f'c{i}')]))
        context = CompileContext(counter=HeuristicCounter())
        frontier = Frontier(keep_recent=2, step=3)
        assert frontier.locate(log, context) == 7  # 5 old observations: one whole step of 3 compacts
        assert frontier.locate(log[:-2], context) == 7  # one fewer: still the same frontier
        ```
    """

    keep_recent: int | None = 3
    """Observations (requests with tool results) protected at the end of the view; `None`: no count limit."""
    keep_recent_tokens: int | None = None
    """Tokens of recent tool output protected (Gemini CLI style); `None`: no token limit."""
    step: int = 10
    """Observations the frontier moves by at once: larger steps keep the cached prefix longer."""
    escalate: bool = True
    """Under a budget, advance by further steps while the view would stay over the soft threshold."""
    min_recent: int = 1
    """Observations that stay protected however far the budget pushes the frontier."""
    compacted_tokens: int = 80
    """Estimated tokens of a compacted observation, for the budget escalation."""
    budget_step: float = 0.4
    """Under a budget, the share of the limit the frontier saves at once when the view would be
    over the soft threshold: it jumps by about this many tokens of output, so the prefix before
    it stays cached between jumps. A jump re-sends everything after the newly masked output, so
    larger chunks cost less (replay at 16k: 0.1 -> 0.461 of no compaction, 0.25 -> 0.428,
    0.4 -> 0.413, the same facts kept; no change at 32k and 128k)."""

    def __post_init__(self) -> None:
        if self.keep_recent is None and self.keep_recent_tokens is None:
            raise ValueError('a frontier needs keep_recent, keep_recent_tokens, or both')
        if self.step < 1:
            raise ValueError(f'step must be >= 1, got {self.step}')
        if not 0 < self.budget_step <= 1:
            raise ValueError(f'budget_step must be in (0, 1], got {self.budget_step}')
        for name in ('keep_recent', 'keep_recent_tokens'):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f'{name} must be >= 0, got {value}')

    def locate(
        self, messages: Sequence[ModelMessage], context: CompileContext, *, slot: Hashable = None
    ) -> int:
        """The index of the first message of the recency window in `messages`.

        `slot` names the caller, so a policy's next call (the same messages and a few more)
        extends the tally of its previous one instead of reading every message again.
        """
        return compaction_frontier(
            messages,
            keep_recent=self.keep_recent,
            keep_recent_tokens=self.keep_recent_tokens,
            step=self.step,
            counter=context.counter,
            budget=context.budget,
            escalate=self.escalate,
            min_recent=self.min_recent,
            compacted_tokens=self.compacted_tokens,
            budget_step=self.budget_step,
            slot=slot,
        )


def frontier_from(
    frontier: Frontier | None,
    keep_recent: int | None,
    keep_recent_tokens: int | None,
    step: int | None,
    *,
    default: Frontier,
) -> Frontier:
    """The frontier a policy factory was given, or `default` adjusted by the shortcut settings."""
    if frontier is not None:
        if keep_recent is not None or keep_recent_tokens is not None or step is not None:
            raise TypeError('pass either frontier or keep_recent/keep_recent_tokens/step, not both')
        return frontier
    changes: dict[str, Any] = {}
    if keep_recent_tokens is not None:
        # A token window alone means no count window, unless both are given.
        changes['keep_recent_tokens'] = keep_recent_tokens
        changes['keep_recent'] = keep_recent
    elif keep_recent is not None:
        changes['keep_recent'] = keep_recent
    if step is not None:
        changes['step'] = step
    return dataclasses.replace(default, **changes) if changes else default
