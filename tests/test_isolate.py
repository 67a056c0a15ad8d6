from __future__ import annotations

import copy
import dataclasses
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import ContextBudget, HeuristicCounter, normalize, profile, run_spans, validate_view
from pydantic_ai_context._boundaries import starts_run
from pydantic_ai_context._model_texts import ModelTexts
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR, marker
from pydantic_ai_context._scope import MemoScope, compiling
from pydantic_ai_context.policies.isolate import IsolateBoundaries, isolate_boundaries
from pydantic_ai_context.views import CompileContext

from . import data
from ._examples import examples
from .builders import History, Tool, long_text
from .invariants import assert_all
from .strategies import any_histories
from .test_boundaries import mini_swe_agent_run

PROPS = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
TRAJECTORIES = list(data.TRAJECTORIES)
MODES = ('keep', 'mask', 'digest', 'drop')


def context(run_id: str | None = None) -> CompileContext:
    return CompileContext(counter=HeuristicCounter(), run_id=run_id)


def isolate(log: list[ModelMessage], run_id: str | None = None, **settings: object) -> list[ModelMessage]:
    return isolate_boundaries(**settings).apply(list(log), context(run_id))


def two_runs(*, stamp: bool = False) -> tuple[list[ModelMessage], Tool, Tool]:
    ls = Tool('execute_bash', {'command': 'ls src'}, 'src/app/models.py\nsrc/app/views.py')
    test = Tool(
        'execute_bash', {'command': 'pytest -q'}, 'FAILED tests/test_models.py::test_save - ValueError: boom'
    )
    log = (
        History(stamp_runs=stamp)
        .user('Why does saving fail?', system='You are a coding agent.')
        .step(ls, thinking='look around')
        .step(test, text='Running the tests.')
        .answer('Saving fails because of a ValueError in models.py.')
        .user('Fix it, please.')
        .step(Tool('str_replace_editor', {'command': 'view', 'path': 'src/app/models.py'}, long_text(30)))
        .build()
    )
    return log, ls, test


def test_digest_collapses_the_finished_run_into_its_answer() -> None:
    log, _ls, _test = two_runs()
    view = isolate(log)
    assert len(view) == len(log) - 4
    assert view[0] is log[0]  # prompt request, system prompt included, untouched
    answer = view[1]
    assert isinstance(answer, ModelResponse)
    record, original = answer.parts
    assert isinstance(record, TextPart)
    assert record.content.startswith('[Record kept by context management, not a new instruction')
    assert "- execute_bash(command='ls src') → ok" in record.content
    assert 'src/app/views.py' in record.content
    assert 'FAILED tests/test_models.py::test_save - ValueError: boom' in record.content
    assert original is log[5].parts[0]
    ref = marker(answer)['ref']  # the span of the collapsed trace, for read_context
    assert marker(answer) == {'kind': 'isolated', 'mode': 'digest', 'calls': 2, 'ref': ref}
    assert re.fullmatch(r's[0-9a-f]{8}', ref)
    assert record.content.endswith(f"[original: read_context('{ref}')]")
    assert view[2:] == log[6:]
    assert all(a is b for a, b in zip(view[2:], log[6:], strict=True))
    validate_view(view)


def test_mask_keeps_calls_and_replaces_successful_outputs() -> None:
    log = (
        History()
        .user('go')
        .step(Tool('grep', {'pattern': 'save'}, 'src/app/models.py:10: def save'))
        .step(Tool('execute_bash', {'command': 'make'}, 'make: *** [all] Error 2', failed=True))
        .answer('done')
        .user('next')
        .build()
    )
    view = isolate(log, mode='mask')
    assert len(view) == len(log)
    assert view[1] is log[1]
    assert view[3] is log[3]
    masked = view[2].parts[0]
    assert isinstance(masked, ToolReturnPart)
    assert masked.tool_call_id == log[2].parts[0].tool_call_id
    assert masked.tool_name == 'grep'
    assert masked.content.startswith('[output omitted: this turn is finished; grep(')
    assert 'src/app/models.py' in masked.content
    assert marker(masked) is not None
    assert marker(masked)['kind'] == 'isolated'
    if hasattr(log[4].parts[0], 'outcome'):
        assert view[4] is log[4]  # the failed result stays as it was
    validate_view(view)


