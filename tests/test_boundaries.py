"""Where a run ends without run ids (`_boundaries`), and that run ids alone decide when present."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_context import normalize, run_spans
from pydantic_ai_context._boundaries import REMINDER_MAX_CHARS, continues_task, prompt_text
from pydantic_ai_context._scope import MemoScope, compiling

from ._examples import examples
from .builders import History, Tool
from .strategies import histories

REMINDER = (
    'Please always provide EXACTLY ONE action in triple backticks, found 2 actions.\n\n'
    'Please format your action in triple backticks as shown in <response_example>.\n\n'
    '<response_example>\nHere are some thoughts about why you want to perform the action.\n\n'
    '```bash\n<action>\n```\n</response_example>'
)
TWO_ACTIONS = 'THOUGHT: I will look, then test.\n\n```bash\nls\n```\n\n```bash\npytest -q\n```'


def mini_swe_agent_run(*, stamp: bool = False) -> list[ModelMessage]:
    """A mini-swe-agent-style task: THOUGHT + one bash action a step, a format reminder in the middle."""
    log = (
        History(stamp_runs=stamp)
        .user('<pr_description>Fix the crash in src/app.py</pr_description>', system='You are a shell agent.')
        .step(
            Tool('bash', {'command': 'ls'}, 'src/app.py'), text='THOUGHT: first I list the repository files.'
        )
        .build()
    )
    rid = {'run_id': 'run-1'} if stamp else {}
    log.append(ModelResponse(parts=[TextPart(TWO_ACTIONS)], **rid))
    log.append(ModelRequest(parts=[UserPromptPart(REMINDER)], **rid))
    rest = History(stamp_runs=stamp, _run=1)  # the same run
    rest.step(Tool('bash', {'command': 'cat src/app.py'}, 'x = 1'), text='THOUGHT: one action at a time now.')
    log += rest.build()
    log.append(ModelResponse(parts=[TextPart(TWO_ACTIONS)], **rid))
    log.append(ModelRequest(parts=[UserPromptPart(REMINDER)], **rid))
    return log


@pytest.mark.parametrize('stamp', [False, True])
def test_format_reminders_do_not_split_a_run(stamp: bool) -> None:
    log = mini_swe_agent_run(stamp=stamp)
    assert [(s.start, s.end) for s in run_spans(log)] == [(0, len(log))]


def test_a_new_request_after_a_final_answer_starts_a_run() -> None:
    log = History().user('Why does it crash?').step(Tool('ls', {}, 'a.py')).answer('Because of a.py.').build()
    log.append(ModelRequest(parts=[UserPromptPart('Thanks. Now add a README.')]))
    assert [(s.start, s.end) for s in run_spans(log)] == [(0, 4), (4, 5)]


def test_run_ids_alone_decide_where_they_are_present() -> None:
    # With run ids, even a prompt that reads like a new request is inside its run...
    log = History(stamp_runs=True).user('first').step(Tool('ls', {}, 'a.py')).answer('one').build()
    log.append(ModelRequest(parts=[UserPromptPart('An unrelated new question?')], run_id='run-1'))
    assert len(run_spans(log)) == 1
    # ... and a change of run id ends it, even at a reminder.
    log.append(ModelResponse(parts=[TextPart('ok')], run_id='run-1'))
    log.append(ModelRequest(parts=[UserPromptPart(REMINDER)], run_id='run-2'))
    assert [s.run_id for s in run_spans(log)] == ['run-1', 'run-2']


@pytest.mark.parametrize(
    ('text', 'continues'),
    [
        (REMINDER, True),
        ('continue', True),
        ('Please continue.', True),
        ('keep going!', True),
        ('Your tool call had no arguments; call it again.', True),
        ('The earlier prompt', True),  # repeats an earlier prompt
        ('Now add a README.', False),
        ('Continue with the next feature: add a --dry-run flag to the sync command.', False),
        ('Please reformat the whole module and then ' + 'x' * REMINDER_MAX_CHARS, False),  # too long
        ('', False),
    ],
)
def test_what_continues_a_task(text: str, continues: bool) -> None:
    answer = ModelResponse(parts=[TextPart('Done.')])
    assert continues_task(answer, text, {'The earlier prompt'}) is continues


def test_a_prompt_right_after_tool_calls_continues_the_step() -> None:
    calling = History().user('x').call(Tool('ls', {}, 'a.py')).build()[-1]
    assert continues_task(calling, 'Now something entirely new.', set())


def test_prompt_text_joins_text_content_only() -> None:
    request = ModelRequest(parts=[UserPromptPart(['  look at this', 'and this  '])])
    assert prompt_text(request) == 'look at this\nand this'
    assert prompt_text(ModelResponse(parts=[TextPart('x')])) == ''


def test_a_summary_this_package_wrote_always_starts_a_run() -> None:
    from pydantic_ai_context._boundaries import SUMMARY_KIND
    from pydantic_ai_context._parts import with_marker
    from pydantic_ai_context.policies.summarize._summary_block import MARKER_KIND

    assert SUMMARY_KIND == MARKER_KIND
    log = History().user('Fix it.').step(Tool('ls', {}, 'a.py')).answer('Done.').build()
    # Its text mentions tool calls (as summaries do), which in a user's reminder would continue the task.
    summary = ModelRequest(
        parts=[UserPromptPart('<summary>The agent made 3 tool calls.</summary>')],
        metadata=with_marker(None, {'kind': SUMMARY_KIND}),
    )
    log.append(summary)
    assert [(s.start, s.end) for s in run_spans(log)] == [(0, 4), (4, 5)]


# --- consecutive requests read as the one request pydantic-ai merges them into --------------------


def _merged(log: list[ModelMessage]) -> tuple[list[ModelMessage], list[int]]:
    """`log` with consecutive requests merged and results no call asked for removed (as
    pydantic-ai and `normalize` do), and where each message of `log` went."""
    out: list[ModelMessage] = []
    where: list[int] = []
    for message in log:
        if out and isinstance(message, ModelRequest) and isinstance(out[-1], ModelRequest):
            out[-1] = dataclasses.replace(out[-1], parts=[*out[-1].parts, *message.parts])
        else:
            out.append(message)
        where.append(len(out) - 1)
    for i, message in enumerate(out):
        if isinstance(message, ModelRequest):
            before = out[i - 1] if i else None
            calls = {p.tool_call_id for p in before.parts if isinstance(p, ToolCallPart)} if before else set()
            parts = [p for p in message.parts if not isinstance(p, ToolReturnPart) or p.tool_call_id in calls]
            out[i] = dataclasses.replace(message, parts=parts)
    return out, where


def test_a_new_request_beside_a_reminder_starts_a_run_merged_or_not() -> None:
    log = History().user('task 1').step(Tool('ls', {}, 'a.py')).answer('Two actions.').build()
    log.append(ModelRequest(parts=[UserPromptPart('and also this')]))
    log.append(ModelRequest(parts=[UserPromptPart(REMINDER)]))
    merged, _ = _merged(log)
    assert [s.start for s in run_spans(log)] == [0, 4]
    assert [s.start for s in run_spans(merged)] == [0, 4]
    # One part that reads as a new request is enough, whichever order the parts come in.
    assert not continues_task(log[3], [REMINDER, 'and also this'], set())
    assert continues_task(log[3], [REMINDER, 'continue'], set())


def test_a_prompt_after_tool_results_in_a_request_of_its_own_is_tool_content() -> None:
    # pydantic-ai sends the two requests as one: results the model is to read, then the content.
    log = History().user('task').step(Tool('ls', {}, 'a.py')).build()
    log.append(ModelRequest(parts=[UserPromptPart('Now something entirely new.')]))
    assert [s.start for s in run_spans(log)] == [0]


texts_in_groups = st.sampled_from(
    ['and also this', REMINDER, 'continue', 'task 1', 'Now add a README.', 'task 0: ']
)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), log=histories())
def test_runs_are_the_same_before_and_after_requests_are_merged(
    data: st.DataObject, log: list[ModelMessage]
) -> None:
    log = [dataclasses.replace(m, run_id=None) for m in log]
    for n in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(log)))
        extra = ModelRequest(parts=[UserPromptPart(data.draw(texts_in_groups))])
        if data.draw(st.booleans()):  # a result no call asked for (what `normalize` removes)
            orphan = ToolReturnPart('grep', 'no call for me', tool_call_id=f'orphan-{n}')
            extra = ModelRequest(parts=[orphan, *extra.parts])
        log.insert(at, extra)
    merged, where = _merged(log)
    raw = {where[s.start] for s in run_spans(log)}
    assert raw == {s.start for s in run_spans(merged)}
    # Read as a log that grew a message at a time inside one compile (the fold resumed), the same.
    scope = MemoScope()
    for n in range(1, len(log) + 1):
        with compiling(scope, log[:n]):
            grown = run_spans(log[:n])
    assert grown == run_spans(log)


def test_a_response_merged_into_the_one_before_keeps_that_ones_run() -> None:
    """Regression (the fit property test, pydantic-ai 2.62 leg): two responses in a row with
    different run ids are sent as one, with the first's run id; the run that starts with the
    second begins at the request after them, as in the merged log."""
    log: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('task 0')], run_id='run-0'),
        ModelResponse(parts=[TextPart('answer 0')], run_id='run-0'),
        ModelResponse(parts=[ToolCallPart('read_file', {'path': 'a.py'}, tool_call_id='c1')], run_id='run-1'),
        ModelRequest(parts=[ToolReturnPart('read_file', 'x = 1', tool_call_id='c1')], run_id='run-1'),
        ModelResponse(parts=[TextPart('answer 1')], run_id='run-1'),
        ModelRequest(parts=[UserPromptPart('and?')], run_id='run-1'),
    ]
    merged = [
        log[0],
        dataclasses.replace(log[1], parts=[*log[1].parts, *log[2].parts]),
        *log[3:],
    ]
    where = [0, 1, 1, 2, 3, 4]
    assert [(where[s.start], s.run_id) for s in run_spans(log)] == [
        (s.start, s.run_id) for s in run_spans(merged)
    ]


def test_requests_merged_into_one_speak_for_the_run_the_merged_request_has() -> None:
    """Regression (the fit property test): a request without a run id, merged into the next one,
    made the raw log split by prompts while the merged log (every request with an id) split by run
    id; a run's prompt sent right after the request that closed the run before it takes the merged
    request into its run."""
    log: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('and also this')]),
        ModelRequest(parts=[UserPromptPart('task 0')], run_id='run-0'),
        ModelResponse(parts=[TextPart('answer 0')], run_id='run-0'),
        ModelRequest(parts=[UserPromptPart('task 1')], run_id='run-1'),
        ModelResponse(parts=[ToolCallPart('read_file', {'path': 'a.py'}, tool_call_id='c1')], run_id='run-1'),
        ModelRequest(parts=[ToolReturnPart('read_file', 'x = 1', tool_call_id='c1')], run_id='run-1'),
        ModelRequest(parts=[UserPromptPart('task 2')], run_id='run-2'),
        ModelResponse(parts=[TextPart('answer 2')], run_id='run-2'),
    ]
    merged = normalize(log)
    assert len(merged) == 5  # merged, and ending on the request (the last response is left out)
    where = [0, 0, 1, 2, 3, 4, 4, 5]
    assert [(where[s.start], s.run_id) for s in run_spans(log)] == [
        (s.start, s.run_id) for s in run_spans(merged)
    ]
