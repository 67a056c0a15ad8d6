from __future__ import annotations

import copy
import itertools

from hypothesis import given, settings
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)

from pydantic_ai_context import conversation_view, current_run, run_spans

from ._examples import examples
from .builders import History, Tool
from .strategies import any_histories


def test_run_spans_by_user_prompt() -> None:
    log = (
        History()
        .user('first', system='sys')
        .step(Tool('ls', {}, 'a.py'))
        .answer('one')
        .user('second')
        .step(Tool('cat', {'path': 'a.py'}, 'x'))
        .build()
    )
    assert [(s.start, s.end) for s in run_spans(log)] == [(0, 4), (4, 7)]
    span = current_run(log)
    assert span is not None
    assert (span.start, span.end) == (4, 7)


def test_run_spans_by_run_id_ignore_mid_run_user_prompts() -> None:
    log = History(stamp_runs=True).user('first').step(Tool('ls', {})).answer('one').build()
    # A steering message inside the same run (same run_id) does not start a run.
    log.insert(2, ModelResponse(parts=[TextPart('thinking aloud')], run_id='run-1'))
    log.insert(3, ModelRequest(parts=[UserPromptPart('also check b.py')], run_id='run-1'))
    log += History(stamp_runs=True, _run=1).user('second').build()
    spans = run_spans(log)
    assert [(s.start, s.end, s.run_id) for s in spans] == [(0, 6, 'run-1'), (6, 7, 'run-2')]
    run_one = current_run(log, run_id='run-1')
    assert run_one is not None
    assert run_one.run_id == 'run-1'


def test_empty_log_has_no_runs() -> None:
    assert run_spans([]) == []
    assert current_run([]) is None


def test_conversation_view_keeps_prompts_and_final_answers() -> None:
    log = (
        History()
        .user('how many files?', system='be brief')
        .step(Tool('ls', {}, 'a.py b.py'), text='checking')
        .answer('Two.')
        .user('and now?')
        .step(Tool('ls', {}, 'a.py'))
        .answer('One.')
        .build()
    )
    clean = conversation_view(log)
    assert [type(m).__name__ for m in clean] == ['ModelRequest', 'ModelResponse'] * 2
    assert [p.part_kind for p in clean[0].parts] == ['system-prompt', 'user-prompt']
    assert clean[1].parts == [TextPart('Two.')]
    assert clean[3].parts == [TextPart('One.')]
    without_system = conversation_view(log, include_system_prompt=False)
    assert not any(isinstance(p, SystemPromptPart) for m in without_system for p in m.parts)


def test_conversation_view_run_without_answer() -> None:
    log = History().user('deploy').call(Tool('deploy', {})).build()
    clean = conversation_view(log)
    assert len(clean) == 1
    assert isinstance(clean[0].parts[0], UserPromptPart)
    assert not any(isinstance(p, ToolCallPart) for m in clean for p in m.parts)


@settings(max_examples=examples(100), deadline=None)
@given(any_histories)
def test_conversation_view_has_no_tool_machinery_and_does_not_mutate(log: list) -> None:
    snapshot = copy.deepcopy(log)
    clean = conversation_view(log)
    assert log == snapshot
    for message in clean:
        for part in message.parts:
            assert part.part_kind in {'system-prompt', 'user-prompt', 'text'}
    for a, b in itertools.pairwise(clean):
        assert not (isinstance(a, ModelResponse) and isinstance(b, ModelResponse))