def test_drop_leaves_prompt_answer_and_the_notes() -> None:
    log, _, _ = two_runs()
    view = isolate(log, mode='drop')
    assert view[0] is log[0]
    answer = view[1]
    assert isinstance(answer, ModelResponse)
    record, original = answer.parts
    assert isinstance(record, TextPart)
    assert original is log[5].parts[0]
    # The calls and their outputs are gone; the assistant's own note stays, verbatim.
    assert 'Running the tests.' in record.content
    assert 'execute_bash' not in record.content
    assert 'ValueError' not in record.content
    assert view[2:] == log[6:]


def test_drop_without_notes_leaves_prompt_and_answer() -> None:
    log = (
        History()
        .user('Why does saving fail?')
        .step(Tool('execute_bash', {'command': 'ls'}, 'src/a.py'))
        .answer('Because of a.py.')
        .user('Fix it, please.')
        .build()
    )
    view = isolate(log, mode='drop')
    assert view == [log[0], log[3], log[4]]
    assert view[1] is log[3]


def test_keep_changes_nothing() -> None:
    log, _, _ = two_runs()
    view = isolate(log, mode='keep')
    assert view == log
    assert all(a is b for a, b in zip(view, log, strict=True))


@pytest.mark.parametrize('mode', MODES)
def test_current_run_is_never_touched(mode: str) -> None:
    log, _, _ = two_runs(stamp=True)
    # The current run named by run_id is the last one here; its trace must come back as is.
    view = isolate(log, run_id='run-2', mode=mode)
    assert all(a is b for a, b in zip(view[-2:], log[-2:], strict=True))
    # With the first run as the current one, nothing before it is finished: no change.
    view = isolate(log, run_id='run-1', mode=mode)
    assert all(a is b for a, b in zip(view, log, strict=True))
    assert len(view) == len(log)


def test_unknown_run_id_falls_back_to_the_last_run() -> None:
    log, _, _ = two_runs(stamp=True)
    assert isolate(log, run_id='elsewhere') == isolate(log)


def test_single_run_in_progress_is_untouched() -> None:
    log = History().user('go').step(Tool('ls', {}, 'a.py')).step(Tool('cat', {'path': 'a.py'}, 'x')).build()
    assert isolate(log) == log


@pytest.mark.parametrize('mode', ['digest', 'drop', 'mask'])
def test_pinned_step_in_a_finished_trace_survives(mode: str) -> None:
    log, _ls, _ = two_runs()
    pinned_result = dataclasses.replace(log[2].parts[0], metadata={'pinned': True})
    log[2] = dataclasses.replace(log[2], parts=[pinned_result])
    view = isolate(log, mode=mode)
    assert log[1] in view
    assert log[2] in view
    validate_view(view)
    assert_all(log, copy.deepcopy(log), view)
    if mode == 'digest':
        record = view[3].parts[0].content
        assert "command='ls src'" not in record  # kept in full, so not in the record
        assert "command='pytest -q'" in record


def test_pinned_answer_is_masked_not_rewritten() -> None:
    log, _, _ = two_runs()
    log[5] = dataclasses.replace(log[5], metadata={'pinned': True})
    view = isolate(log)
    assert view[5] is log[5]
    assert view[2].parts[0].content.startswith('[output omitted')


@pytest.mark.parametrize('mode', ['digest', 'drop', 'mask'])
def test_interrupted_run_keeps_its_trace(mode: str) -> None:
    # The first run never answered: its last step is still what the user saw happen.
    log = (
        History()
        .user('deploy')
        .step(Tool('deploy', {'env': 'prod'}, 'permission denied', failed=True))
        .user('try staging instead')
        .step(Tool('deploy', {'env': 'staging'}, 'ok'))
        .build()
    )
    assert isolate(log, mode=mode) == log


