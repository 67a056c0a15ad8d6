"""Compaction events, the context-usage gauge, and `compact_messages` OpenTelemetry spans."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import warnings
from typing import Any

import pydantic_ai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracer
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RequestUsage, RunUsage

from pydantic_ai_context import (
    CompileContext,
    ContextProfile,
    ContextSession,
    HeuristicCounter,
    _tracing,
    profile,
)
from pydantic_ai_context.events import CompactionEvent, ContextUsageEvent

from .builders import History, Tool

SECRET = 'TOP-SECRET-TOOL-OUTPUT'
PAI_MAJOR = int(pydantic_ai.__version__.split('.')[0])


def blank_old_results(messages: list[ModelMessage]) -> list[ModelMessage]:
    """Every tool result but the newest request's becomes 'X' (idempotent)."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, ModelRequest)), default=-1)
    out: list[ModelMessage] = []
    for i, m in enumerate(messages):
        if isinstance(m, ModelRequest) and i != last and any(isinstance(p, ToolReturnPart) for p in m.parts):
            parts = [
                dataclasses.replace(p, content='X')
                if isinstance(p, ToolReturnPart) and p.content != 'X'
                else p
                for p in m.parts
            ]
            if any(a is not b for a, b in zip(parts, m.parts, strict=True)):
                m = dataclasses.replace(m, parts=parts)
        out.append(m)
    return out


@dataclasses.dataclass
class FakeSummariser:
    """A policy that reports summariser usage the way `summarize_window` does, through `note`."""

    name: str = 'fake_summary'

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        first = messages[0]
        assert isinstance(first, ModelRequest)
        context.note(
            'summarised 3 messages', summary_calls=1, summary_input_tokens=900, summary_output_tokens=120
        )
        return [dataclasses.replace(first, parts=list(first.parts)), *messages[1:]]


def log_with_tools() -> list[ModelMessage]:
    return (
        History()
        .user('go')
        .step(Tool('cat', {'path': 'a.py'}, f'{SECRET} ' * 50))
        .step(Tool('ls', {}, 'a.py b.py'))
        .build()
    )


def memory_tracer() -> tuple[Any, InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer('test'), exporter, provider


def compact_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == 'compact_messages']


def run_context(tracer: Any, run_id: str | None = None) -> RunContext[None]:
    ctx: RunContext[None] = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    ctx.tracer = tracer
    if run_id is not None and hasattr(ctx, 'run_id'):
        ctx.run_id = run_id
    return ctx


# --- events -----------------------------------------------------------------------------------


async def test_sync_and_async_handlers_receive_compaction_then_usage() -> None:
    sync_seen: list[Any] = []
    async_seen: list[Any] = []

    async def async_handler(event: Any) -> None:
        async_seen.append(event)

    p = ContextProfile(
        name='mine',
        steps=(blank_old_results,),
        event_handlers=[sync_seen.append, async_handler],
        counter=HeuristicCounter(),
        context_window=50_000,
    )
    view = await p.compile(log_with_tools())
    assert sync_seen == async_seen
    assert [type(e) for e in sync_seen] == [CompactionEvent, ContextUsageEvent]
    compaction, usage = sync_seen
    assert compaction.policy == 'blank_old_results'
    assert compaction.profile == 'mine'
    assert compaction.compile_id == 1
    assert compaction.tokens_saved is not None
    assert compaction.tokens_saved > 0
    assert usage.profile == 'mine'
    assert usage.compile_id == 1
    assert usage.messages == len(view)
    assert usage.compacted
    assert usage.window_tokens == 50_000
    assert usage.window_source == 'explicit'
    assert usage.window_resolved
    assert usage.message_tokens == HeuristicCounter().count_messages(view)
    assert usage.fraction == pytest.approx(usage.used_tokens / 50_000)
    assert p.last_usage is usage
    assert list(p.events) == [compaction]  # the deque keeps compaction events only
    assert compaction.to_dict()['kind'] == 'compaction'
    assert usage.to_dict()['kind'] == 'usage'


async def test_last_compile_events_and_run_events() -> None:
    p = ContextProfile(steps=(blank_old_results,), counter=HeuristicCounter())
    log = log_with_tools()
    await p.compile(log, run_context(NoOpTracer(), 'run-a'))
    assert [e.compile_id for e in p.last_compile_events] == [1]
    # A compile that changes nothing leaves `last_compile_events` empty but keeps the history.
    await p.compile(History().user('hi').build())
    assert p.last_compile_events == []
    assert len(p.events) == 1
    if hasattr(RunContext, 'run_id') or 'run_id' in {f.name for f in dataclasses.fields(RunContext)}:
        assert [e.run_id for e in p.run_events('run-a')] == ['run-a']
    assert p.run_events('other') == []


