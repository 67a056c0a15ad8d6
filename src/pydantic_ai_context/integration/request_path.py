"""The request path: what the profile's pydantic-ai hooks do before each model request.

A `ContextProfile` holds one `RequestPath`. Per attempt it compiles the view (`compile_attempt`:
the capability's `before_model_request` on pydantic-ai 2.62–2.63 and 1.x, `prepare_model_request`
on >= 2.64, once the serving model is known), refuses a view that cannot fit (`compile_request`,
what every integration sends), and adds the read-back instruction to the run's requests once a view
shows a marker (`ReadbackInstruction`, the per-run state).

It receives the profile through `RequestOwner`, never by importing `profiles`.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage

from .._cache_points import CachePointPlan, add_cache_point
from .._parts import PYDANTIC_AI_MAJOR
from ..errors import ContextBudgetExceeded
from ..events import ContextUsageEvent
from ..overhead import OverheadMemo, RequestOverhead, measure_overhead
from ..readback import shows_markers, with_readback_instruction
from ..tokens import TokenCounter
from .recovery import OverflowRecovery

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext

__all__ = ('HAS_PREPARE_HOOK', 'ReadbackInstruction', 'RequestOwner', 'RequestPath')

HAS_PREPARE_HOOK: Final = hasattr(AbstractCapability, 'prepare_model_request')
"""pydantic-ai >= 2.64 runs `prepare_model_request` before every attempt, with the serving model."""

_RUNS_REMEMBERED: Final = 1_024


class RequestOwner(Protocol):
    """What `RequestPath` reads of the profile it serves, and asks it to do."""

    name: str
    readback: bool
    cache_points: bool
    reserved_system: int | None
    last_usage: ContextUsageEvent | None
    _overhead_memo: OverheadMemo
    _recovery: OverflowRecovery
    _cache_plan: CachePointPlan

    def counter_for(self, model: Any = None) -> TokenCounter: ...

    async def compile(
        self,
        messages: Sequence[ModelMessage],
        ctx: Any = None,
        *,
        model: Any = None,
        parameters: Any = None,
        whole_log: bool = False,
    ) -> list[ModelMessage]: ...

    def _set_gauge(self, usage: ContextUsageEvent | None, overhead: RequestOverhead | None) -> None: ...


class ReadbackInstruction:
    """The runs whose view has shown a marker: their requests carry the read-back instruction.

    Example:
        ```python
        from types import SimpleNamespace

        from pydantic_ai_context.integration.request_path import ReadbackInstruction

        runs = ReadbackInstruction()
        ctx = SimpleNamespace(run_id='run-1')
        assert not runs.instructed(ctx)
        runs.mark(ctx)
        assert runs.instructed(ctx)
        ```
    """

    def __init__(self) -> None:
        self._runs: collections.OrderedDict[str, None] = collections.OrderedDict()

    def instructed(self, ctx: Any) -> bool:
        """Whether `ctx`'s run already carries the instruction."""
        run_id = getattr(ctx, 'run_id', None)
        return run_id is not None and run_id in self._runs

    def mark(self, ctx: Any) -> None:
        """From now on `ctx`'s run carries the instruction (the newest 1,024 runs are remembered)."""
        run_id = getattr(ctx, 'run_id', None)
        if run_id is None:
            return
        self._runs[run_id] = None
        while len(self._runs) > _RUNS_REMEMBERED:
            self._runs.popitem(last=False)


