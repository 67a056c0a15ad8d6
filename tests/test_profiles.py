from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any

import pydantic_ai
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext

from pydantic_ai_context import (
    CompactionEvent,
    CompileContext,
    ContextProfile,
    HeuristicCounter,
    available_profiles,
    profile,
    register_profile,
)

from .builders import History, Tool

PAI_MAJOR = int(pydantic_ai.__version__.split('.')[0])


def blank_tool_results(messages: list[ModelMessage]) -> list[ModelMessage]:
    """A user-written processor: every tool result but the newest becomes 'X'."""
    out: list[ModelMessage] = []
    last_request = max((i for i, m in enumerate(messages) if isinstance(m, ModelRequest)), default=-1)
    for i, m in enumerate(messages):
        if isinstance(m, ModelRequest) and i != last_request:
            parts = [
                dataclasses.replace(p, content='X') if isinstance(p, ToolReturnPart) else p for p in m.parts
            ]
            m = dataclasses.replace(m, parts=parts)
        out.append(m)
    return out


def test_presets_listed_and_transparent_exists() -> None:
    assert 'transparent' in available_profiles()


def test_unknown_setting_raises_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match='bogus'):
        profile('transparent', bogus=1)


def test_unknown_profile_raises_value_error_listing_known() -> None:
    with pytest.raises(ValueError, match='transparent'):
        profile('nope')


def test_common_overrides_accepted_by_every_preset() -> None:
    counter = HeuristicCounter()
    for name in available_profiles():
        p = profile(name, context_window=50_000, counter=counter, summary_model='test', on_event=print)
        assert p.context_window == 50_000
        assert p.counter is counter
        assert p.summary_model == 'test'


def test_repr_shows_chain() -> None:
    p = ContextProfile(name='mine', steps=(blank_tool_results,))
    assert 'normalize -> blank_tool_results' in repr(p)


async def test_compile_without_run_context_and_events() -> None:
    events: list[CompactionEvent] = []
    p = ContextProfile(
        steps=(blank_tool_results,),
        event_handlers=[lambda e: events.append(e) if isinstance(e, CompactionEvent) else None],
        counter=HeuristicCounter(),
    )
    log = (
        History()
        .user('go')
        .step(Tool('cat', {'path': 'a.py'}, 'long content ' * 50))
        .step(Tool('ls', {}))
        .build()
    )
    snapshot = copy.deepcopy(log)
    view = await p.compile(log)
    assert log == snapshot
    assert view[2].parts[0].content == 'X'
    assert view[-1] is log[-1]
    assert [e.policy for e in events] == ['blank_tool_results']
    assert events[0].tokens_before is not None
    assert events[0].tokens_after is not None
    assert events[0].tokens_after < events[0].tokens_before
    assert list(p.events) == events
    # Compiling the view again changes nothing (this processor is idempotent).
    assert await p.compile(view) == view


async def test_async_and_ctx_taking_steps_and_policies() -> None:
    seen: dict[str, Any] = {}

    async def async_step(ctx: Any, messages: list[ModelMessage]) -> list[ModelMessage]:
        seen['ctx'] = ctx
        return messages

    class Counting:
        name = 'counting'

        def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
            seen['budget'] = context.budget
            context.note('looked')
            return messages

    p = ContextProfile(steps=(async_step, Counting()), context_window=10_000, counter=HeuristicCounter())
    log = History().user('go').build()
    assert await p.compile(log) == log
    assert seen['ctx'] is None
    assert seen['budget'].context_window == 10_000


def test_normalize_runs_first_even_for_transparent() -> None:
    import asyncio

    log = History().user('go').call(Tool('ls', {})).build()
    view = asyncio.run(profile('transparent').compile(log))
    assert isinstance(view[-1], ModelRequest)
    assert len(view) == 3


def recording_model(received: list[list[ModelMessage]]) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(messages)
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < 3:
            return ModelResponse(
                parts=[ToolCallPart('read', {'path': f'f{turn}.py'}, tool_call_id=f't{turn}')]
            )
        return ModelResponse(parts=[TextPart('done')])

    return FunctionModel(respond)