async def test_summariser_usage_and_repairs_reach_the_event() -> None:
    seen: list[Any] = []
    p = ContextProfile(steps=(FakeSummariser(),), event_handlers=[seen.append], counter=HeuristicCounter())
    broken = History().user('go').call(Tool('ls', {})).build()  # a dangling call: normalize repairs it
    await p.compile(broken)
    compactions = [e for e in seen if isinstance(e, CompactionEvent)]
    assert [e.policy for e in compactions] == ['normalize', 'fake_summary']
    assert compactions[0].repairs
    summary = compactions[1]
    assert (summary.summary_calls, summary.summary_input_tokens, summary.summary_output_tokens) == (
        1,
        900,
        120,
    )


async def test_gauge_fallback_window_and_anchoring() -> None:
    p = ContextProfile(counter=HeuristicCounter())
    log = History().user('go').answer('ok', input_tokens=5_000, output_tokens=10).user('again').build()
    await p.compile(log)
    usage = p.last_usage
    assert usage is not None
    assert usage.window_source == 'default'
    assert not usage.window_resolved
    # The view is the log, so the provider's measurement of the first request still applies.
    assert usage.anchored
    assert usage.message_tokens > 5_000
    assert not usage.compacted


def test_replace_gives_a_copy_its_own_event_history() -> None:
    p = ContextProfile(steps=(blank_old_results,), counter=HeuristicCounter())
    p.events.append(CompactionEvent(policy='x', messages_before=1, messages_after=1))
    q = p.replace(context_window=10_000)
    assert q.events is not p.events
    assert not q.events


# --- spans ------------------------------------------------------------------------------------


async def test_span_on_explicit_tracer_has_counts_and_no_content() -> None:
    tracer, exporter, _ = memory_tracer()
    p = ContextProfile(name='mine', steps=(blank_old_results,), counter=HeuristicCounter())
    log = log_with_tools()
    view = await p.compile(log, run_context(tracer))
    (span,) = compact_spans(exporter)
    attrs = dict(span.attributes or {})
    assert attrs['gen_ai.conversation.compacted'] is True
    assert attrs['compaction.strategy'] == 'mine'
    assert tuple(attrs['compaction.policies']) == ('blank_old_results',)  # type: ignore[arg-type]
    assert attrs['compaction.messages_before'] == len(log)
    assert attrs['compaction.messages_after'] == len(view)
    counter = HeuristicCounter()
    assert attrs['compaction.tokens_before'] == counter.count_messages(log)
    assert attrs['compaction.tokens_after'] == counter.count_messages(view)
    assert [e.name for e in span.events] == ['compaction.step']
    everything = repr(attrs) + repr([dict(e.attributes or {}) for e in span.events])
    assert SECRET not in everything
    assert 'a.py' not in everything


async def test_no_span_when_nothing_changed() -> None:
    tracer, exporter, _ = memory_tracer()
    p = ContextProfile(steps=(blank_old_results,), counter=HeuristicCounter())
    await p.compile(History().user('hi').build(), run_context(tracer))
    assert compact_spans(exporter) == []


async def test_without_run_context_the_global_tracer_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import trace

    tracer, exporter, _ = memory_tracer()
    monkeypatch.setattr(trace, 'get_tracer', lambda *args, **kwargs: tracer)
    p = ContextProfile(steps=(blank_old_results,), counter=HeuristicCounter())
    await p.compile(log_with_tools())
    assert len(compact_spans(exporter)) == 1


def test_tracing_off_costs_no_counting() -> None:
    def explode() -> tuple[int, int]:
        raise AssertionError('tokens must not be counted for a span that does not record')

    event = CompactionEvent(policy='x', messages_before=2, messages_after=1)
    _tracing.record_compaction(
        NoOpTracer(),
        start_time=0,
        profile='p',
        events=[event],
        messages_before=2,
        messages_after=1,
        count_tokens=explode,
        run_id=None,
        compile_id=1,
    )


