"""OpenTelemetry spans for compactions: one `compact_messages` span per compile that changed the view.

The span goes on the run's tracer (`RunContext.tracer`, a no-op tracer unless pydantic-ai's
instrumentation is on), or, when compiling outside a run, on the global tracer provider's
`pydantic_ai_context` tracer. Its attributes follow pydantic-ai-harness's `compact_messages` span
(`gen_ai.conversation.compacted`, `compaction.*`) so both land in the same Logfire queries. Spans
never carry message content: only counts, token numbers and policy names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from .events import CompactionEvent

SPAN_NAME: Final = 'compact_messages'
"""Static, low-cardinality span name; the profile and policies are attributes."""
STEP_EVENT_NAME: Final = 'compaction.step'
"""Name of the span event recorded for each step that changed the view."""
TRACER_NAME: Final = 'pydantic_ai_context'

logger = logging.getLogger(__name__)
_failed_once = False


def tracer_for(run_context: Any) -> Any:
    """The run's tracer, else the global `pydantic_ai_context` tracer, else `None` (no opentelemetry)."""
    tracer = getattr(run_context, 'tracer', None) if run_context is not None else None
    if tracer is not None:
        return tracer
    try:
        from opentelemetry import trace
    except ImportError:  # pragma: no cover - opentelemetry-api is a dependency of pydantic-ai-slim
        return None
    return trace.get_tracer(TRACER_NAME)


def record_compaction(
    tracer: Any,
    *,
    start_time: int,
    profile: str,
    events: Sequence[CompactionEvent],
    messages_before: int,
    messages_after: int,
    count_tokens: Callable[[], tuple[int, int]],
    run_id: str | None,
    compile_id: int,
) -> None:
    """Emit one `compact_messages` span covering a compile (from `start_time`, in ns) that changed the view.

    `count_tokens` gives (tokens before, tokens after) and runs only when the span records, so a
    run without tracing pays for starting a no-op span and nothing else. Span export is an observer:
    a tracer that raises is logged (with its traceback the first time) and never breaks the run.
    """
    global _failed_once
    if tracer is None or not events:
        return
    try:
        _record(
            tracer,
            start_time,
            profile,
            events,
            messages_before,
            messages_after,
            count_tokens,
            run_id,
            compile_id,
        )
    except Exception:
        if _failed_once:
            logger.debug('recording the %s span failed again', SPAN_NAME, exc_info=True)
        else:
            _failed_once = True
            logger.exception('recording the %s span failed; the run goes on', SPAN_NAME)


def _record(
    tracer: Any,
    start_time: int,
    profile: str,
    events: Sequence[CompactionEvent],
    messages_before: int,
    messages_after: int,
    count_tokens: Callable[[], tuple[int, int]],
    run_id: str | None,
    compile_id: int,
) -> None:
    span = tracer.start_span(SPAN_NAME, start_time=start_time)
    try:
        if not span.is_recording():
            return
        tokens_before, tokens_after = count_tokens()
        policies = list(dict.fromkeys(e.policy for e in events))
        attributes: dict[str, Any] = {
            # GenAI semantic-convention flag: set it `true` only, never `false`.
            'gen_ai.conversation.compacted': True,
            'compaction.strategy': profile,
            'compaction.policies': policies,
            'compaction.messages_before': messages_before,
            'compaction.messages_after': messages_after,
            'compaction.tokens_before': tokens_before,
            'compaction.tokens_after': tokens_after,
            'compaction.steps': len(events),
            'compaction.repairs': sum(len(e.repairs) for e in events),
            'compaction.summary_calls': sum(e.summary_calls for e in events),
            'compaction.summary_input_tokens': sum(e.summary_input_tokens for e in events),
            'compaction.summary_output_tokens': sum(e.summary_output_tokens for e in events),
            'pydantic_ai_context.compile_id': compile_id,
        }
        if run_id is not None:
            attributes['pydantic_ai_context.run_id'] = run_id
        span.set_attributes(attributes)
        for event in events:
            # Reasons are left out on purpose: policies may quote paths or commands from the log.
            step: dict[str, Any] = {
                'compaction.policy': event.policy,
                'compaction.messages_before': event.messages_before,
                'compaction.messages_after': event.messages_after,
                'compaction.repairs': len(event.repairs),
            }
            if event.tokens_before is not None and event.tokens_after is not None:
                step['compaction.tokens_before'] = event.tokens_before
                step['compaction.tokens_after'] = event.tokens_after
            if event.summary_calls:
                step['compaction.summary_calls'] = event.summary_calls
            span.add_event(STEP_EVENT_NAME, step)
    finally:
        span.end()
