from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

from pydantic_ai_context import CompileContext, ContextBudget, HeuristicCounter, _parts, normalize
from pydantic_ai_context.policies.trim import TrimToolOutputs, trim_tool_outputs

from ._examples import examples
from .builders import History, Tool, long_text
from .invariants import assert_all
from .strategies import any_histories

PROPS = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
COUNTER = HeuristicCounter(chars_per_token=4.0)


def run(
    policy: TrimToolOutputs, log: list[ModelMessage], budget: ContextBudget | None = None
) -> list[ModelMessage]:
    return normalize(policy.apply(list(log), CompileContext(counter=COUNTER, budget=budget)))


def trim(**settings: Any) -> TrimToolOutputs:
    defaults: dict[str, Any] = {'keep_recent': 1, 'step': 1, 'max_tokens': 200, 'keep_tokens': 100}
    return trim_tool_outputs(**(defaults | settings))


def history(*results: Any, user: str = 'fix it') -> list[ModelMessage]:
    h = History().user(user, system='sys')
    for i, result in enumerate(results):
        h.step(Tool('bash', {'command': f'cat f{i}.log'}, result))
    return h.build()


def test_old_large_result_becomes_head_and_tail_with_a_marker() -> None:
    big = long_text(400)
    log = history(big, big)
    view = run(trim(), log)
    part = view[2].parts[0]
    assert part.content.startswith('line 0: ')
    assert part.content.rstrip().endswith(big.splitlines()[-1])
    assert 'trimmed by pydantic-ai-context' in part.content
    assert 'output was 400 lines' in part.content
    assert len(part.content) < len(big) / 5
    assert part.tool_call_id == log[2].parts[0].tool_call_id
    assert part.tool_name == 'bash'
    assert _parts.marker(part) == {
        'kind': 'trimmed',
        'policy': 'trim_tool_outputs',
        'tokens': COUNTER.count_text(big),
        'lines': 400,
        'chars': len(big),
        'ref': part.tool_call_id,
    }
    assert f"[original: read_context('{part.tool_call_id}')]" in part.content
    assert view[4] is log[4]  # recency window untouched


def test_small_results_and_the_recency_window_stay() -> None:
    log = history('short', long_text(400))
    view = run(trim(), log)
    assert view == log
    assert all(a is b for a, b in zip(view, log, strict=True))


def test_facts_in_the_cut_part_are_listed() -> None:
    lines = [f'noise {i} ' + 'x' * 60 for i in range(300)]
    lines[150] = 'ValueError: the widget exploded in src/widgets/core.py'
    log = history('\n'.join(lines), 'x')
    content = run(trim(), log)[2].parts[0].content
    assert 'src/widgets/core.py' in content
    assert 'ValueError: the widget exploded in src/widgets/core.py' in content


def test_dict_and_list_content_become_trimmed_json_text() -> None:
    payload = {'exit_code': 0, 'stdout': long_text(300)}
    log = history(payload, [long_text(300)], 'x')
    view = run(trim(), log)
    for i in (2, 4):
        content = view[i].parts[0].content
        assert isinstance(content, str)
        assert 'trimmed by pydantic-ai-context' in content
    assert view[2].parts[0].content.startswith('{"exit_code":0')


def test_outcome_is_kept() -> None:
    log = history(long_text(400), 'x')
    if not hasattr(log[2].parts[0], 'outcome'):
        return
    log[2] = dataclasses.replace(log[2], parts=[dataclasses.replace(log[2].parts[0], outcome='denied')])
    # A denied result is a failure; it is resolved once the same tool later succeeds (it does, at step 2).
    view = run(trim(), log)
    assert view[2].parts[0].outcome == 'denied'


def test_unresolved_failures_are_not_trimmed() -> None:
    h = History().user('go')
    h.step(Tool('pytest', {}, long_text(400), failed=True))
    h.step(Tool('ls', {}, 'a.py')).step(Tool('ls', {}, 'b.py'))
    log = h.build()
    if not hasattr(log[2].parts[0], 'outcome'):
        return
    assert run(trim(), log)[2] is log[2]


def test_pinned_results_are_not_trimmed() -> None:
    log = history(long_text(400), 'x')
    pinned = dataclasses.replace(log[2].parts[0], metadata={'pinned': True})
    log[2] = dataclasses.replace(log[2], parts=[pinned])
    assert run(trim(), log)[2] is log[2]


