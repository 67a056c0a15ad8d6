"""The replay loop: compile each recorded request's view, weigh it as sent, and record what it cost."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, cast, runtime_checkable

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
)
from pydantic_ai.usage import RequestUsage

from .. import _parts
from .._cache_points import CachePointPlan
from .._model_texts import ModelTexts
from ..errors import ContextBudgetExceeded
from ..overhead import measure_overhead
from ..request_tokens import RequestTokens, weigh_request
from ..tokens import TokenCounter
from .breakpoints import BreakpointCache
from .facts import FactIndex
from .recall import RecallLedger, recoverable
from .results import ReplayResult, RequestRecord


@runtime_checkable
class ViewCompiler(Protocol):
    """Anything that turns a log into the view sent to the model: a `ContextProfile`, or an adapter
    around another library's compaction (as `bench/replay.py` does for pydantic-ai-harness)."""

    name: str

    def compile(self, messages: Sequence[ModelMessage]) -> Awaitable[list[ModelMessage]]: ...


async def replay(
    messages: Sequence[ModelMessage],
    profile: ViewCompiler | None,
    *,
    context_window: int,
    counter: TokenCounter,
    cache_read_price: float = 0.1,
    summary_input_price: float = 1.0,
    summary_output_price: float = 4.0,
    facts: FactIndex | None = None,
    label: str | None = None,
    parameters: Any = None,
    overhead_tokens: int = 0,
) -> ReplayResult:
    """Replay a recorded log through `profile` (`None`: no compaction) and measure every request.

    For each `ModelResponse` at index `i`, the request's input is the replayed log up to `i`, and
    the view is `await profile.compile(input)`. The simulated provider then reports, on that
    response, `RequestUsage(input_tokens=<view tokens>, output_tokens=<response tokens>)`
    (the recorded usage measured the original agent's context, not this view), so policies that
    anchor on usage see consistent numbers. Pass a `FactIndex` built once when replaying the same
    log through several profiles. `label` names the result (default: the profile's name).

    Summariser usage comes from the `CompactionEvent`s the profile appended to `profile.events`
    during each compile: their `details` keys `summary_input_tokens`, `summary_output_tokens` and
    `summary_calls` (one call per event with input tokens when absent). A compile that raises
    `ContextBudgetExceeded` is recorded (`RequestRecord.error`), not raised.

    A profile used here should be fresh (its summary cache and events belong to this replay).

    Each request is weighed as pydantic-ai sends it (`request_tokens.weigh_request`): the messages,
    the newest request's instructions once, and what a recorded log cannot show. `parameters`
    (a `ModelRequestParameters`, e.g. from `agent_parameters`) adds the agent's tool definitions and
    instructions, measured by `measure_overhead` as the live path does, and is passed to the
    profile's `compile` so it reserves them; `overhead_tokens` adds a fixed number to every request
    (the profile should reserve it: `reserved_system`).

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context import HeuristicCounter, profile
        from pydantic_ai_context.replay import replay

        log = [
            ModelRequest(parts=[UserPromptPart('hi')]),
            ModelResponse(parts=[TextPart('hello')]),
            ModelRequest(parts=[UserPromptPart('and now?')]),
            ModelResponse(parts=[TextPart('still here')]),
        ]
        transparent = profile('transparent')
        result = asyncio.run(replay(log, transparent, context_window=32_000, counter=HeuristicCounter()))
        assert [r.index for r in result.records] == [1, 3]
        assert result.records[1].cached_tokens == result.records[0].view_tokens
        ```
    """
    index = facts if facts is not None else FactIndex.build(messages)
    texts = ModelTexts.build(messages)
    events = getattr(profile, 'events', None)
    # Read-back reaches originals only with the tools, through the refs the profile's markers name.
    archive = getattr(profile, 'archive', None) if getattr(profile, 'readback', False) else None
    ledger = RecallLedger(index, messages, archive, counter)
    replayed: list[ModelMessage] = []
    records: list[RequestRecord] = []
    previous: Sequence[ModelMessage] = ()
    previous_weight: RequestTokens | None = None
    breakpoints = BreakpointCache(_sent)
    # The breakpoint a profile adds on Anthropic and Bedrock (`ContextProfile.cache_points`).
    plan = CachePointPlan() if getattr(profile, 'cache_points', False) else None
    last_event: object = events[-1] if events else None
    for i, message in enumerate(messages):
        if not isinstance(message, ModelResponse):
            replayed.append(message)
            continue
        log_input = list(replayed)
        error: str | None = None
        compile_ms = 0.0
        if profile is None:
            view = log_input
        else:
            started = time.perf_counter()
            try:
                compiled = (
                    profile.compile(log_input)
                    if parameters is None
                    else cast(Any, profile).compile(log_input, parameters=parameters)
                )
                view = await compiled
            except ContextBudgetExceeded as exc:
                view, error = log_input, str(exc)
            compile_ms = (time.perf_counter() - started) * 1000
            # The recorded model answered before the next request: a summary written ahead in the
            # background lands meanwhile (without this a replay never yields to it, and a
            # summarising profile looks like one that only drops).
            settle = getattr(profile, 'settle_background', None)
            if settle is not None:
                await settle()
        weight = _weigh(view, counter, parameters, overhead_tokens, per_message=True)
        view_tokens = weight.total_tokens
        cached, kept_whole = _cached_prefix(view, weight, previous, previous_weight)
        point = plan.place(view, conversation=None) if plan is not None and error is None else None
        breakpoint_cached = breakpoints.read(view, weight, point=point)
        output_tokens = counter.count_message(message)
        fact_share, needed_share = index.retention(i, view)
        present = index.present(view)
        recall, reached = ledger.charge(i, view, view_tokens, present, history=log_input)
        needed = index.needed_before(i)
        lacking = [k for k in needed if k not in present]
        reachable = recoverable(index, lacking, view, ledger.spans, reached)
        new_events, last_event = _new_events(events, last_event)
        summary_calls, summary_in, summary_out = _summary_usage(new_events)
        records.append(
            RequestRecord(
                index=i,
                log_messages=len(log_input),
                log_tokens=_weigh(log_input, counter, parameters, overhead_tokens).total_tokens,
                instructions_tokens=weight.instructions_tokens,
                overhead_tokens=weight.overhead_tokens,
                view_messages=len(view),
                view_tokens=view_tokens,
                cached_tokens=cached,
                prefix_break=not kept_whole,
                breakpoint_cached_tokens=breakpoint_cached,
                perfect_cached_tokens=min(view_tokens, previous_weight.total_tokens)
                if previous_weight is not None
                else 0,
                output_tokens=output_tokens,
                compile_ms=compile_ms,
                over_window=error is not None or view_tokens > context_window,
                facts=len(index.known_before(i)),
                fact_retention=fact_share,
                needed_facts=len(index.needed_before(i)),
                needed_fact_retention=needed_share,
                summary_calls=summary_calls,
                summary_input_tokens=summary_in,
                summary_output_tokens=summary_out,
                dropped_messages=sum(_int(e, 'dropped_messages') for e in new_events),
                no_summary=_no_summary(new_events),
                summarised=any((_parts.marker(m) or {}).get('kind') == 'summary' for m in view),
                error=error,
                recall_missing=recall.used_missing,
                recall_unrecoverable=recall.unrecoverable,
                recall_round_trips=recall.round_trips,
                recall_cached_tokens=recall.cached_tokens,
                recall_uncached_tokens=recall.uncached_tokens,
                recall_kept_round_trips=recall.kept_round_trips,
                recall_kept_tokens=recall.kept_uncached_tokens
                + recall.kept_cached_tokens
                + recall.carried_tokens,
                recall_kept_uncached_tokens=recall.kept_uncached_tokens,
                needed_or_recoverable=(len(needed) - len(lacking) + reachable) / len(needed)
                if needed
                else 1.0,
                model_texts_kept=texts.kept(i, view),
            )
        )
        replayed.append(
            dataclasses.replace(
                message, usage=RequestUsage(input_tokens=view_tokens, output_tokens=output_tokens)
            )
        )
        previous, previous_weight = view, weight
    close = getattr(profile, 'close_background', None)
    if close is not None and records:
        # Summaries made ahead and never used are spent too: charged to the last request.
        await close()
        late, last_event = _new_events(events, last_event)
        if late:
            calls, tokens_in, tokens_out = _summary_usage(late)
            last = records[-1]
            records[-1] = dataclasses.replace(
                last,
                summary_calls=last.summary_calls + calls,
                summary_input_tokens=last.summary_input_tokens + tokens_in,
                summary_output_tokens=last.summary_output_tokens + tokens_out,
            )
    name = label or ('none' if profile is None else str(getattr(profile, 'name', type(profile).__name__)))
    return ReplayResult(
        profile=name,
        context_window=context_window,
        records=tuple(records),
        messages=replayed,
        cache_read_price=cache_read_price,
        summary_input_price=summary_input_price,
        summary_output_price=summary_output_price,
    )


