"""The context gauge: what a compile measured, as the `ContextUsageEvent` a profile keeps and sends.

A `ContextProfile` holds one `ContextGauge`. Before the chain runs it measures what the request sends
besides its messages (`overhead`: instructions and tool definitions, see `overhead`); after it, it
weighs the view (`measure`), anchored on the provider's usage when the previous view of the same run
was what that request sent (see `tokens.measure_context`), and records the compile's
`compact_messages` span (see `_tracing`). It remembers the latest view sent (`sent`); a rejected
attempt measured nothing (`forget`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage

from . import _tracing
from .budget import ContextBudget
from .events import CompactionEvent, ContextUsageEvent
from .overhead import OverheadMemo, RequestOverhead, measure_overhead
from .request_tokens import weigh_request
from .tokens import TokenCounter, measure_context

__all__ = ('ContextGauge', 'run_tool_definitions')


class ContextGauge:
    """Measures each compile of one profile: the overhead before, the usage event after.

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelRequest

        from pydantic_ai_context import profile

        p = profile('transparent', context_window=32_000)
        asyncio.run(p.compile([ModelRequest.user_text_prompt('hello')]))
        assert p.last_usage is not None and p.last_usage.messages == 1  # the gauge's reading
        ```
    """

    def __init__(self) -> None:
        # The latest view and its run id: what that request was sent, to anchor the next gauge on
        # the provider's usage (see `tokens.measure_context`).
        self._last_sent: tuple[str | None, list[ModelMessage]] | None = None

    def sent(self, run_id: str | None, view: list[ModelMessage]) -> None:
        """`view` is what the latest request of run `run_id` sends."""
        self._last_sent = (run_id, view)

    def forget(self) -> None:
        """The latest attempt was rejected: it anchors nothing."""
        self._last_sent = None

    @staticmethod
    def overhead(
        messages: Sequence[ModelMessage], ctx: Any, counter: TokenCounter, parameters: Any, memo: OverheadMemo
    ) -> RequestOverhead:
        """What the request sends besides `messages`: from `parameters`, else the run's tool definitions."""
        definitions = None
        if parameters is None and ctx is not None:
            definitions = run_tool_definitions(ctx)
        return measure_overhead(
            messages, counter=counter, parameters=parameters, tool_definitions=definitions, memo=memo
        )

    def measure(
        self,
        ids: tuple[str, str | None, int],
        view: list[ModelMessage],
        log: Sequence[ModelMessage],
        budget: ContextBudget,
        counter: TokenCounter,
        *,
        overhead: RequestOverhead,
        explicit: bool,
    ) -> ContextUsageEvent:
        """The usage event of a compile; `ids`: (profile, run id, compile id); `explicit`: the profile
        sets `reserved_system` itself."""
        profile, run_id, compile_id = ids
        reading = None
        if self._last_sent is not None and self._last_sent[0] == run_id:
            reading = measure_context(
                view, counter=counter, sent=self._last_sent[1], reserved_system=budget.reserved_system
            )
        if reading is None or not reading.anchored:
            reading = measure_context(view, counter=counter, log=log, reserved_system=budget.reserved_system)
        # The request as pydantic-ai sends it (replay, inspect and history_stats weigh it the same way).
        weight = weigh_request(view, counter=counter, overhead=None if explicit else overhead)
        if (
            reading.anchored
            and reading.provider_tokens < budget.reserved_system + weight.counted_instructions_tokens
        ):
            # A "provider" that did not count the tools or the instructions (a test model's estimate,
            # a recorded log's usage) anchors nothing.
            reading = measure_context(view, counter=counter, reserved_system=budget.reserved_system)
        counted_instructions = weight.counted_instructions_tokens
        instructions = weight.instructions_tokens
        tools = budget.reserved_system if explicit else weight.tools_tokens
        message_tokens = max(0, reading.tokens - counted_instructions)
        return ContextUsageEvent(
            message_tokens=message_tokens,
            instructions_tokens=instructions,
            tools_tokens=tools,
            view_tokens=reading.tokens,
            used_tokens=message_tokens + instructions + tools,
            window_tokens=budget.context_window,
            limit_tokens=budget.limit,
            soft_limit_tokens=budget.soft_limit,
            window_source=budget.window_source,
            reserved_output_tokens=budget.reserved_output,
            reserved_system_tokens=budget.reserved_system,
            safety_tokens=budget.safety_tokens,
            input_limit_tokens=budget.input_limit,
            soft_threshold=budget.soft_threshold,
            anchored=reading.anchored,
            counter=counter.name,
            counter_exact=getattr(counter, 'exact', False) is True,  # a user's counter may not say
            estimated_tokens=reading.estimated_tokens,
            messages=len(view),
            log_messages=len(log),
            compacted=len(view) != len(log) or any(a is not b for a, b in zip(view, log, strict=False)),
            run_id=run_id,
            profile=profile,
            compile_id=compile_id,
        )

    @staticmethod
    def trace(
        ctx: Any,
        ids: tuple[str, str | None, int],
        *,
        start_time: int,
        events: Sequence[CompactionEvent],
        log: Sequence[ModelMessage],
        view: list[ModelMessage],
        counter: TokenCounter,
    ) -> None:
        """Record a `compact_messages` span on the run's tracer for a compile that changed the view."""
        profile, run_id, compile_id = ids
        _tracing.record_compaction(
            _tracing.tracer_for(ctx),
            start_time=start_time,
            profile=profile,
            events=events,
            messages_before=len(log),
            messages_after=len(view),
            count_tokens=lambda: (counter.count_messages(log), counter.count_messages(view)),
            run_id=run_id,
            compile_id=compile_id,
        )


def run_tool_definitions(ctx: Any) -> list[Any] | None:
    """The run's tool definitions, as a history processor's `RunContext` knows them, or `None`."""
    manager = getattr(ctx, 'tool_manager', None)
    if manager is None or getattr(manager, 'tools', None) is None:
        return None
    try:
        return list(manager.tool_defs)
    except Exception:  # a tool manager not prepared for this step knows no definitions yet
        return None
