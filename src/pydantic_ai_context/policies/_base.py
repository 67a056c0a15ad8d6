"""What every policy shares: standalone use as a pydantic-ai history processor."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import RunContext

from .._compaction import window
from .._prefix import begins_with, first_difference
from .._scope import MemoScope, active_generation, compiling, owner_cache
from ..integrity import normalize
from ..tokens import default_counter
from ..views import CompileContext
from ._frontier import counter_key


def standalone_context(messages: Sequence[ModelMessage]) -> CompileContext:
    """The context a policy gets when it runs on its own, outside a profile."""
    return CompileContext(counter=default_counter(None), log=messages)


def standalone_scope(policy: object) -> MemoScope:
    """The incremental state of a policy called on its own (inside a profile, the profile's is used)."""
    found: MemoScope | None = getattr(policy, '_standalone_scope', None)
    if found is None:
        found = MemoScope(lineages=1)
        # Not a dataclass field: a copy (`dataclasses.replace`) starts with state of its own.
        object.__setattr__(policy, '_standalone_scope', found)
    return found


class SyncPolicy:
    """Mixin: `policy(messages)` runs `apply` with a standalone context (a sync history processor).

    Subclasses are dataclasses with a `name` and an `apply(messages, context)` method. Like a
    profile, a policy on its own acts on what a provider is sent after its own compaction
    (`_compaction.window`), normalized as a profile normalizes it (a broken history is repaired,
    each repair logged on `pydantic_ai_context.integrity`), and returns a valid view.
    """

    name: str

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        raise NotImplementedError

    @property
    def _last(self) -> LastCall | None:
        """The previous call in the running compile's generation (see `LastCall`), kept in the
        compile's scope: one per conversation the profile compiles (each a lineage of the scope,
        with generations of its own), so conversations compiled in turn through one profile each
        extend their own, and a conversation the scope lets go takes its call with it."""
        calls = owner_cache(self, 'last call')
        return None if calls is None else calls.get(None)

    @_last.setter
    def _last(self, value: LastCall | None) -> None:
        calls = owner_cache(self, 'last call')
        if calls is not None:  # outside a compile nothing is reused (`LastCall.generation`)
            calls[None] = value

    def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        scope = standalone_scope(self)
        with compiling(scope, messages) as generation:
            view = normalize(self.apply(normalize(window(messages)), standalone_context(messages)))
            scope.seal(generation, view)
        return view


class AsyncPolicy:
    """Mixin: `await policy(ctx, messages)` runs `apply` inside a pydantic-ai run (an async processor),
    on its input normalized as a profile normalizes it, and returns a valid view."""

    name: str

    async def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        raise NotImplementedError

    async def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        context = standalone_context(messages)
        context.run_context = ctx
        context.model = getattr(ctx, 'model', None)
        context.run_id = getattr(ctx, 'run_id', None)
        scope = standalone_scope(self)
        with compiling(scope, messages) as generation:
            view = normalize(await self.apply(normalize(window(messages)), context))
            scope.seal(generation, view)
        return view


@dataclass
class LastCall:
    """A policy's previous input and output, to extend when the next input only adds messages.

    Between two moves of the compaction frontier a policy leaves the old prefix as it was and
    passes new messages through, so its output for `input + new` is `output + new`. Whether that
    holds is decided by `key` (everything else the output depends on: frontier, budget, counter,
    run), by object identity of the input prefix, and by the generation of the compile it was made
    in: the scope of a compile checks that no message was edited in place since the previous one
    (otherwise the generation changes), so the shortcut is exact. Outside a compile nothing is reused.
    """

    messages: tuple[ModelMessage, ...]
    output: list[ModelMessage]
    key: Hashable
    note: tuple[str, dict[str, Any]] | None = None
    extra: Any = None
    """Whatever else the policy needs to decide whether extending is exact."""
    generation: int | None = field(default_factory=active_generation)
    """The generation of the compile that made it (`None`: made outside any compile, never reused)."""

    def extended(self, messages: Sequence[ModelMessage], key: Hashable) -> list[ModelMessage] | None:
        if (
            self.generation is None
            or self.generation != active_generation()
            or key != self.key
            or not begins_with(messages, self.messages)
        ):
            return None
        return [*self.output, *messages[len(self.messages) :]]


def context_key(context: CompileContext) -> Hashable:
    """What of the compile context a policy's output may depend on."""
    budget = context.budget
    limits = (budget.limit, budget.soft_limit) if budget is not None else None
    return (counter_key(context.counter), limits, context.run_id)


def last_call(
    messages: Sequence[ModelMessage],
    output: list[ModelMessage],
    key: Hashable,
    context: CompileContext,
    extra: Any = None,
) -> LastCall:
    """What to remember of a policy's full run (its note included, to repeat when extending)."""
    note = ('; '.join(context._notes), dict(context._details)) if context._notes else None
    return LastCall(tuple(messages), output, key, note, extra)


def replay_note(last: LastCall, context: CompileContext) -> None:
    if last.note is not None:
        context.note(last.note[0], **last.note[1])


class Extending(Protocol):
    _last: LastCall | None


def extend_or_compute(
    policy: Extending,
    messages: list[ModelMessage],
    key: Hashable,
    context: CompileContext,
    compute: Callable[[], list[ModelMessage]],
    *,
    accept: Callable[[LastCall, Sequence[ModelMessage]], bool] | None = None,
) -> list[ModelMessage]:
    """`policy`'s previous output plus the new messages when that is exact, else `compute()`.

    Exact when the previous input is a prefix of `messages` (by identity), `key` is unchanged,
    and `accept(last, new_messages)` (the policy's own condition, if any) holds.
    """
    last = policy._last
    extended = last.extended(messages, key) if last is not None else None
    if (
        last is not None
        and extended is not None
        and (accept is None or accept(last, messages[len(last.messages) :]))
    ):
        replay_note(last, context)
        policy._last = LastCall(tuple(messages), extended, key, last.note, last.extra)
        return extended
    out = compute()
    policy._last = last_call(messages, out, key, context)
    return out


S = TypeVar('S')


def extend_or_resume(
    policy: Extending,
    messages: list[ModelMessage],
    key: Hashable,
    context: CompileContext,
    compute: Callable[[], tuple[list[ModelMessage], Any]],
    *,
    accept: Callable[[LastCall, Sequence[ModelMessage]], bool] | None = None,
) -> list[ModelMessage]:
    """`extend_or_compute` for a policy whose full pass also returns a state to resume the next
    full pass from (kept as the `LastCall`'s `extra`; see `resumable`)."""
    states: list[Any] = []

    def run() -> list[ModelMessage]:
        out, state = compute()
        states.append(state)
        return out

    out = extend_or_compute(policy, messages, key, context, run, accept=accept)
    if states and policy._last is not None:
        policy._last = dataclasses.replace(policy._last, extra=states[0])
    return out


def resumable(
    last: LastCall | None,
    kind: type[S],
    messages: Sequence[ModelMessage],
    frontier: int,
    context: CompileContext,
) -> tuple[LastCall, S, int] | None:
    """The previous full pass of a frontier policy, its state, and how many leading messages its
    input and `messages` share, up to its frontier: when its output there may be reused.

    Only within the same compile generation (no message edited in place since), the same budget,
    counter and run (`context_key`, the first element of the policy's key), and a frontier that
    has not moved back.
    """
    if last is None or not isinstance(last.extra, kind):
        return None
    previous: Any = last.extra
    if (
        previous.frontier > frontier
        or last.generation is None
        or last.generation != active_generation()
        or not isinstance(last.key, tuple)
        or last.key[0] != context_key(context)
    ):
        return None
    end: int = previous.frontier
    # Mostly the whole previous frontier region is unchanged: `begins_with` says so in one pass
    # that stops there (and in half the time of `first_difference`, which counts as it goes).
    if begins_with(messages, last.messages[:end]):
        return last, previous, end
    return last, previous, min(first_difference(last.messages, messages), end)


K = TypeVar('K')


def positions_before(index: dict[K, int], start: int) -> dict[K, int]:
    """The entries of `index` (a key's position in the messages) whose position is below `start`.

    For the indexes frontier policies keep between compiles (a result's first request, a fact's
    first message): they are built in the order of the messages, so their positions grow with
    insertion order, and the entries at or after `start` are the last ones inserted. A copy of the
    dict (in C) less those is then what filtering every entry would keep, at the cost of the
    entries removed rather than of the whole index (at 20,000 messages, 0.1 ms against 2 ms).
    """
    out = dict(index)
    for key, at in reversed(index.items()):
        if at < start:
            break
        del out[key]
    return out