def _weigh(
    view: Sequence[ModelMessage],
    counter: TokenCounter,
    parameters: Any,
    extra: int,
    *,
    per_message: bool = False,
) -> RequestTokens:
    overhead = (
        measure_overhead(view, counter=counter, parameters=parameters) if parameters is not None else None
    )
    return weigh_request(
        view, counter=counter, overhead=overhead, overhead_tokens=extra, per_message=per_message
    )


def _cached_prefix(
    view: Sequence[ModelMessage],
    weight: RequestTokens,
    previous: Sequence[ModelMessage],
    previous_weight: RequestTokens | None,
) -> tuple[int, bool]:
    """The request's leading tokens a provider could serve from the previous request's cache, and
    whether the previous request was a prefix of this one (`False` is a prefix break).

    Tools and instructions lead the request: unchanged, they are cached with the longest run of
    leading messages equal to the previous view's; changed, nothing is. The first request has no
    previous one: nothing cached, no break."""
    if previous_weight is None:
        return 0, True
    fixed = (weight.instructions, weight.instructions_tokens, weight.tools_tokens, weight.extra_tokens)
    before_fixed = (
        previous_weight.instructions,
        previous_weight.instructions_tokens,
        previous_weight.tools_tokens,
        previous_weight.extra_tokens,
    )
    if fixed != before_fixed:
        return 0, False
    cached = weight.instructions_tokens + weight.tools_tokens + weight.extra_tokens
    assert weight.per_message is not None
    equal = 0
    for message, tokens, before in zip(view, weight.per_message, previous, strict=False):
        if message is not before and _sent(message) != _sent(before):
            break
        cached += tokens
        equal += 1
    return cached, equal == len(previous)


