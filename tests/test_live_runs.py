"""Live agent runs, the way an application drives them (pydantic-ai 2.x, the profile as a capability).

Each run uses a `FunctionModel` whose function checks every request it receives (a valid history:
it starts with a request, calls and results are paired) and measures it whole (messages +
instructions + tool definitions + a native output schema, with the library's counter), on a small
window where compaction matters and tools return realistic large outputs. Entry points: `run`,
`run_sync`, `run_stream`, `iter`, `run_stream_events`, continued runs (`message_history=`,
`conversation=`); structured output, retries, parallel and deferred calls, multimodal returns,
read-back, providers that reject, `FallbackModel`, observers that raise.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic_ai
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, exceptions
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
)
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.usage import RequestUsage

from pydantic_ai_context import (
    CompactionEvent,
    ContextProfile,
    ContextUsageEvent,
    profile,
    resolve_context_window,
    validate_view,
)
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR
from pydantic_ai_context.integration._overflow import context_overflow
from pydantic_ai_context.tokens import default_counter

from .realistic import definition_tokens, prose, strip_instructions

pytestmark = pytest.mark.skipif(PYDANTIC_AI_MAJOR < 2, reason='live runs of the 2.x capability')

PAI_VERSION = tuple(int(x) for x in pydantic_ai.__version__.split('.')[:2])
COUNTER = default_counter()
INSTRUCTIONS = 'You are a careful coding agent.\n\n' + prose(250, seed=7)
REF = re.compile(r"read_context\('([^']+)'(?:, offset=(\d+))?\)")
PNG = b'\x89PNG\r\n\x1a\n' + bytes(range(256)) * 40

Script = Callable[[int, list[ModelMessage], AgentInfo], ModelResponse]


def source_file(path: str, lines: int = 250) -> str:
    """A file as `read_file` returns it: about 13 tokens a line."""
    seed = sum(map(ord, path))
    return f'# {path}\n' + '\n'.join(f'{i + 1:4d}  ' + prose(10, seed=seed * 1000 + i) for i in range(lines))


def request_total(messages: Sequence[ModelMessage], info: AgentInfo) -> int:
    """The whole request as the provider gets it, counted independently of the profile."""
    total = COUNTER.count_messages(strip_instructions(messages))
    total += COUNTER.count_text(info.instructions) if info.instructions else 0
    total += sum(definition_tokens(COUNTER, t) for t in [*info.function_tools, *info.output_tools])
    output_object = info.model_request_parameters.output_object
    if output_object is not None:
        total += COUNTER.count_text(json.dumps(output_object.json_schema, separators=(',', ':')))
    return total


@dataclass
class LiveModel:
    """A `FunctionModel` (streamed or not) that checks and measures every request, then follows `script`.

    `script(n, messages, info)` answers the n-th request (from 1). Responses report the measured
    input as provider usage, as a real provider does.
    """

    script: Script
    name: str = 'live'
    window: int | None = None
    rejects_over: int | None = None
    """Reject a request over this many tokens as too long (a deployment smaller than its published window)."""
    rejected: list[int] = field(default_factory=list[int])
    totals: list[int] = field(default_factory=list[int])
    seen: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])
    infos: list[AgentInfo] = field(default_factory=list[AgentInfo])

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        validate_view(messages)  # invariants 2 and 7: what a provider would reject never reaches it
        total = request_total(messages, info)
        if self.rejects_over is not None and total > self.rejects_over:
            self.rejected.append(total)
            message = f'prompt is too long: {total} tokens > {self.rejects_over} maximum'
            raise exceptions.ModelHTTPError(400, self.name, body={'error': {'message': message}})
        self.totals.append(total)
        self.seen.append(list(messages))
        self.infos.append(info)
        response = self.script(len(self.totals), messages, info)
        usage = RequestUsage(input_tokens=total, output_tokens=COUNTER.count_messages([response]))
        return dataclasses.replace(response, usage=usage)

    async def stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        response = self.respond(messages, info)
        for index, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                delta = DeltaToolCall(part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id)
                yield {index: delta}

    def model(self) -> FunctionModel:
        model_profile: Any = {'context_window': self.window} if self.window else None
        return FunctionModel(
            self.respond, stream_function=self.stream, model_name=self.name, profile=model_profile
        )


def read_call(n: int, path: str | None = None) -> ToolCallPart:
    return ToolCallPart('read_file', {'path': path or f'src/pkg/module_{n:02d}.py'}, tool_call_id=f'c{n}')


def reading(steps: int, answer: str = 'All read.') -> Script:
    """Read `steps` files, one a request, then answer."""

    def script(n: int, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if n <= steps:
            return ModelResponse(parts=[read_call(n)])
        return ModelResponse(parts=[TextPart(answer)])

    return script


def then(live: LiveModel, script: Script) -> None:
    """Follow `script` from the next request on, counting its requests from 1 again."""
    done = len(live.totals)
    live.script = lambda n, messages, info: script(n - done, messages, info)


def coding_agent(live: LiveModel, ctx_profile: ContextProfile, **kwargs: Any) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(
        live.model(), instructions=INSTRUCTIONS, capabilities=[ctx_profile], **kwargs
    )

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the repository; returns its numbered lines."""
        return source_file(path)

    return agent