def add_read_tool(agent: Agent[None, str]) -> None:
    @agent.tool_plain
    def read(path: str) -> str:
        return f'contents of {path} ' * 20


async def test_capability_compiles_every_request() -> None:
    received: list[list[ModelMessage]] = []
    p = ContextProfile(steps=(blank_tool_results,), counter=HeuristicCounter())
    agent = Agent(recording_model(received), capabilities=[p])
    add_read_tool(agent)
    result = await agent.run('read three files')
    assert result.output == 'done'
    last_view = received[-1]
    tool_contents = [p.content for m in last_view for p in m.parts if isinstance(p, ToolReturnPart)]
    assert tool_contents[:2] == ['X', 'X']
    full = [p.content for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    if PAI_MAJOR >= 2:
        assert all(c.startswith('contents of') for c in full), 'the log must stay whole on 2.x'
    else:
        # pydantic-ai 1.x writes a before_model_request hook's messages back to the history.
        assert full[:2] == ['X', 'X']


async def test_history_processors_integration() -> None:
    received: list[list[ModelMessage]] = []
    p = ContextProfile(steps=(blank_tool_results,), counter=HeuristicCounter())
    if PAI_MAJOR >= 2:
        agent = Agent(recording_model(received), capabilities=[p.process_history()])
    else:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            agent = Agent(recording_model(received), history_processors=p.history_processors)
    add_read_tool(agent)
    result = await agent.run('read three files')
    assert result.output == 'done'
    tool_contents = [p.content for m in received[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert tool_contents[:2] == ['X', 'X']
    # Destructive mode: the run's history is the view.
    assert any(
        p.content == 'X' for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)
    )


async def test_transparent_agent_run_sees_full_history_both_majors() -> None:
    received: list[list[ModelMessage]] = []
    agent = Agent(recording_model(received), capabilities=[profile('transparent')])
    add_read_tool(agent)
    result = await agent.run('read three files')
    assert received[-1] == result.all_messages()[: len(received[-1])]
    assert len(received) == 4


async def test_history_processor_shapes_are_recognised() -> None:
    seen: list[str] = []

    def plain(messages: list[ModelMessage], extra: int = 0) -> list[ModelMessage]:
        seen.append('plain')
        return messages

    def with_ctx(ctx: Any, messages: list[ModelMessage]) -> list[ModelMessage]:
        seen.append(f'ctx={ctx!r}')
        return messages

    def annotated(run: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        seen.append(f'run={run!r}')
        return messages

    p = ContextProfile(steps=(plain, with_ctx, annotated), counter=HeuristicCounter())
    log = History().user('go').build()
    assert await p.compile(log) == log
    assert seen == ['plain', 'ctx=None', 'run=None']


def test_a_run_with_the_capability_warns_about_nothing() -> None:
    # pydantic-ai 1.107 deprecates `ModelRequestParameters.builtin_tools` (a `UserWarning`): reading
    # it warned on every request.
    from pydantic_ai.models.test import TestModel

    agent = Agent(TestModel(), capabilities=[profile('coding')])
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert agent.run_sync('hello').output


def test_register_profile_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match='non-empty str'):
        register_profile(3, profile)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match='must be callable'):
        register_profile('broken', None)  # type: ignore[arg-type]
    assert 'broken' not in available_profiles()


def test_a_preset_with_other_steps_keeps_them_through_replace() -> None:
    # `replace` rebuilds a preset from its settings: a chain changed with `replace(steps=...)` was
    # silently rebuilt as the preset's own by the next `replace(context_window=...)`.
    def drop_nothing(messages: list[ModelMessage]) -> list[ModelMessage]:
        return messages

    coding = profile('coding', context_window=64_000)
    mine = coding.replace(steps=(drop_nothing, *coding.steps))
    assert mine.name == 'custom'
    again = mine.replace(context_window=32_000)
    assert again.steps[0] is drop_nothing
    assert again.context_window == 32_000
    assert coding.replace(steps=coding.steps, name='coding-like').name == 'coding-like'