def _sent(message: ModelMessage) -> ModelMessage:
    """`message` as a provider receives it: metadata (this package's markers included) is never sent."""
    originals: list[Any] = list(message.parts)
    parts = [
        dataclasses.replace(part, metadata=None) if getattr(part, 'metadata', None) else part
        for part in originals
    ]
    sent: Any = message
    return cast(ModelMessage, dataclasses.replace(sent, parts=parts, metadata=None))


def _no_summary(events: Sequence[Any]) -> str | None:
    """The latest reason a summarising step gave for making no summary in this compile."""
    for event in reversed(events):
        reason = getattr(event, 'no_summary', None)
        if isinstance(reason, str):
            return reason
    return None


def _summary_usage(events: Sequence[Any]) -> tuple[int, int, int]:
    """Summariser calls, input and output tokens the events report (a call per event with input
    tokens when it does not count its calls)."""
    calls = sum(_int(e, 'summary_calls') or (1 if _int(e, 'summary_input_tokens') else 0) for e in events)
    return (
        calls,
        sum(_int(e, 'summary_input_tokens') for e in events),
        sum(_int(e, 'summary_output_tokens') for e in events),
    )


def _new_events(events: Any, last: object) -> tuple[list[Any], object]:
    """Events appended to the profile's deque since `last` (compared by identity)."""
    if not events:
        return [], last
    new: list[Any] = []
    for event in reversed(events):
        if event is last:
            break
        new.append(event)
    new.reverse()
    return new, events[-1]


def _int(event: Any, key: str) -> int:
    details = getattr(event, 'details', None)
    value = details.get(key) if isinstance(details, dict) else None
    return int(value) if isinstance(value, int | float) else 0