def texts(messages: Sequence[ModelMessage]) -> str:
    return '\n'.join(str(getattr(p, 'content', '')) for m in messages for p in m.parts)


def assert_log_complete(log: Sequence[ModelMessage], requests: int) -> None:
    """The canonical log holds every request and response of the run, uncompacted."""
    assert sum(isinstance(m, ModelResponse) for m in log) == requests
    go_on = [ModelRequest.user_text_prompt('next')] if isinstance(log[-1], ModelResponse) else []
    validate_view([*log, *go_on])  # paired and alternating: a valid history to go on from
    assert 'original: read_context' not in texts(log), 'a compacted view leaked into the canonical log'


# --- entry points --------------------------------------------------------------------------------


async def _run_with(
    agent: Agent[None, Any], how: str, prompt: str, history: Any = None
) -> list[ModelMessage]:
    if how == 'run':
        return (await agent.run(prompt, message_history=history)).all_messages()
    if how == 'run_sync':  # in a worker thread: run_sync owns its event loop
        result = await asyncio.to_thread(agent.run_sync, prompt, message_history=history)
        return result.all_messages()
    if how == 'run_stream':
        async with agent.run_stream(prompt, message_history=history) as stream:
            await stream.get_output()
        return stream.all_messages()
    if how == 'iter':  # node by node, streaming each model request's events
        async with agent.iter(prompt, message_history=history) as run:
            node = run.next_node
            while not Agent.is_end_node(node):
                if Agent.is_model_request_node(node):
                    async with node.stream(run.ctx) as events:
                        async for _ in events:
                            pass
                node = await run.next(node)
            assert run.result is not None
            return run.result.all_messages()
    assert how == 'run_stream_events'
    async with agent.run_stream_events(prompt, message_history=history) as events:
        async for event in events:
            last = event
    return last.result.all_messages()  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize('how', ['run', 'run_sync', 'run_stream', 'iter', 'run_stream_events'])
async def test_every_entry_point_sends_valid_requests_that_fit_and_keeps_the_log(how: str) -> None:
    steps, window = 8, 12_000
    live = LiveModel(reading(steps))
    agent = coding_agent(live, profile('coding', context_window=window))
    log = await _run_with(agent, how, 'Read the modules.')
    assert len(live.totals) == steps + 1
    assert_log_complete(log, steps + 1)
    # Continue the conversation: the log given back is never altered, the next run fits too.
    then(live, reading(steps, 'Read again.'))
    snapshot = copy.deepcopy(log)
    again = await _run_with(agent, how, 'Read them once more.', history=log)
    assert log == snapshot
    assert_log_complete(again, 2 * steps + 2)
    assert max(live.totals) <= window
    # The compaction mattered: the log holds several times what any request carried.
    assert COUNTER.count_messages(again) > 3 * window
    # The newest result is always sent whole.
    newest = [v[-1].parts[0] for v in live.seen if isinstance(v[-1].parts[0], ToolReturnPart)]
    assert len(newest) == 2 * steps
    assert all(p.content == source_file(p.content[2:].split('\n')[0]) for p in newest)