def _ended_on(ending: str, *, stamp: bool) -> list[ModelMessage]:
    """A run that ends on its output tool, or on a deferred call left unresolved, then a new prompt."""
    log = History(stamp_runs=stamp).user('extract').step(Tool('lookup', {'q': 'x'}, 'y' * 400)).build()
    rid = {'run_id': 'run-1'} if stamp else {}
    if ending == 'output_tool':
        log.append(
            ModelResponse(parts=[ToolCallPart('final_result', {'value': 'y'}, tool_call_id='out')], **rid)
        )
        done = ToolReturnPart('final_result', 'Final result processed.', tool_call_id='out')
        log.append(ModelRequest(parts=[done], **rid))
    else:
        log.append(ModelResponse(parts=[ToolCallPart('delete', {'path': 'a.py'}, tool_call_id='del')], **rid))
        if ending == 'deferred_repaired':  # pydantic-ai's `repair_messages` closes it, without a run id
            closed = ToolReturnPart(
                'delete',
                'The tool call was interrupted before a result was produced.',
                tool_call_id='del',
                metadata={'pydantic_ai_synthesized_tool_return': True},
            )
            log.append(ModelRequest(parts=[closed]))
    return log + History(stamp_runs=stamp, _run=1).user('again').build()


@pytest.mark.parametrize('stamp', [False, True])
@pytest.mark.parametrize('ending', ['output_tool', 'deferred_repaired', 'deferred_with_results'])
def test_run_ended_by_output_tool_or_deferred_call_is_isolated(ending: str, stamp: bool) -> None:
    log = _ended_on('output_tool' if ending == 'output_tool' else ending, stamp=stamp)
    if ending == 'deferred_with_results':
        # The next run sends the deferred call's result with its prompt, in its first request.
        if not stamp:
            pytest.skip('a prompt beside a real result starts a run by its run id only')
        first = log[-1]
        log[-1] = dataclasses.replace(
            first, parts=[ToolReturnPart('delete', 'deleted a.py', tool_call_id='del'), *first.parts]
        )
    # Consecutive requests read as the one pydantic-ai merges them into (with the new run's id,
    # when the second holds its prompt): the run starts at the first of them.
    start = len(log) - 1
    while isinstance(log[start - 1], ModelRequest):
        start -= 1
    assert [s.start for s in run_spans(log)][-1] == start
    view = isolate(log)
    assert 'y' * 400 not in str(view), 'the finished run keeps its tool trace'
    ended = view[1]
    assert isinstance(ended, ModelResponse)
    assert ended.parts[0].content.startswith('[Record kept')
    assert ended.parts[1:] == log[3].parts  # its last step stays as it was (pending stays visible)
    assert view[2:] == log[4:]
    validate_view(normalize(view))
    assert isolate(view) == view


def test_record_goes_after_the_answers_thinking() -> None:
    log, _, _ = two_runs()
    log[5] = ModelResponse(parts=[ThinkingPart('so the cause is...'), TextPart('A ValueError.')])
    view = isolate(log)
    kinds = [type(p).__name__ for p in view[1].parts]
    assert kinds == ['ThinkingPart', 'TextPart', 'TextPart']
    assert view[1].parts[1].content.startswith('[Record kept')


def test_mid_run_user_prompt_step_is_kept() -> None:
    # A user-role message inside a run, in a request of its own (a format reminder): conversation.
    log, _, _ = two_runs(stamp=True)
    log[3:3] = [
        ModelResponse(parts=[TextPart('Two actions.')], run_id='run-1'),
        ModelRequest(parts=[UserPromptPart('Reply with one action.')], run_id='run-1'),
    ]
    view = isolate(log, run_id='run-2')
    assert log[4] in view
    validate_view(view)


@pytest.mark.parametrize('mode', ['digest', 'drop', 'mask'])
def test_tool_return_content_goes_with_its_step(mode: str) -> None:
    """`ToolReturn(value, content=[...])` is recorded as a user prompt part beside the result: it is
    the tool's output, collapsed with its step like a dict return, never kept as a user turn."""
    log, _, _ = two_runs(stamp=True)
    shot = UserPromptPart(['page:', BinaryContent(b'\x89PNG' + bytes(64), media_type='image/png')])
    log[2] = dataclasses.replace(log[2], parts=[*log[2].parts, shot])
    assert [s.start for s in run_spans(log)] == [0, 6]
    view = isolate(log, run_id='run-2', mode=mode)
    assert shot not in [p for m in view for p in m.parts]
    plain, _, _ = two_runs(stamp=True)
    assert len(view) == len(isolate(plain, run_id='run-2', mode=mode))
    validate_view(view)


