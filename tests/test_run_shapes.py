"""Shapes of runs real agents produce: the current run's prompt (task framing), content a tool
returns beside its result (`ToolReturn(content=...)`), runs that end on the output tool or on a
deferred call. Each through `compile` and on the live `Agent` path (the profile as a capability)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import ContextBudget, HeuristicCounter, profile, run_spans, validate_view
from pydantic_ai_context._boundaries import closes_run, has_prompt, is_tool_content, prompt_text
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR, marker
from pydantic_ai_context.archive import ContextArchive
from pydantic_ai_context.policies.fit import fit_to_budget
from pydantic_ai_context.policies.summarize import summarize_window
from pydantic_ai_context.readback import read_context
from pydantic_ai_context.tokens import default_counter
from pydantic_ai_context.views import CompileContext, current_prompt

from .builders import History, Tool, long_text
from .invariants import assert_current_prompt_kept
from .realistic import prose

COUNTER = default_counter()
PNG = b'\x89PNG\r\n\x1a\n' + bytes(range(256)) * 40
PASTED = 'NEW TASK: refactor this pasted code:\n' + prose(1800, seed=3)

live = pytest.mark.skipif(PYDANTIC_AI_MAJOR < 2, reason='live runs of the 2.x capability')


def texts(messages: list[ModelMessage]) -> str:
    return '\n'.join(str(getattr(p, 'content', '')) for m in messages for p in m.parts)


def shot(page: str) -> UserPromptPart:
    """What pydantic-ai records for `ToolReturn(..., content=[...])`: a user prompt part."""
    return UserPromptPart([f'{page}:', BinaryContent(PNG, media_type='image/png')])


# --- what a part is ---------------------------------------------------------------------------


def test_tool_return_content_is_tool_output_and_closing_results_leave_a_prompt_a_prompt() -> None:
    content = ModelRequest(parts=[ToolReturnPart('inspect', 'saved', tool_call_id='c1'), shot('home')])
    assert is_tool_content(content.parts[1], content)
    assert not has_prompt(content)
    assert prompt_text(content) == ''
    # A prompt merged into the request that closed the previous run (its output tool, a call that
    # never ran) is the next run's prompt.
    for closing in (
        ToolReturnPart('final_result', 'Final result processed.', tool_call_id='o1'),
        ToolReturnPart('answer', 'Final result processed.', tool_call_id='o1'),
        ToolReturnPart(
            'delete', 'gone', tool_call_id='d1', metadata={'pydantic_ai_synthesized_tool_return': True}
        ),
    ):
        assert closes_run(closing)
        merged = ModelRequest(parts=[closing, UserPromptPart('next task')])
        assert has_prompt(merged)
        assert prompt_text(merged) == 'next task'


def test_history_stats_counts_no_tool_content_as_a_user_turn() -> None:
    from pydantic_ai_context import history_stats

    log = History().user('inspect the pages').build()
    log.append(ModelResponse(parts=[ToolCallPart('inspect', {'page': 'home'}, tool_call_id='c1')]))
    log.append(ModelRequest(parts=[ToolReturnPart('inspect', 'saved', tool_call_id='c1'), shot('home')]))
    assert history_stats(log).user_turns == 1


def test_tool_return_content_starts_no_run_and_a_merged_prompt_after_an_output_tool_does() -> None:
    log = History().user('inspect the pages').build()
    log.append(ModelResponse(parts=[ToolCallPart('inspect', {'page': 'home'}, tool_call_id='c1')]))
    log.append(ModelRequest(parts=[ToolReturnPart('inspect', 'saved', tool_call_id='c1'), shot('home')]))
    log.append(ModelResponse(parts=[ToolCallPart('final_result', {'ok': True}, tool_call_id='o1')]))
    done = ToolReturnPart('final_result', 'Final result processed.', tool_call_id='o1')
    log.append(ModelRequest(parts=[done, UserPromptPart('and the settings page?')]))
    assert [s.start for s in run_spans(log)] == [0, 4]
    assert current_prompt(log) == 4


def test_the_current_prompt_of_a_run_resumed_without_one_is_the_previous_runs() -> None:
    log = History(stamp_runs=True).user('delete the old module').build()
    log.append(
        ModelResponse(parts=[ToolCallPart('delete', {'path': 'a.py'}, tool_call_id='d1')], run_id='run-1')
    )
    # Resumed with the deferred call's result and no prompt: the task is still the first run's.
    log.append(ModelRequest(parts=[ToolReturnPart('delete', 'deleted', tool_call_id='d1')], run_id='run-2'))
    assert current_prompt(log) == 0
    # Resumed with the result *and* a prompt: the prompt in the run's first request is the task.
    log[-1] = dataclasses.replace(log[-1], parts=[*log[-1].parts, UserPromptPart('now the tests')])
    assert current_prompt(log) == 2


# --- the current run's prompt is task framing ---------------------------------------------------


def old_task_then_pasted_prompt(reads: list[int]) -> list[ModelMessage]:
    h = History().user('OLD TASK: list the modules.')
    h.step(Tool('read_file', {'path': 'old.py'}, long_text(20)))
    h.answer('The modules are a.py and b.py.')
    h.user(PASTED)
    for i, lines in enumerate(reads):
        h.step(Tool('read_file', {'path': f'm{i}.py'}, long_text(lines, prefix=f'm{i}')))
    return h.build()


def test_fit_keeps_the_current_prompt_while_older_steps_can_go() -> None:
    log = old_task_then_pasted_prompt([20, 20, 160, 160])
    counter = HeuristicCounter()
    context = CompileContext(counter=counter, budget=ContextBudget(context_window=8_000))
    assert counter.count_messages(log) > context.budget.limit  # type: ignore[union-attr]
    view = fit_to_budget().apply(list(log), context)
    assert PASTED in texts(view)
    assert counter.count_messages(view) <= context.budget.limit  # type: ignore[union-attr]
    assert_current_prompt_kept(log, view)
    validate_view(view)


def test_a_current_prompt_larger_than_the_room_left_is_clamped_readable_back() -> None:
    huge = 'NEW TASK: ' + prose(6_000, seed=5)
    log = History().user('OLD TASK: hi').answer('hello').user(huge).build()
    log += History().step(Tool('read_file', {'path': 'a.py'}, long_text(20))).build()
    counter = HeuristicCounter()
    archive = ContextArchive()
    sink = archive.sink(log, results=True)
    context = CompileContext(counter=counter, budget=ContextBudget(context_window=8_000), originals=sink)
    view = fit_to_budget().apply(list(log), context)
    archive.compiled(sink, view)
    assert counter.count_messages(view) <= context.budget.limit  # type: ignore[union-attr]
    clamped = next(m for m in view if (marker(m) or {}).get('kind') == 'prompt_clamped')
    text = clamped.parts[0].content
    assert text.startswith(huge[:200])
    assert text.endswith(huge[-100:])
    ref = (marker(clamped) or {})['ref']
    assert f"read_context('{ref}')" in text
    page = read_context(ref, view, archive, limit=10_000)
    assert huge[15_000:15_080] in page  # past what the clamped prompt kept of its start
    assert huge[15_000:15_080] not in text
    assert_current_prompt_kept(log, view)
    assert fit_to_budget().apply(list(view), context) == view  # a view of the view is the view


def test_a_summary_of_the_current_run_keeps_its_prompt_verbatim() -> None:
    async def summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('Read m0 to m7.')])

    log = old_task_then_pasted_prompt([30] * 8)
    policy = summarize_window(
        trigger='messages',
        max_messages=10,
        keep_messages=4,
        step_messages=2,
        keep_current_run=False,
        summary_model=FunctionModel(summarise),
    )
    view = asyncio.run(policy.apply(list(log), CompileContext(counter=HeuristicCounter())))
    summary = next(m for m in view if (marker(m) or {}).get('kind') == 'summary')
    assert (marker(summary) or {})['covers'][1] > 5  # the summary covers the current run's steps
    assert PASTED in texts(view)
    assert_current_prompt_kept(log, view)
    validate_view(view)
    again = asyncio.run(policy.apply(list(view), CompileContext(counter=HeuristicCounter())))
    assert again == view


@pytest.mark.parametrize('preset', ['chat', 'coding', 'long_horizon'])
def test_every_preset_compiles_the_current_prompt_into_the_view(preset: str) -> None:
    log = old_task_then_pasted_prompt([20, 20, 160, 160])
    view = asyncio.run(profile(preset, context_window=8_000).compile(log))
    assert PASTED in texts(view)


@live
async def test_a_live_chat_run_sends_its_own_pasted_prompt_in_every_request() -> None:
    """The issue's case: `chat` at 8k, one finished run, then a ~2.3k-token pasted prompt and
    four file reads, the last two large: every request of the second run holds its prompt."""
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not info.function_tools:  # the summariser
            return ModelResponse(parts=[TextPart('The old task read old.py.')])
        seen.append(messages)
        read = len(seen) - 3
        if read < 0:  # the first run: read once, answer
            if read == -2:
                return ModelResponse(parts=[ToolCallPart('read_file', {'path': 'old.py'}, tool_call_id='o1')])
            return ModelResponse(parts=[TextPart('Old done.')])
        if read < 4:
            return ModelResponse(
                parts=[ToolCallPart('read_file', {'path': f'm{read}.py'}, tool_call_id=f'r{read}')]
            )
        return ModelResponse(parts=[TextPart('New done.')])

    agent = Agent(FunctionModel(respond), capabilities=[profile('chat', context_window=8_000)])

    @agent.tool_plain
    def read_file(path: str) -> str:
        return long_text(160 if path in ('m2.py', 'm3.py') else 20, prefix=path)

    first = await agent.run('OLD TASK: read old.py')
    second = await agent.run(PASTED, message_history=first.all_messages())
    requests = seen[2:]
    assert len(requests) == 5
    assert all(PASTED in texts(v) for v in requests)
    assert max(COUNTER.count_messages(v) for v in requests) <= 8_000
    view = await profile('chat', context_window=8_000).compile(second.all_messages()[:-1])
    assert PASTED in texts(view)


# --- ToolReturn content belongs to its tool result ----------------------------------------------


def inspect_agent(preset: str, window: int, kind: str, steps: int = 3) -> tuple[Agent[None, str], list[Any]]:
    seen: list[list[ModelMessage]] = []
    state = {'step': 0}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not info.function_tools:  # the summariser
            return ModelResponse(parts=[TextPart('Pages were inspected.')])
        seen.append(messages)
        state['step'] += 1
        if state['step'] <= steps:
            call = ToolCallPart('inspect', {'page': f'p{len(seen)}'}, tool_call_id=f'c{len(seen)}')
            return ModelResponse(parts=[call])
        state['step'] = 0
        return ModelResponse(parts=[TextPart('Inspected.')])

    agent = Agent(FunctionModel(respond), capabilities=[profile(preset, context_window=window)])

    @agent.tool_plain
    def inspect(page: str) -> Any:
        text = prose(600, seed=sum(map(ord, page)))
        if kind == 'dict':
            return {'page': page, 'text': text}
        return ToolReturn(
            return_value=f'inspected {page}',
            content=[f'{page}:\n{text}', BinaryContent(PNG, media_type='image/png')],
        )

    return agent, seen


async def _three_tasks(agent: Agent[None, str]) -> list[ModelMessage]:
    log: list[ModelMessage] | None = None
    for task in range(3):
        log = (await agent.run(f'TASK {task}: inspect the pages', message_history=log)).all_messages()
    assert log is not None
    return log


def test_masking_takes_the_content_with_its_result_and_read_back_returns_both() -> None:
    from pydantic_ai_context.policies._frontier import Frontier
    from pydantic_ai_context.policies.mask import mask_observations

    h = History().user('inspect the pages')
    for i in range(4):
        h.step(Tool('inspect', {'page': f'p{i}'}, f'inspected p{i}: ' + long_text(30)))
    log = h.build()
    log[2] = dataclasses.replace(log[2], parts=[*log[2].parts, shot('HOME-PAGE')])
    policy = mask_observations(frontier=Frontier(keep_recent=1, step=1))
    view = policy.apply(list(log), CompileContext(counter=HeuristicCounter()))
    assert marker(view[2].parts[0]) is not None  # the result is masked ...
    assert len(view[2].parts) == 1  # ... and the content it came with goes with it
    ref = log[2].parts[0].tool_call_id
    page = read_context(ref, log)
    assert 'HOME-PAGE' in page
    assert '(+1 file)' in page


@live
async def test_tool_return_content_is_compacted_like_a_dict_return() -> None:
    """At a 200k window finished runs collapse whatever their tools returned: the content a tool
    sent beside its result goes with its step (before, the view was the whole log)."""
    agent, seen = inspect_agent('coding', 200_000, 'tool_return')
    log = await _three_tasks(agent)
    plain, plain_seen = inspect_agent('coding', 200_000, 'dict')
    await _three_tasks(plain)
    view, dict_view = seen[-1], plain_seen[-1]
    assert COUNTER.count_messages(view) < COUNTER.count_messages(log) / 2
    # Finished runs are records either way: only the current run's content differs.
    assert len(view) == len(dict_view)
    finished = view[: next(i for i, m in enumerate(view) if 'TASK 2' in texts([m]))]
    assert not any(is_tool_content(p, m) for m in finished for p in m.parts)
    compiled = await profile('coding', context_window=200_000).compile(log)
    assert COUNTER.count_messages(compiled) < COUNTER.count_messages(log) / 2


@live
async def test_a_live_long_horizon_run_keeps_each_tasks_own_prompt_in_view() -> None:
    agent, seen = inspect_agent('long_horizon', 8_000, 'tool_return', steps=6)
    log = await _three_tasks(agent)
    for task, views in enumerate([seen[0:7], seen[7:14], seen[14:21]]):
        assert all(f'TASK {task}: inspect the pages' in texts(v) for v in views)
    assert max(COUNTER.count_messages(v) for v in seen) <= 8_000
    view = await profile('long_horizon', context_window=8_000).compile(log[:-1])
    assert 'TASK 2: inspect the pages' in texts(view)


# --- runs that end on the output tool or on a deferred call --------------------------------------


class Found(BaseModel):
    path: str


@live
async def test_a_run_that_ended_on_its_output_tool_is_isolated_in_the_next_run() -> None:
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        if isinstance(messages[-1].parts[-1], UserPromptPart):
            return ModelResponse(
                parts=[ToolCallPart('read_file', {'path': 'a.py'}, tool_call_id=f'r{len(seen)}')]
            )
        return ModelResponse(
            parts=[ToolCallPart(info.output_tools[0].name, {'path': 'a.py'}, tool_call_id=f'o{len(seen)}')]
        )

    agent = Agent(
        FunctionModel(respond), output_type=Found, capabilities=[profile('coding', context_window=200_000)]
    )

    @agent.tool_plain
    def read_file(path: str) -> str:
        return long_text(60, prefix=path)

    first = await agent.run('Find the settings parser.')
    second = await agent.run('And the CLI entry point?', message_history=first.all_messages())
    assert second.output == Found(path='a.py')
    view = seen[2]  # the second run's first request
    assert texts(view).count(long_text(60, prefix='a.py')) == 0  # the finished run's read is a record
    assert 'read_file' in texts(view)
    assert '[Record kept' in texts(view)
    assert 'Find the settings parser.' in texts(view)
    validate_view(view)
    compiled = await profile('coding', context_window=200_000).compile(second.all_messages()[:-2])
    assert long_text(60, prefix='a.py') not in texts(compiled[:4])


@live
async def test_a_run_that_ended_on_an_unresolved_deferred_call_is_isolated_in_the_next_run() -> None:
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai.messages import repair_messages

    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        last = messages[-1]
        if any(
            isinstance(p, UserPromptPart) and p.content == 'Never mind; list the tests.' for p in last.parts
        ):
            return ModelResponse(parts=[TextPart('tests/test_a.py')])
        if isinstance(last.parts[-1], UserPromptPart):
            return ModelResponse(parts=[ToolCallPart('read_file', {'path': 'a.py'}, tool_call_id='r1')])
        return ModelResponse(parts=[ToolCallPart('delete_file', {'path': 'a.py'}, tool_call_id='d1')])

    agent = Agent(
        FunctionModel(respond),
        output_type=[str, DeferredToolRequests],
        capabilities=[profile('coding', context_window=200_000)],
    )

    @agent.tool_plain
    def read_file(path: str) -> str:
        return long_text(60, prefix=path)

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return f'deleted {path}'

    paused = await agent.run('Remove the dead module.')
    assert isinstance(paused.output, DeferredToolRequests)
    # The user moves on: the pending call is closed out, and a new prompt follows.
    second = await agent.run(
        'Never mind; list the tests.', message_history=repair_messages(paused.all_messages())
    )
    assert second.output == 'tests/test_a.py'
    view = seen[-1]
    assert long_text(60, prefix='a.py') not in texts(view)  # the finished run's read is a record
    assert '[Record kept' in texts(view)
    assert any(isinstance(p, ToolCallPart) and p.tool_call_id == 'd1' for m in view for p in m.parts)
    validate_view(view)