@pytest.mark.skipif(PAI_VERSION < (2, 66), reason='Conversation is pydantic-ai 2.66+')
async def test_a_conversation_continued_run_after_run_keeps_every_request_in_the_window() -> None:
    from pydantic_ai.conversation import ConversationTypeAdapter

    window, turns = 10_000, 3
    live = LiveModel(reading(0))
    agent = coding_agent(live, profile('coding', context_window=window))
    conversation = None
    for turn in range(turns):
        then(live, reading(4, 'Done.'))
        if conversation is not None:  # stored and loaded between turns, as an application does
            conversation = ConversationTypeAdapter.validate_json(
                ConversationTypeAdapter.dump_json(conversation)
            )
        result = await agent.run(f'Turn {turn}: read four modules.', conversation=conversation)
        conversation = result.conversation
    assert conversation is not None
    assert_log_complete(conversation.messages, 5 * turns)
    assert max(live.totals) <= window
    # Earlier turns are a digest, each turn's prompt and answer stay visible.
    final = texts(live.seen[-1])
    assert all(f'Turn {t}:' in final for t in range(turns))


# --- structured output, retries, parallel calls, multimodal returns -------------------------------


class Finding(BaseModel):
    path: str
    summary: str


def investigating(output: str) -> Script:
    """Parallel reads, a flaky tool, a screenshot, then the structured answer (`output` kind)."""

    def script(n: int, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if n <= 6:
            calls: list[Any] = [read_call(10 * n + k) for k in range(2)]
            if n == 2:
                calls.append(ToolCallPart('run_tests', {'target': 'tests/test_io.py'}, tool_call_id=f't{n}'))
            if n == 3:
                calls.append(ToolCallPart('screenshot', {'page': 'settings'}, tool_call_id=f's{n}'))
            return ModelResponse(parts=calls)
        data = {'path': 'src/pkg/module_10.py', 'summary': 'ok'}
        if output == 'tool':
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, data, tool_call_id='out')])
        return ModelResponse(parts=[TextPart(json.dumps(data))])

    return script


@pytest.mark.parametrize('end_strategy', ['early', 'exhaustive'])
@pytest.mark.parametrize('output', ['tool', 'native', 'prompted'])
async def test_structured_output_retries_parallel_calls_and_images_fit(
    output: str, end_strategy: str
) -> None:
    from pydantic_ai import NativeOutput, PromptedOutput

    window = 12_000
    output_type: Any = {
        'tool': Finding,
        'native': NativeOutput(Finding),
        'prompted': PromptedOutput(Finding),
    }[output]
    live = LiveModel(investigating(output))
    agent = coding_agent(
        live, profile('coding', context_window=window), output_type=output_type, end_strategy=end_strategy
    )
    attempts: list[str] = []

    @agent.tool_plain
    def run_tests(target: str) -> str:
        attempts.append(target)
        if len(attempts) == 1:
            raise ModelRetry(f'ERROR collecting {target}: ImportError in src/pkg/io.py line 12')
        return 'passed'

    @agent.tool_plain
    def screenshot(page: str) -> ToolReturn:
        return ToolReturn(
            return_value=f'screenshot of {page} saved to shots/{page}.png',
            content=[f'{page}:', BinaryContent(PNG, media_type='image/png')],
            metadata={'page': page},
        )

    result = await agent.run('Find where the settings are parsed.')
    assert result.output == Finding(path='src/pkg/module_10.py', summary='ok')
    assert max(live.totals) <= window
    assert_log_complete(result.all_messages(), len(live.totals))
    # The retry reached the model with its error line (a `retried` result on 2.68, a retry prompt before).
    retry = [p for p in live.seen[2][-1].parts if getattr(p, 'tool_call_id', None) == 't2']
    assert len(retry) == 1
    feedback = retry[0].model_response() if isinstance(retry[0], RetryPromptPart) else str(retry[0].content)
    assert 'src/pkg/io.py line 12' in feedback
    # The screenshot's image reached the model next to its result.
    after_shot = live.seen[3][-1]
    assert any(
        isinstance(c, BinaryContent) for p in after_shot.parts for c in getattr(p, 'content', []) or []
    )


# --- deferred tools and human approval -----------------------------------------------------------