@pytest.mark.parametrize('stamp', [False, True])
@pytest.mark.parametrize('mode', MODES)
def test_run_boundaries_survive(mode: str, stamp: bool) -> None:
    log, _, _ = two_runs(stamp=stamp)
    log += (
        History(stamp_runs=stamp, _run=2).user('and the docs?').step(Tool('ls', {}, 'docs/index.md')).build()
    )
    view = isolate(log, mode=mode)
    before = [(s.run_id, log[s.start]) for s in run_spans(log)]
    after = [(s.run_id, view[s.start]) for s in run_spans(view)]
    assert [rid for rid, _ in before] == [rid for rid, _ in after]
    assert [m for _, m in before] == [m for _, m in after]  # each run still starts at its prompt


@pytest.mark.parametrize('mode', MODES)
def test_idempotent_and_input_untouched(mode: str) -> None:
    log, _, _ = two_runs()
    snapshot = copy.deepcopy(log)
    once = isolate(log, mode=mode)
    twice = isolate(once, mode=mode)
    assert twice == once
    assert all(a is b for a, b in zip(twice, once, strict=True))
    assert log == snapshot


def test_notes_what_it_did() -> None:
    log, _, _ = two_runs()
    ctx = context()
    isolate_boundaries().apply(log, ctx)
    reason, details = ctx._take_notes()
    assert 'isolated 1 finished run (digest, 2 tool calls)' in reason
    assert details['isolated_calls'] == 2


def test_one_call_is_one_tool_call_in_the_note() -> None:
    log = (
        History()
        .user('List the files.')
        .step(Tool('execute_bash', {'command': 'ls'}, 'src/app/models.py'))
        .answer('One file.')
        .user('Thanks.')
        .build()
    )
    ctx = context()
    isolate_boundaries().apply(log, ctx)
    reason, _ = ctx._take_notes()
    assert reason.endswith('(digest, 1 tool call)')


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match='mode must be'):
        IsolateBoundaries(mode='squash')  # type: ignore[arg-type]


def test_standalone_history_processor() -> None:
    log, _, _ = two_runs()
    assert isolate_boundaries()(log) == isolate(log)


@PROPS
@given(log=any_histories, mode=st.sampled_from(MODES))
def test_invariants_idempotence_and_determinism(log: list[ModelMessage], mode: str) -> None:
    snapshot = copy.deepcopy(log)
    view = normalize(isolate(log, mode=mode))
    assert_all(log, snapshot, view)
    # Inside a profile a step always receives a normalized view; idempotence is about that input.
    compiled = normalize(isolate(normalize(log), mode=mode))
    assert normalize(isolate(compiled, mode=mode)) == compiled
    # Determinism is checked before normalize: its synthetic results carry the time they were made.
    assert isolate(snapshot, mode=mode) == isolate(log, mode=mode)


@PROPS
@given(
    log=any_histories,
    mode=st.sampled_from(MODES),
    window=st.sampled_from([600, 1_500, 4_000, 128_000]),
    keep_runs=st.integers(0, 2),
)
def test_invariants_idempotence_and_determinism_with_a_budget(
    log: list[ModelMessage], mode: str, window: int, keep_runs: int
) -> None:
    def run(messages: list[ModelMessage]) -> list[ModelMessage]:
        policy = isolate_boundaries(mode=mode, keep_runs=keep_runs)
        return policy.apply(list(messages), budget_context(window))

    snapshot = copy.deepcopy(log)
    view = normalize(run(log))
    assert_all(log, snapshot, view)
    compiled = normalize(run(normalize(log)))
    assert normalize(run(compiled)) == compiled
    assert run(snapshot) == run(log)


def load(path: Path) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_json(path.read_bytes())