def tool_model() -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < 3:
            return ModelResponse(
                parts=[ToolCallPart('read', {'path': f'f{turn}.py'}, tool_call_id=f't{turn}')],
                usage=RequestUsage(input_tokens=100 * (turn + 1), output_tokens=5),
            )
        return ModelResponse(parts=[TextPart('done')])

    return FunctionModel(respond)


async def test_agent_run_records_compact_messages_spans_on_the_run_tracer() -> None:
    _, exporter, provider = memory_tracer()
    seen: list[Any] = []
    p = ContextProfile(
        name='mine', steps=(blank_old_results,), counter=HeuristicCounter(), event_handlers=[seen.append]
    )
    settings = InstrumentationSettings(tracer_provider=provider)
    if PAI_MAJOR >= 2:
        agent = Agent(tool_model(), capabilities=[Instrumentation(settings=settings), p])
    else:
        # On 1.x only `instrument=` gives the run a real tracer (the capability does not set `ctx.tracer`).
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            agent = Agent(tool_model(), capabilities=[p], instrument=settings)  # type: ignore[call-arg]

    @agent.tool_plain
    def read(path: str) -> str:
        return f'{SECRET} {path} ' * 20

    result = await agent.run('read three files')
    assert result.output == 'done'
    spans = compact_spans(exporter)
    # Requests 3 and 4 see older tool results to blank; requests 1 and 2 have none.
    assert len(spans) == 2
    for span in spans:
        attrs = dict(span.attributes or {})
        assert attrs['gen_ai.conversation.compacted'] is True
        assert attrs['compaction.tokens_after'] < attrs['compaction.tokens_before']  # type: ignore[operator]
        assert SECRET not in repr(attrs)
        assert span.parent is not None  # nested in the run's trace
    usage = [e for e in seen if isinstance(e, ContextUsageEvent)]
    assert len(usage) == 4  # one reading per model request
    assert [u.compile_id for u in usage] == sorted(u.compile_id for u in usage)


# --- observers never break a run ---------------------------------------------------------------


def agent_with(p: ContextProfile, *, path: str) -> Agent[None, str]:
    """An agent on `tool_model()` with `p` applied through the capability or the history processors."""
    if path == 'capability':
        agent: Agent[None, str] = Agent(tool_model(), capabilities=[p])
    elif PAI_MAJOR >= 2:
        agent = Agent(tool_model(), capabilities=[p.process_history()])
    else:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            agent = Agent(tool_model(), history_processors=p.history_processors)

    @agent.tool_plain
    def read(path: str) -> str:
        return f'contents of {path} ' * 20

    return agent


def handler_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == 'pydantic_ai_context.profiles' and r.levelno >= logging.ERROR
    ]


@pytest.mark.parametrize('path', ['capability', 'history_processors'])
async def test_a_raising_handler_is_logged_once_and_the_run_goes_on(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The mistake the getting-started page used to make: `policy` exists on compaction events only.
    printed: list[str] = []
    p = profile(
        'transparent', counter=HeuristicCounter(), on_event=lambda e: printed.append(f'{e.policy} {e.reason}')
    )
    caplog.set_level(logging.DEBUG, logger='pydantic_ai_context.profiles')
    result = await agent_with(p, path=path).run('read three files')
    assert result.output == 'done'
    assert p.last_usage is not None
    assert p.last_usage.compile_id == 4
    errors = handler_errors(caplog)
    assert len(errors) == 1, 'logged once per handler, not once per request'
    assert '<lambda>' in errors[0].getMessage()
    assert 'transparent' in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert errors[0].exc_info[0] is AttributeError
    repeats = [r for r in caplog.records if r.levelno == logging.DEBUG and 'raised again' in r.getMessage()]
    assert len(repeats) == 3


async def test_every_raising_handler_is_logged_by_name_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Any] = []

    def broken_sync(event: Any) -> None:
        raise RuntimeError('boom')

    async def broken_async(event: Any) -> None:
        raise ValueError('async boom')

    p = ContextProfile(
        name='mine',
        steps=(blank_old_results,),
        counter=HeuristicCounter(),
        event_handlers=[broken_sync, broken_async, seen.append],
    )
    result = await agent_with(p, path='capability').run('read three files')
    assert result.output == 'done'
    assert sum(isinstance(e, ContextUsageEvent) for e in seen) == 4  # the healthy handler saw everything
    assert any(isinstance(e, CompactionEvent) for e in seen)
    messages = [r.getMessage() for r in handler_errors(caplog)]
    assert len(messages) == 2
    assert any('broken_sync' in m for m in messages)
    assert any('broken_async' in m for m in messages)


