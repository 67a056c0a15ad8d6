from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
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

from pydantic_ai_context import HeuristicCounter, normalize, run_spans, validate_view
from pydantic_ai_context._boundaries import starts_run
from pydantic_ai_context._model_texts import ModelTexts
from pydantic_ai_context._parts import marker
from pydantic_ai_context.policies.isolate import IsolateBoundaries, isolate_boundaries
from pydantic_ai_context.views import CompileContext

from . import data
from .builders import History, Tool, long_text
from .invariants import assert_all
from .strategies import any_histories

PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
    assert isinstance(record, TextPart) and original is log[5].parts[0]
    # The calls and their outputs are gone; the assistant's own note stays, verbatim.
    assert 'Running the tests.' in record.content
    assert 'execute_bash' not in record.content and 'ValueError' not in record.content
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


def test_run_ended_by_output_tool_keeps_its_trace() -> None:
    log = History().user('extract').step(Tool('lookup', {'q': 'x'}, 'y')).build()
    log.append(ModelResponse(parts=[ToolCallPart('final_result', {'value': 'y'}, tool_call_id='out')]))
    log.append(
        ModelRequest(parts=[ToolReturnPart('final_result', 'Final result processed.', tool_call_id='out')])
    )
    log += History().user('again').build()
    assert isolate(log) == log


def test_record_goes_after_the_answers_thinking() -> None:
    log, _, _ = two_runs()
    log[5] = ModelResponse(parts=[ThinkingPart('so the cause is...'), TextPart('A ValueError.')])
    view = isolate(log)
    kinds = [type(p).__name__ for p in view[1].parts]
    assert kinds == ['ThinkingPart', 'TextPart', 'TextPart']
    assert view[1].parts[1].content.startswith('[Record kept')


def test_mid_run_user_prompt_step_is_kept() -> None:
    # A steering message inside a run (same run_id) is conversation, not tool machinery.
    log, _, _ = two_runs(stamp=True)
    steer = ModelRequest(parts=[*log[2].parts, UserPromptPart('also check views.py')], run_id=log[2].run_id)
    log[2] = steer
    view = isolate(log, run_id='run-2')
    assert steer in view
    assert log[1] in view
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