@pytest.mark.parametrize('path', TRAJECTORIES, ids=lambda p: p.stem)
def test_trajectory_finished_then_followed_up(path: Path) -> None:
    run = load(path)
    # Finish the recorded run and start another: finished traces become records.
    log = [
        *run,
        ModelResponse(parts=[TextPart('Done.')]),
        ModelRequest(parts=[UserPromptPart('Thanks! Next?')]),
    ]
    snapshot = copy.deepcopy(log)
    view = isolate(log)
    assert_all(log, snapshot, view)
    spans = run_spans(log)
    # mini-swe-agent's format reminders are user prompts inside the task: each file is one run
    # (then the follow-up), which keeps its prompt, its answer, and the steps holding a reminder.
    assert len(spans) == 2
    reminders = sum(1 for m in run[1:] if isinstance(m, ModelRequest) and starts_run(m))
    assert len(view) == 3 + 2 * reminders
    assert view[-1] is log[-1]
    n_calls = sum(1 for m in log for p in m.parts if isinstance(p, ToolCallPart))
    records = ''.join(
        p.content
        for m in view
        for p in m.parts
        if isinstance(p, TextPart) and p.content.startswith('[Record kept')
    )
    assert sum(1 for line in records.split('\n') if line.startswith('- ') and ' → ' in line) >= n_calls
    # The agent's own notes are all still there, verbatim.
    assert ModelTexts.build(log).kept(len(log), view) == 1.0
    counter = HeuristicCounter()
    assert counter.count_messages(view) < counter.count_messages(log) / 2
    assert isolate(view) == view


@pytest.mark.parametrize('path', TRAJECTORIES, ids=lambda p: p.stem)
def test_trajectory_current_run_untouched(path: Path) -> None:
    log = load(path)
    current = run_spans(log)[-1]
    view = isolate(log)
    tail = view[len(view) - len(current) :]
    assert all(a is b for a, b in zip(tail, log[current.start :], strict=True))
    if len(run_spans(log)) == 1:
        assert view == log


# --- where runs end, and what a collapsed run keeps of the model's words ---------------------

NOTE = 'THOUGHT: the failure comes from the save hook; I will read models.py next and then test it.'


def budget_context(window: int, run_id: str | None = None, originals: Any = None) -> CompileContext:
    return CompileContext(
        counter=HeuristicCounter(),
        budget=ContextBudget(context_window=window, reserved_output=256),
        run_id=run_id,
        originals=originals,
    )


def chat(n_runs: int, *, stamp: bool = False, output_lines: int = 20, note: str = NOTE) -> list[ModelMessage]:
    """`n_runs` finished runs (a noted tool step and an answer each), then a new prompt."""
    h = History(stamp_runs=stamp)
    for run in range(n_runs):
        h.user(f'Question {run}?', system='You are a coding agent.' if run == 0 else None)
        h.step(
            Tool('execute_bash', {'command': f'cat f{run}.py'}, long_text(output_lines)),
            text=f'{note} ({run})',
        )
        h.answer(f'Answer {run}.')
    return h.user('And now?').build()


def records(view: list[ModelMessage]) -> list[str]:
    return [
        p.content
        for m in view
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, TextPart) and p.content.startswith('[Record kept')
    ]


def test_with_run_ids_a_prompt_inside_the_run_is_no_boundary() -> None:
    log = two_runs(stamp=True)[0][:6]  # run-1 only: prompt, two steps, answer
    reminder = ModelRequest(parts=[UserPromptPart('Summarise what you found so far.')], run_id='run-1')
    log = [*log[:3], ModelResponse(parts=[TextPart(NOTE)], run_id='run-1'), reminder, *log[3:]]
    # A prompt that reads like a new request, but inside run-1: the run is current, untouched.
    view = isolate(log, run_id='run-1')
    assert all(a is b for a, b in zip(view, log, strict=True))
    # Once run-2 starts, run-1 is finished: its trace collapses, the prompt's step stays whole.
    log += History(stamp_runs=True, _run=1).user('Next task.').build()
    view = isolate(log, run_id='run-2')
    assert len(view) < len(log)
    assert reminder in view
    assert NOTE in '\n'.join(p.content for m in view for p in m.parts if isinstance(p, TextPart))


def test_a_mini_swe_agent_run_with_reminders_is_one_run_and_untouched() -> None:
    log = mini_swe_agent_run()
    for context_ in (context(), budget_context(16_000)):
        view = isolate_boundaries().apply(list(log), context_)
        assert all(a is b for a, b in zip(view, log, strict=True))
        assert ModelTexts.build(log).kept(len(log), view) == 1.0