async def test_a_session_compile_survives_a_raising_handler(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: Any) -> None:
        raise RuntimeError('boom')

    p = ContextProfile(
        name='mine', steps=(blank_old_results,), counter=HeuristicCounter(), event_handlers=[broken]
    )
    session = ContextSession(p)
    await session.add_messages([*log_with_tools(), ModelRequest(parts=[UserPromptPart('and now?')])])
    view = await session.messages_for_request()
    assert view
    assert len(handler_errors(caplog)) == 1


@pytest.mark.parametrize('path', ['capability', 'history_processors'])
async def test_on_compaction_and_on_usage_receive_one_kind_each(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    compactions: list[str] = []
    gauges: list[float] = []
    p = profile(
        'coding',
        context_window=2_000,
        keep_recent=1,
        step=1,
        counter=HeuristicCounter(),
        on_compaction=lambda e: compactions.append(e.policy),  # `policy` is safe here
        on_usage=lambda e: gauges.append(e.fraction),  # and `fraction` here
    )
    result = await agent_with(p, path=path).run('read three files')
    assert result.output == 'done'
    assert len(gauges) == 4
    assert all(0 < g < 1 for g in gauges)
    assert compactions
    assert set(compactions) <= {
        'normalize',
        'isolate_boundaries',
        'dedupe_reads',
        'trim_tool_outputs',
        'mask_observations',
        'fit_to_budget',
    }
    assert not handler_errors(caplog)
    # `replace` keeps them (they are ordinary handlers now).
    again = p.replace(keep_recent=2)
    assert len(again.event_handlers) == 2


def test_an_event_handler_must_be_callable() -> None:
    with pytest.raises(TypeError, match='must be callable'):
        profile('transparent', on_usage=['not a function'])


# --- run_events after a real run ----------------------------------------------------------------


def long_tool_model() -> FunctionModel:
    # Counts its own calls: on pydantic-ai 1.x the compacted view replaces the run's history, so the
    # responses in `messages` are not a turn counter there.
    calls = itertools.count()

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = next(calls)
        if turn < 12:
            return ModelResponse(
                parts=[ToolCallPart('read', {'path': f'src/f{turn}.py'}, tool_call_id=f't{turn}')]
            )
        return ModelResponse(parts=[TextPart('done')])

    return FunctionModel(respond)


def add_read(agent: Agent[None, str]) -> None:
    @agent.tool_plain
    def read(path: str) -> str:
        return f'contents of {path}\n' * 60


async def test_run_events_after_an_agent_run_with_compactions() -> None:
    p = profile('coding', context_window=4_000, counter=HeuristicCounter())
    agent: Agent[None, str] = Agent(long_tool_model(), capabilities=[p])
    add_read(agent)
    result = await agent.run('read the files')
    events = p.run_events()
    assert events, 'the run compacted, so its events are there'
    assert {e.policy for e in events} >= {'mask_observations'}
    assert len({e.run_id for e in events}) == 1
    if PAI_MAJOR >= 2:
        assert events[0].run_id == result.run_id
        assert p.run_events(result.run_id) == events


async def test_run_events_on_the_users_profile_after_a_session_run() -> None:
    # A session compiles with its own copy of the profile; the user's profile still records the run.
    p = profile('coding', context_window=4_000, counter=HeuristicCounter())
    session = ContextSession(p)
    agent: Agent[None, str] = Agent(long_tool_model())
    add_read(agent)
    await session.run(agent, 'read the files')
    assert p.run_events(), 'the profile the user passed shows what its session did'
    assert p.run_events() == session.profile.run_events()
    ids = [e.compile_id for e in p.events]
    assert ids == sorted(ids)


async def test_a_tracer_that_raises_never_breaks_a_compile(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tracing, '_failed_once', False)  # the first failure logs its traceback

    class BrokenTracer:
        def start_span(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError('exporter down')

    p = ContextProfile(name='mine', steps=(blank_old_results,), counter=HeuristicCounter())
    log = [*log_with_tools(), ModelRequest(parts=[UserPromptPart('and now?')])]
    view = await p.compile(log, run_context(BrokenTracer()))
    assert view != log  # compacted, and returned
    assert any('compact_messages span failed' in r.getMessage() for r in caplog.records)