class RequestPath:
    """Per-attempt compile, the refusal of a view that cannot fit, and the read-back instruction.

    Example:
        ```python
        from pydantic_ai import Agent
        from pydantic_ai.models.test import TestModel

        from pydantic_ai_context import profile

        ctx_profile = profile('coding', context_window=32_000)
        # The capability's hooks delegate to its request path.
        result = Agent(TestModel(), capabilities=[ctx_profile]).run_sync('hello')
        assert result.output and ctx_profile.last_usage is not None
        ```
    """

    def __init__(self) -> None:
        self.instruction = ReadbackInstruction()

    async def compile_request(
        self,
        owner: RequestOwner,
        messages: Sequence[ModelMessage],
        ctx: Any = None,
        *,
        model: Any = None,
        parameters: Any = None,
        whole_log: bool = False,
    ) -> list[ModelMessage]:
        """The body of `ContextProfile.compile_request` (see there)."""
        recovery = owner._recovery
        the_model = model if model is not None else getattr(ctx, 'model', None)
        try:
            view = await owner.compile(messages, ctx, model=model, parameters=parameters, whole_log=whole_log)
        except ContextBudgetExceeded as exc:
            notes = recovery.notes(ctx, the_model, exc.detail)
            if not notes:
                raise
            raise ContextBudgetExceeded(
                exc.used, exc.limit, detail='; '.join([exc.detail, *notes]), policy=exc.policy
            ) from exc
        usage = owner.last_usage
        assert usage is not None
        # An unknown model's window is a guess: the policies fit it, but only a known one refuses.
        known = usage.window_source != 'default'
        if known and usage.estimated_tokens is not None and usage.estimated_tokens > usage.limit_tokens:
            extra = usage.used_tokens - usage.budget_tokens
            window_text = f'the {usage.window_tokens:,}-token window'
            learned = recovery.learned_text(the_model)
            if usage.window_source == 'provider' and learned is not None:
                window_text += f' {learned}'
            raise ContextBudgetExceeded(
                usage.estimated_tokens + extra,
                usage.limit_tokens + extra,
                detail=(
                    f'the compiled view ({usage.estimated_tokens:,} tokens) with its instructions and tool '
                    f'definitions does not fit {window_text}; nothing was sent'
                ),
                policy=owner.name,
            )
        return view

    async def compile_attempt(
        self, owner: RequestOwner, ctx: Any, request_context: ModelRequestContext
    ) -> list[ModelMessage]:
        """This attempt's view; its request parameters gain the read-back instruction when due."""
        # The canonical log is the run's history; pydantic-ai 1.x writes the view back to it, so
        # there the log is not whole and the read-back tools read the side store.
        instructed = owner.readback and self.instruction.instructed(ctx)
        parameters = request_context.model_request_parameters
        if instructed:
            parameters = _with_instruction(parameters)
        view = await self.compile_request(
            owner,
            list(request_context.messages),
            ctx,
            model=request_context.model,
            parameters=parameters,
            whole_log=PYDANTIC_AI_MAJOR >= 2,
        )
        if owner.readback and not instructed and shows_markers(view):
            # The first view with a marker: from here on the run's requests carry the instruction
            # (its few tokens, new this once, are within the budget's safety margin).
            self.instruction.mark(ctx)
            parameters = _with_instruction(parameters)
            self._remeasure_instructions(owner, view, request_context.model, parameters)
        request_context.model_request_parameters = parameters
        if owner.cache_points and PYDANTIC_AI_MAJOR >= 2:
            # Only this attempt's request gains the point: 2.x sends these messages without writing
            # them to the history.
            view = add_cache_point(
                owner._cache_plan,
                view,
                model=request_context.model,
                settings=request_context.model_settings,
                conversation=getattr(ctx, 'conversation_id', None),
            )
        return view

    def _remeasure_instructions(
        self, owner: RequestOwner, view: Sequence[ModelMessage], model: Any, parameters: Any
    ) -> None:
        """Bring the gauge up to date with the instructions the request now sends."""
        overhead = measure_overhead(
            view, counter=owner.counter_for(model), parameters=parameters, memo=owner._overhead_memo
        )
        usage = owner.last_usage
        if usage is not None and owner.reserved_system is None:
            usage = dataclasses.replace(
                usage,
                instructions_tokens=overhead.instructions_tokens,
                tools_tokens=overhead.tools_tokens,
                used_tokens=usage.message_tokens + overhead.instructions_tokens + overhead.tools_tokens,
            )
        owner._set_gauge(usage, overhead)


def _with_instruction(parameters: Any) -> Any:
    """`parameters` with the read-back instruction among its instruction parts."""
    return dataclasses.replace(
        parameters, instruction_parts=with_readback_instruction(parameters.instruction_parts)
    )