def test_a_collapsed_run_keeps_every_note_verbatim() -> None:
    log = chat(3)
    view = isolate_boundaries().apply(list(log), budget_context(128_000))
    assert len(records(view)) == 3
    assert all(f'{NOTE} ({run})' in records(view)[run] for run in range(3))
    assert all('line 5: ' not in r for r in records(view))  # the outputs are gone


def test_keep_runs_masks_the_most_recent_finished_runs_while_there_is_room() -> None:
    log = chat(3)
    view = isolate_boundaries(keep_runs=1).apply(list(log), budget_context(128_000))
    assert len(records(view)) == 2  # the two older runs are records
    calls = [p for m in view for p in m.parts if isinstance(p, ToolCallPart)]
    assert [c.args for c in calls] == [{'command': 'cat f2.py'}]  # the recent one keeps its call...
    result = next(p for m in view for p in m.parts if isinstance(p, ToolReturnPart))
    assert marker(result)['mode'] == 'mask'  # ... and its output is masked
    assert f'{NOTE} (2)' in [p.content for m in view for p in m.parts if isinstance(p, TextPart)]
    # Over the soft threshold, the budget needs the room: every finished run is a record.
    view = isolate_boundaries(keep_runs=1).apply(list(log), budget_context(1_500))
    assert len(records(view)) == 3


@dataclass
class Sink:
    spans: dict[str, list[Any]] = field(default_factory=dict)

    def keep_result(self, ref: str, part: Any) -> None:
        pass

    def keep_span(self, ref: str, items: Any, *, replace: bool = False) -> None:
        self.spans[ref] = list(items)


def test_notes_are_shortened_oldest_first_only_when_the_budget_needs_room() -> None:
    long_note = 'THOUGHT: ' + ' '.join(f'step {i} of the plan' for i in range(300))
    log = chat(4, output_lines=150, note=long_note)
    # With room (log under the soft threshold), nothing is shortened.
    roomy = isolate_boundaries().apply(list(log), budget_context(128_000))
    assert all(long_note in r for r in records(roomy))
    # Over the soft threshold the oldest runs' notes are cut, each naming the span that reads it back.
    sink = Sink()
    tight = isolate_boundaries().apply(list(log), budget_context(16_000, originals=sink))
    kept = [long_note in r for r in records(tight)]
    assert kept[0] is False
    assert kept[-1] is True
    assert kept == sorted(kept)  # oldest first
    answer = next(m for m in tight if isinstance(m, ModelResponse) and marker(m))
    ref = marker(answer)['ref']
    assert marker(answer)['shortened'] is True
    assert f"more characters: read_context('{ref}')]" in records(tight)[0]
    assert any(long_note in p.content for m in sink.spans[ref] for p in m.parts if isinstance(p, TextPart))
    # A view of the view changes nothing.
    assert isolate_boundaries().apply(list(tight), budget_context(16_000)) == tight


def test_keep_runs_is_validated() -> None:
    with pytest.raises(ValueError, match='keep_runs'):
        isolate_boundaries(keep_runs=-1)


async def test_a_real_three_run_chat_isolates_its_finished_runs() -> None:
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(parts=[TextPart(f'Answer {len(seen)}.')])
        return ModelResponse(
            parts=[
                TextPart(f'{NOTE} [{len(seen)}]'),
                ToolCallPart('read', {'path': f'src/f{len(seen)}.py'}, tool_call_id=f'r{len(seen)}'),
            ]
        )

    p = profile('coding', context_window=128_000, counter=HeuristicCounter())
    if PYDANTIC_AI_MAJOR >= 2:
        agent: Agent[None, str] = Agent(FunctionModel(respond), capabilities=[p])
    else:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            agent = Agent(FunctionModel(respond), history_processors=p.history_processors)

    @agent.tool_plain
    def read(path: str) -> str:
        return f'# {path}\n' + long_text(30, prefix=path)

    history: list[ModelMessage] = []
    for question in ('What is in f1?', 'And in f3?', 'And in f5?'):
        result = await agent.run(question, message_history=history)
        history = result.all_messages()
    third = seen[4]  # the third run's first request
    assert len(records(third)) == 2, 'both finished runs are records'
    assert f'{NOTE} [1]' in records(third)[0]
    assert f'{NOTE} [3]' in records(third)[1]
    assert not any(
        'src/f1.py line' in p.content for m in third for p in m.parts if isinstance(p, ToolReturnPart)
    )
    if PYDANTIC_AI_MAJOR >= 2:
        # The log is whole: every output is still in it (on 1.x the view replaces the run's history,
        # as documented in the-whole-request.md).
        assert sum(isinstance(p, ToolReturnPart) for m in history for p in m.parts) == 3