async def test_an_approval_resumed_in_a_later_run_reaches_the_model_paired() -> None:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    window = 9_000

    def script(n: int, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if n <= 5:
            return ModelResponse(parts=[read_call(n)])
        if n == 6:  # a call that needs approval, in parallel with one that does not
            delete = ToolCallPart('delete_file', {'path': 'src/pkg/module_01.py'}, tool_call_id='del')
            return ModelResponse(parts=[delete, read_call(6)])
        return ModelResponse(parts=[TextPart(f'Finished: {messages[-1].parts[0].content}')])

    live = LiveModel(script)
    agent = coding_agent(
        live, profile('coding', context_window=window), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return f'deleted {path}'

    paused = await agent.run('Remove the dead module.')
    assert isinstance(paused.output, DeferredToolRequests)
    assert [c.tool_call_id for c in paused.output.approvals] == ['del']
    log = paused.all_messages()
    snapshot = copy.deepcopy(log)
    resumed = await agent.run(
        message_history=log, deferred_tool_results=DeferredToolResults(approvals={'del': True})
    )
    assert log == snapshot
    assert resumed.output == 'Finished: deleted src/pkg/module_01.py'
    assert max(live.totals) <= window
    last = live.seen[-1][-1]
    assert {p.tool_call_id for p in last.parts if isinstance(p, ToolReturnPart)} == {'del', 'c6'}


# --- reading back ------------------------------------------------------------------------------


async def test_the_model_reads_back_pages_searches_and_recovers_from_bad_refs() -> None:
    window = 10_000
    answers: dict[str, Any] = {}

    def script(n: int, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if n <= 6:
            return ModelResponse(parts=[read_call(n)])
        if n == 7:  # a ref from a marker the view shows
            answers['refs'] = [r for r, _ in REF.findall(texts(messages))]
            answers['instructed'] = 'read_context' in (info.instructions or '')
            return ModelResponse(parts=[ToolCallPart('read_context', {'ref': 'c1'}, tool_call_id='r1')])
        if n == 8:  # the next page, where the header says it starts
            answers['page1'] = last
            match = REF.search(str(last.content).splitlines()[0])
            assert match is not None
            args = {'ref': match.group(1), 'offset': int(match.group(2))}
            return ModelResponse(parts=[ToolCallPart('read_context', args, tool_call_id='r2')])
        if n == 9:
            answers['page2'] = last
            return ModelResponse(
                parts=[ToolCallPart('read_context', {'ref': 'call_nope'}, tool_call_id='r3')]
            )
        if n == 10:
            answers['bad'] = last
            return ModelResponse(
                parts=[ToolCallPart('search_context', {'query': 'module_02.py'}, tool_call_id='r4')]
            )
        answers['search'] = last
        return ModelResponse(parts=[TextPart('Done.')])

    live = LiveModel(script)
    result = await coding_agent(live, profile('coding', context_window=window)).run('Read, then look back.')
    assert result.output == 'Done.'
    assert max(live.totals) <= window
    assert answers['instructed']
    assert 'c1' in answers['refs']
    original = source_file('src/pkg/module_01.py').splitlines()
    page1, page2 = str(answers['page1'].content).splitlines(), str(answers['page2'].content).splitlines()
    assert page1[0].startswith('[c1: read_file result, lines 1-200 of 251; next page:')
    assert page1[1:] == original[:200]
    assert page2[1:] == original[200:]
    # A bad ref is a result the model can act on, and the run goes on.
    assert 'unknown ref' in str(answers['bad'].content)
    assert 'search_context' in str(answers['bad'].content)
    assert str(answers['search'].content).splitlines()[1].startswith('- c2 (read_file result)')


# --- providers that reject, fallback chains ----------------------------------------------------


def small_and_large(small: LiveModel) -> tuple[FallbackModel, list[int]]:
    """A `FallbackModel` whose 128k primary is down: `small` (16k) serves every request."""
    primary: list[int] = []

    def down(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        primary.append(request_total(messages, info))
        raise exceptions.ModelHTTPError(503, 'large', body='overloaded')

    large = FunctionModel(down, model_name='large', profile={'context_window': 128_000})
    return FallbackModel(large, small.model()), primary


async def test_a_fallback_model_gets_views_that_fit_its_smallest_model() -> None:
    small = LiveModel(reading(12), name='small', window=16_000)
    fallback, primary = small_and_large(small)
    assert resolve_context_window(fallback) == (16_000, 'model-profile')
    ctx_profile = profile('coding')  # no explicit window: each model's profile knows its own
    result = await coding_agent(small, ctx_profile).run('Read the modules.', model=fallback)
    assert result.output == 'All read.'
    assert len(primary) == len(small.totals) == 13
    # Fitted to the default 32k guess, the 16k model got requests over its window.
    assert max(small.totals) <= 16_000
    assert ctx_profile.last_usage is not None
    assert ctx_profile.last_usage.window_tokens == 16_000


async def test_a_fallback_models_too_long_rejection_is_retried_tighter() -> None:
    small = LiveModel(reading(10), name='small', window=16_000, rejects_over=6_000)
    fallback, _ = small_and_large(small)
    ctx_profile = profile('coding')
    result = await coding_agent(small, ctx_profile).run('Read the modules.', model=fallback)
    assert result.output == 'All read.'
    assert small.rejected, 'the hidden limit was never hit: the test proves nothing'
    rejections = [e for e in ctx_profile.events if e.policy == 'provider_rejected']
    assert [e.details['provider_limit'] for e in rejections] == [6_000] * len(small.rejected)
    assert max(small.totals) <= 6_000


def test_an_exception_group_with_a_too_long_rejection_is_an_overflow() -> None:
    too_long = exceptions.ModelHTTPError(400, 'm', body="This model's maximum context length is 8192 tokens")
    down = exceptions.ModelHTTPError(503, 'm', body='overloaded')
    overflow = context_overflow(ExceptionGroup('all failed', [down, too_long]))
    assert overflow is not None
    assert overflow.limit == 8_192
    assert context_overflow(ExceptionGroup('all failed', [down, ValueError('x')])) is None


# --- observers -------------------------------------------------------------------------------------


async def test_raising_observers_never_break_a_run_and_events_come_in_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Any] = []

    def boom(event: Any) -> None:
        raise RuntimeError('observer bug')

    async def async_boom(event: Any) -> None:
        raise ValueError('async observer bug')

    window = 9_000
    ctx_profile = profile(
        'coding', context_window=window, on_event=[seen.append, boom], on_compaction=async_boom, on_usage=boom
    )
    live = LiveModel(reading(8))
    agent = coding_agent(live, ctx_profile)
    first = await agent.run('Read the modules.')
    then(live, reading(8))
    await agent.run('Again.', message_history=first.all_messages())
    assert max(live.totals) <= window
    assert any('observer bug' in r.exc_text for r in caplog.records if r.exc_text)
    usages = [e for e in seen if isinstance(e, ContextUsageEvent)]
    assert len(usages) == len(live.totals)  # one gauge per request
    assert any(isinstance(e, CompactionEvent) for e in seen)
    # Per compile: its compaction events, then its gauge; compiles numbered in order, per run.
    ids = [e.compile_id for e in seen]
    assert ids == sorted(ids)
    for usage in usages:
        same = [e for e in seen if e.compile_id == usage.compile_id]
        assert same[-1] is usage
        assert all(isinstance(e, CompactionEvent) for e in same[:-1])
        assert all(e.run_id == usage.run_id for e in same)
    assert len({u.run_id for u in usages}) == 2
    # The gauge anchors on the provider's usage once the model reported it.
    assert any(u.anchored for u in usages)


# --- the summariser is a request too ---------------------------------------------------------------


async def test_summariser_requests_fit_the_window_of_the_model_that_serves_them() -> None:
    window = 16_000
    summaries: list[int] = []
    steps: list[int] = []

    def script(n: int, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not info.function_tools:  # the summariser: a tool-less agent on the run's model
            summaries.append(live.totals[-1])
            return ModelResponse(parts=[TextPart('Read modules 1 to 12 of src/pkg; nothing failed.')])
        steps.append(n)
        if len(steps) <= 24:
            return ModelResponse(parts=[TextPart('Next. ' + prose(60, seed=n)), read_call(len(steps))])
        return ModelResponse(parts=[TextPart('All read.')])

    # The provider holds its published window: a summariser request over it fails.
    live = LiveModel(script, rejects_over=window)
    ctx_profile = profile('chat', context_window=window)
    result = await coding_agent(live, ctx_profile).run('Read every module.')
    assert result.output == 'All read.'
    assert live.rejected == []
    assert summaries, 'nothing was summarised: the test proves nothing'
    summarised = [e for e in ctx_profile.events if e.policy == 'summarize_window']
    assert summarised
    assert all('summariser failed' not in e.reason for e in summarised)
