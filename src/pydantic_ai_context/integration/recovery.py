"""Overflow recovery: when the provider rejects a request as too long, compile tighter and try again.

A `ContextProfile` holds one `OverflowRecovery`. It keeps the limits learned from rejections, per
model (see `_learned_limits`: evidence, bounded below, re-tested, lifted by a success above them), and
the rejections of the request step in progress; `_overflow` recognises a rejection. The profile's
`budget_for` asks it for the limit in force (`in_force`, then `tightened_window`), its hooks `on_model_request_error` and
`after_model_request` delegate here, and `request_path` asks it what to add to a refusal (`notes`).

It receives the profile through `RecoveryOwner`, never by importing `profiles`.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from pydantic_ai.messages import ModelMessage, ModelResponse

from .._parts import PYDANTIC_AI_MAJOR
from ..budget import DEFAULT_RESERVED_OUTPUT, DEFAULT_SAFETY_MARGIN, WindowSource, resolve_context_window
from ..dispatch import EventDispatch
from ..errors import ContextBudgetExceeded
from ..events import CompactionEvent
from ..gauge import ContextGauge
from ..overhead import OverheadMemo, measure_overhead
from ..tokens import TokenCounter
from ._learned_limits import LearnedLimit, LearnedLimits
from ._overflow import Overflow, context_overflow

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

try:  # pydantic-ai >= 2.64: another attempt at the same request step
    from pydantic_ai.exceptions import RetryModelRequest as _RetryModelRequest
except ImportError:  # pragma: no cover - depends on the installed pydantic-ai
    _RetryModelRequest = None  # type: ignore[assignment,misc]

__all__ = ('OverflowRecovery', 'RecoveryOwner', 'model_key', 'step_key', 'tightened_window')

_STEPS_REMEMBERED: Final = 64


class RecoveryOwner(Protocol):
    """What `OverflowRecovery` reads of the profile it serves, and asks it to do."""

    name: str
    context_window: int | None
    reserved_output: int | None
    reserved_system: int | None
    max_overflow_retries: int
    overflow_shrink: float
    _overhead_memo: OverheadMemo
    _events_room: EventDispatch
    _gauge: ContextGauge

    def counter_for(self, model: Any = None) -> TokenCounter: ...

    async def compile_request(
        self,
        messages: Sequence[ModelMessage],
        ctx: Any = None,
        *,
        model: Any = None,
        parameters: Any = None,
        whole_log: bool = False,
    ) -> list[ModelMessage]: ...

    def _record(self, event: CompactionEvent) -> None: ...

    async def _dispatch(self, event: Any) -> None: ...


class OverflowRecovery:
    """The limits a profile learned from provider rejections, and the retries of the step in progress.

    Example:
        ```python
        from pydantic_ai_context import profile
        from pydantic_ai_context.integration.recovery import OverflowRecovery

        recovery = OverflowRecovery()
        assert recovery.in_force('openai:gpt-4o') is None  # nothing learned yet
        p = profile('coding', context_window=128_000)
        assert p.budget_for('openai:gpt-4o').context_window == 128_000
        ```
    """

    def __init__(self) -> None:
        # Limits learned from provider rejections, per model: evidence, re-tested (see `_learned_limits`).
        self.limits = LearnedLimits()
        # Rejections of the request step in progress, per (run id, run step).
        self._rejections: collections.OrderedDict[tuple[str | None, int], int] = collections.OrderedDict()

    def in_force(self, model: Any) -> LearnedLimit | None:
        """The limit a request to `model` is compiled under now (counts the request; see `LearnedLimits`)."""
        return self.limits.in_force(model_key(model))

    def notes(self, ctx: Any, model: Any, detail: str) -> list[str]:
        """What to add to a refusal of this step's request: earlier rejections, the limit in force."""
        notes: list[str] = []
        rejected = self._rejections.get(step_key(ctx), 0)
        if rejected:
            notes.append(f'the provider rejected {rejected} earlier attempt(s) as too long')
        learned = self.limits.get(model_key(model))
        if learned is not None and not learned.retesting and 'learned from' not in detail:
            notes.append(f'the limit in force was {learned.describe()}')
        return notes

    def learned_text(self, model: Any) -> str | None:
        """How the limit learned for `model` came about, or `None`."""
        learned = self.limits.get(model_key(model))
        return None if learned is None else learned.describe()

    async def on_error(
        self,
        owner: RecoveryOwner,
        ctx: Any,
        request_context: ModelRequestContext,
        error: Exception,
    ) -> ModelResponse:
        """The body of `ContextProfile.on_model_request_error`: compile tighter and try again.

        The rejected attempt's size (as counted here) and the limit the error states, if plausible,
        are learned for that model as evidence (see `_learned_limits`: bounded below by what a
        request needs, re-tested after a while, lifted by a success above it); the attempt is retried
        with `RetryModelRequest` (pydantic-ai >= 2.64), else by sending the tighter view directly.
        At most `max_overflow_retries` times per request, then `ContextBudgetExceeded`. Any other
        error is re-raised unchanged.
        """
        overflow = context_overflow(error)
        if overflow is None:
            raise error
        model = request_context.model
        key = step_key(ctx)
        while True:
            rejected, fixed = self._request_total(
                owner, request_context.messages, model, request_context.model_request_parameters
            )
            retries = self._rejections.get(key, 0)
            learned = self._learn_limit(owner, model, overflow, rejected, fixed)
            if retries >= owner.max_overflow_retries:
                self._rejections.pop(key, None)
                ignored = ''
                if overflow.limit is not None and (learned is None or learned.stated != overflow.limit):
                    ignored = (
                        f'; the {overflow.limit:,}-token window it stated is not plausible and was ignored'
                    )
                raise ContextBudgetExceeded(
                    rejected,
                    _rejected_limit(learned, rejected),
                    detail=(
                        f'the provider rejected the request as too long {retries + 1} times '
                        f'({overflow.message}); the last attempt had {rejected:,} tokens by this counter{ignored}'
                    ),
                    policy=owner.name,
                ) from error
            self._rejections[key] = retries + 1
            self._rejections.move_to_end(key)
            while len(self._rejections) > _STEPS_REMEMBERED:
                self._rejections.popitem(last=False)
            owner._gauge.forget()  # the rejected attempt measured nothing
            await self._report_rejection(owner, ctx, request_context, overflow, rejected, learned)
            if _RetryModelRequest is not None:
                raise _RetryModelRequest()
            # pydantic-ai < 2.64 cannot attempt the step again: send the tighter view ourselves.
            log = list(getattr(ctx, 'messages', None) or request_context.messages)
            view = await owner.compile_request(
                log,
                ctx,
                model=model,
                parameters=request_context.model_request_parameters,
                whole_log=PYDANTIC_AI_MAJOR >= 2,
            )
            request_context.messages = view
            try:
                response = await model.request(
                    view, request_context.model_settings, request_context.model_request_parameters
                )
            except Exception as again:
                next_overflow = context_overflow(again)
                if next_overflow is None:
                    raise
                overflow, error = next_overflow, again
                continue
            self._rejections.pop(key, None)
            return response

    def accepted(self, owner: RecoveryOwner, request_context: ModelRequestContext) -> None:
        """A request the provider accepted: a learned limit it went past is lifted."""
        key = model_key(request_context.model)
        if self.limits.get(key) is not None:
            sent, _ = self._request_total(
                owner,
                request_context.messages,
                request_context.model,
                request_context.model_request_parameters,
            )
            self.limits.succeeded(key, sent)

    def _request_total(
        self, owner: RecoveryOwner, messages: Sequence[ModelMessage], model: Any, parameters: Any
    ) -> tuple[int, int]:
        """(all the tokens the request sends, the part of them that is instructions and tools)."""
        counter = owner.counter_for(model)
        overhead = measure_overhead(
            messages, counter=counter, parameters=parameters, memo=owner._overhead_memo
        )
        fixed = owner.reserved_system if owner.reserved_system is not None else overhead.reserve
        return counter.count_messages(messages) + overhead.reserve, fixed

    def _learn_limit(
        self, owner: RecoveryOwner, model: Any, overflow: Overflow, rejected: int, fixed: int
    ) -> LearnedLimit | None:
        """Weigh what the provider told about `model`'s limit; the limit now learned, if any."""
        reserved_output = owner.reserved_output
        if reserved_output is None:
            window = resolve_context_window(model, explicit=owner.context_window).tokens
            reserved_output = min(DEFAULT_RESERVED_OUTPUT, window // 4)
        return self.limits.learn(
            model_key(model),
            overflow,
            rejected,
            fixed=fixed,
            reserved_output=reserved_output,
            shrink=owner.overflow_shrink,
        )

    async def _report_rejection(
        self,
        owner: RecoveryOwner,
        ctx: Any,
        request_context: ModelRequestContext,
        overflow: Overflow,
        rejected: int,
        learned: LearnedLimit | None,
    ) -> None:
        limit = f'; the provider states a {overflow.limit:,}-token window' if overflow.limit else ''
        cap = learned.cap if learned is not None else None
        if cap is not None:
            within = f'; retrying within a learned cap of {cap:,} input tokens'
        elif learned is not None and learned.stated is not None:
            within = f'; retrying within the learned {learned.stated:,}-token window'
        else:
            within = '; retrying as is: the rejection teaches no plausible limit'
        event = CompactionEvent(
            policy='provider_rejected',
            reason=f'the provider rejected the request as too long ({overflow.message}, {rejected:,} tokens '
            f'by this counter{limit}){within}',
            messages_before=len(request_context.messages),
            messages_after=len(request_context.messages),
            details={'rejected_tokens': rejected, 'provider_limit': overflow.limit, 'input_cap': cap},
            run_id=getattr(ctx, 'run_id', None),
            profile=owner.name,
            compile_id=owner._events_room.next_id(),
        )
        owner._record(event)
        await owner._dispatch(event)


def model_key(model: Any) -> str:
    """A model's identity for limits learned from its provider: its id, else system and name."""
    if model is None:
        return ''
    if isinstance(model, str):
        return model
    model_id = getattr(model, 'model_id', None)
    if isinstance(model_id, str) and model_id:
        return model_id
    return f'{getattr(model, "system", "")}:{getattr(model, "model_name", type(model).__name__)}'


def step_key(ctx: Any) -> tuple[str | None, int]:
    """The request step in progress: (run id, run step)."""
    return (getattr(ctx, 'run_id', None), getattr(ctx, 'run_step', 0) or 0)


def tightened_window(
    tokens: int, source: WindowSource, learned: LearnedLimit, *, reserved_output: int
) -> tuple[int, WindowSource]:
    """The window after what a provider's rejections taught: its stated window, and an input cap."""
    stated, cap = learned.stated, learned.cap
    if stated is not None and stated < tokens:
        tokens, source = stated, 'provider'
    if cap is not None:
        # The window whose message limit lets messages + reserved_system reach `cap` and no more.
        capped = math.floor((cap + reserved_output) / (1 - DEFAULT_SAFETY_MARGIN))
        if capped < tokens:
            tokens, source = max(capped, 1), 'provider'
    return tokens, source


def _rejected_limit(learned: LearnedLimit | None, rejected: int) -> int:
    """The limit a rejected request was over, as far as is known: the learned cap or window, else just under it."""
    known = [n for n in (learned.cap, learned.stated) if n is not None] if learned is not None else []
    return min([*known, rejected - 1]) if known else max(0, rejected - 1)