def test_old_call_arguments_are_clipped_keeping_paths_and_json() -> None:
    file_text = 'print("hello")\n' * 200
    h = History().user('write it')
    h.step(
        Tool('str_replace_editor', {'command': 'create', 'path': '/repo/a.py', 'file_text': file_text}, 'ok')
    )
    h.step(Tool('bash', json.dumps({'command': 'python - <<EOF\n' + 'x = 1\n' * 300 + 'EOF'}), 'ok'))
    h.step(Tool('bash', {'command': 'ls'}, 'a.py'))
    log = h.build()
    view = run(trim(max_arg_chars=200), log)
    editor = view[1].parts[0]
    assert isinstance(editor, ToolCallPart)
    assert isinstance(editor.args, dict)
    assert editor.args['path'] == '/repo/a.py'
    assert editor.args['command'] == 'create'
    assert len(editor.args['file_text']) <= 200
    assert 'clipped by pydantic-ai-context' in editor.args['file_text']
    bash = view[3].parts[0]
    assert isinstance(bash, ToolCallPart)
    assert isinstance(bash.args, str)
    command = json.loads(bash.args)['command']
    assert command.startswith('python - <<EOF\n')
    assert 'clipped' in command
    assert _parts.marker(view[1])['args_tokens'] == {
        editor.tool_call_id: COUNTER.count_text(_parts.part_text(log[1].parts[0]))
    }  # type: ignore[index]
    assert view[5] is log[5]  # the newest call is in the recency window


def test_clamp_inside_the_recency_window_only_with_a_budget() -> None:
    huge = long_text(3_000)  # ~50k tokens at 4 chars a token
    log = history('x', huge)
    assert run(trim(), log)[-1] is log[-1]
    budget = ContextBudget(context_window=32_000)
    view = run(trim(), log, budget)
    part = view[-1].parts[0]
    assert _parts.marker(part)['kind'] == 'clamped'  # type: ignore[index]
    assert COUNTER.count_text(part.content) <= budget.limit * 0.5
    assert 'trimmed by pydantic-ai-context' in part.content
    # Later, once old, the clamped result is trimmed further and keeps the original size.
    longer = History(messages=list(view)).step(Tool('ls', {}, 'a')).build()
    again = run(trim(), longer, budget)[4].parts[0]
    assert _parts.marker(again)['kind'] == 'trimmed'  # type: ignore[index]
    assert _parts.marker(again)['lines'] == 3_000  # type: ignore[index]


def test_factory_settings() -> None:
    policy = trim_tool_outputs(keep_recent=4, step=2, max_tokens=300)
    assert policy.frontier.keep_recent == 4
    assert policy.frontier.step == 2
    assert policy.max_tokens == 300
    assert policy.name == 'trim_tool_outputs'


def test_standalone_history_processor() -> None:
    log = history(long_text(400), 'x')
    view = trim()(log)
    assert 'trimmed by pydantic-ai-context' in view[2].parts[0].content


@PROPS
@given(any_histories)
def test_invariants_idempotence_determinism(log: list[ModelMessage]) -> None:
    snapshot = copy.deepcopy(log)
    policy = trim(max_tokens=20, keep_tokens=10, max_arg_chars=30)
    budget = ContextBudget(context_window=2_000, reserved_output=0)
    base = normalize(log)  # synthetic repairs carry a timestamp: normalize once
    view = run(policy, base, budget)
    assert_all(log, snapshot, view)
    assert run(policy, view, budget) == view
    assert run(trim(max_tokens=20, keep_tokens=10, max_arg_chars=30), base, budget) == view
    for message in view:
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and _parts.marker(part):
                assert isinstance(part.content, str)
        if isinstance(message, ModelResponse):
            for call in _parts.tool_calls(message):
                if isinstance(call.args, str) and call.args.startswith('{'):
                    json.loads(call.args)


def test_requests_without_results_untouched() -> None:
    log = History().user('x' * 5_000).build()
    assert run(trim(), log)[0] is log[0]
    assert isinstance(log[0], ModelRequest)


def test_positions_before_keeps_exactly_the_entries_below_start() -> None:
    # The frontier policies' indexes (a result's first request, a fact's first message) grow with
    # insertion order; resuming keeps the entries below the resume point, as filtering would.
    from pydantic_ai_context.policies._base import positions_before

    index = {f'call_{i}': i // 2 for i in range(40)}
    for start in (0, 1, 7, 10, 19, 20, 25):
        kept = positions_before(index, start)
        assert kept == {k: v for k, v in index.items() if v < start}
        assert list(kept) == [k for k, v in index.items() if v < start]  # insertion order kept too
    assert positions_before(index, 20) is not index  # a copy: the previous state is left as it was
    assert len(index) == 40