def test_extending_the_previous_output_stays_exact_when_the_log_crosses_the_soft_threshold() -> None:
    # With keep_runs=1 the last finished run is masked while there is room and becomes a record once
    # the log is over the soft threshold: the shortcut (previous output + new messages) must notice.
    log = chat(2, output_lines=10)
    h = History(_run=3)
    for i in range(12):
        h.step(Tool('execute_bash', {'command': f'cat g{i}.py'}, long_text(20)))
    grown = [*log, *h.build()]
    incremental = isolate_boundaries(keep_runs=1)
    scope = MemoScope()
    crossed = []
    for end in range(len(log), len(grown) + 1, 2):
        prefix = grown[:end]
        with compiling(scope, prefix):
            view = incremental.apply(list(prefix), budget_context(4_000))
        fresh = isolate_boundaries(keep_runs=1).apply(list(prefix), budget_context(4_000))
        assert view == fresh
        crossed.append(len(records(view)))
    assert crossed[0] == 1  # under the threshold: the older run is a record, the recent one masked
    assert crossed[-1] == 2  # over it: both are records


def test_run_ids_read_from_a_fold_resumed_between_compiles_equal_a_fresh_read() -> None:
    """Issue 22: what isolate reads of the previous log to extend its view (its requests, those
    without a run id, the newest run id) is a fold resumed from the first changed message."""
    import dataclasses

    from pydantic_ai_context._scope import MemoScope, compiling
    from pydantic_ai_context.policies.isolate import _continues_last_run

    h = History(stamp_runs=True).user('first task')
    for i in range(6):
        h.step(Tool('ls', {}, f'out {i}'))
    h.answer('done').user('second task')
    for i in range(6):
        h.step(Tool('ls', {}, f'more {i}'))
    log = h.build()
    unmarked = [*log[:20], dataclasses.replace(log[20], run_id=None), *log[21:]]
    other = [*log[:22], *(dataclasses.replace(m, run_id='run-x') for m in log[22:])]
    tails = [log[-2:], other[-2:], [dataclasses.replace(log[-1], run_id=None)]]
    scope = MemoScope()
    for previous in (log[:-2], unmarked[:-2], log[:-4], other[:-2], other[:22], log[:-2], unmarked[:-2]):
        for tail in tails:
            with compiling(scope, log):
                live = _continues_last_run(previous, tail)
            assert live == _continues_last_run(previous, tail), (len(previous), tail)


@dataclass
class _KeptRefs:
    refs: list[str] = field(default_factory=list)

    def keep_result(self, ref: str, part: Any) -> None:
        self.refs.append(ref)

    def keep_span(self, ref: str, items: Any, *, replace: bool = False) -> None:
        self.refs.append(ref)


def test_a_new_run_reuses_the_finished_runs_records_and_keeps_their_originals_again() -> None:
    """A run starting collapses the finished ones again: their records are made once while their
    messages stay the same, and what they gave the read-back archive is given again."""
    log, _, _ = two_runs()
    longer = [
        *log,
        ModelResponse(parts=[TextPart('Fixed: save() now validates first.')]),
        ModelRequest(parts=[UserPromptPart('Now add a test for it.')]),
    ]
    policy = isolate_boundaries()
    scope = MemoScope()

    def compiled(messages: list[ModelMessage], sink: _KeptRefs) -> list[ModelMessage]:
        with compiling(scope, messages):
            context = CompileContext(counter=HeuristicCounter())
            context.originals = sink
            return policy.apply(list(messages), context)

    first_sink, second_sink = _KeptRefs(), _KeptRefs()
    first = compiled(log, first_sink)
    second = compiled(longer, second_sink)
    assert marker(first[1])['kind'] == 'isolated'
    assert second[1] is first[1], "the first run's record is made once"
    assert first_sink.refs
    assert set(first_sink.refs) <= set(second_sink.refs), 'its originals are kept again'
    assert second == isolate(longer)  # the same view as one made from nothing
