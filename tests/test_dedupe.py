from __future__ import annotations

import copy
import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ToolCallPart,
    ToolReturnPart,
)

from pydantic_ai_context import ContextBudget, HeuristicCounter, normalize, validate_view
from pydantic_ai_context._parts import marker
from pydantic_ai_context._scope import MemoScope, compiling
from pydantic_ai_context.policies._frontier import Frontier
from pydantic_ai_context.policies.dedupe import DedupeReads, dedupe_reads, read_key, read_path
from pydantic_ai_context.views import CompileContext

from . import data
from ._examples import examples
from .builders import History, Tool, long_text
from .invariants import assert_all
from .strategies import any_histories

PROPS = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
TRAJECTORIES = list(data.TRAJECTORIES)
SOURCE = long_text(40, prefix='def f')
EAGER = {'keep_recent': 1, 'step': 1, 'within_step': False}
"""Settings under which every result but the newest is outside the recency window, and any newer
copy may supersede an older one (the semantics of superseding, apart from cache stability)."""


def dedupe(log: list[ModelMessage], **settings: object) -> list[ModelMessage]:
    return dedupe_reads(**{**EAGER, **settings}).apply(list(log), CompileContext(counter=HeuristicCounter()))


def results(view: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in view if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]


def filler(n: int = 1) -> list[Tool]:
    return [Tool('execute_bash', {'command': f'echo {i}'}, str(i)) for i in range(n)]


def history(*tools: Tool) -> list[ModelMessage]:
    h = History().user('Fix the bug in a.py', system='You are a coding agent.')
    for tool in tools:
        h.step(tool)
    return h.build()


def test_reread_supersedes_the_older_copy() -> None:
    first = Tool('read_file', {'path': 'src/a.py'}, SOURCE)
    second = Tool('read_file', {'path': 'src/a.py'}, SOURCE + '\n# edited')
    log = history(first, second, *filler())
    view = dedupe(log)
    old, new = results(view)[:2]
    assert old.content == (
        f"[superseded: re-read later by call {second.id} (read_file(path='src/a.py')); content omitted]\n"
        f"[original: read_context('{first.id}')]"
    )
    assert old.tool_call_id == first.id
    assert old.tool_name == 'read_file'
    record = marker(old)
    assert record is not None
    assert {k: record[k] for k in ('kind', 'by', 'reason')} == {
        'kind': 'superseded',
        'by': second.id,
        'reason': 'reread',
    }
    assert record['tokens'] > 100  # the size it had, so the frontier sees the same sizes on a view
    assert new is log[4].parts[0]
    assert view[0] is log[0]
    assert view[1] is log[1]
    assert view[3:] == log[3:]
    validate_view(view)


def test_newer_copy_inside_the_recency_window_protects_the_older() -> None:
    log = history(
        Tool('read_file', {'path': 'src/a.py'}, SOURCE), Tool('read_file', {'path': 'src/a.py'}, SOURCE + '!')
    )
    # The newest observation is always protected, so the re-read cannot supersede yet.
    assert dedupe(log) == log
    longer = log + history(*filler())[1:]
    assert dedupe(longer, keep_recent=2) == longer


def test_frontier_moves_in_steps() -> None:
    reads = [Tool('read_file', {'path': 'src/a.py'}, SOURCE + str(i)) for i in range(2)]
    changed_at = []
    for n in range(8):
        log = history(*reads, *filler(n))
        if dedupe(log, keep_recent=2, step=3) != log:
            changed_at.append(n)
    # 2 reads + n fillers; the newer read leaves the window once 3 whole observations can be compacted.
    assert changed_at == [3, 4, 5, 6, 7]


def test_shared_frontier_replaces_keep_recent_and_step() -> None:
    log = history(
        Tool('read_file', {'path': 'a.py'}, SOURCE), Tool('read_file', {'path': 'a.py'}, SOURCE), *filler(2)
    )
    assert dedupe(log, frontier=Frontier(keep_recent=10, step=1)) == log
    assert dedupe(log, keep_recent=10, frontier=Frontier(keep_recent=1, step=1)) != log


def test_identical_outputs_of_any_tool_collapse() -> None:
    out = long_text(30, prefix='FAILED tests/test_a.py::test_x')
    first = Tool('execute_bash', {'command': 'pytest -q'}, out)
    second = Tool('execute_bash', {'command': 'pytest -q tests/test_a.py'}, out)
    other = Tool('grep', {'pattern': 'x'}, out)  # same text, another tool: not a copy
    log = history(first, other, second, *filler())
    old, grep, new = results(dedupe(log))[:3]
    assert old.content.startswith(
        f'[duplicate: identical output to the later call {second.id} (execute_bash('
    )
    assert marker(old)['reason'] == 'identical'  # type: ignore[index]
    assert grep.content == out
    assert new.content == out


def test_identical_outputs_can_be_turned_off() -> None:
    out = long_text(30)
    log = history(
        Tool('execute_bash', {'command': 'a'}, out), Tool('execute_bash', {'command': 'b'}, out), *filler()
    )
    assert dedupe(log, identical_outputs=False) == log


def test_different_outputs_stay() -> None:
    log = history(
        Tool('execute_bash', {'command': 'pytest'}, long_text(30)),
        Tool('execute_bash', {'command': 'pytest'}, long_text(31)),
        *filler(),
    )
    assert dedupe(log) == log


def test_failed_results_are_never_touched_nor_supersede() -> None:
    if not hasattr(ToolReturnPart('x', 'y'), 'outcome'):
        pytest.skip('no outcome field: failures are retry prompts, which are not tool returns here')
    failed_old = Tool('read_file', {'path': 'a.py'}, SOURCE, failed=True)
    ok_new = Tool('read_file', {'path': 'a.py'}, SOURCE)
    log = history(failed_old, ok_new, *filler())
    assert dedupe(log) == log
    ok_old = Tool('read_file', {'path': 'b.py'}, SOURCE)
    failed_new = Tool('read_file', {'path': 'b.py'}, SOURCE, failed=True)
    log = history(ok_old, failed_new, *filler())
    assert dedupe(log) == log


def test_write_in_between_still_supersedes_and_says_so() -> None:
    view_1 = Tool('str_replace_editor', {'command': 'view', 'path': '/repo/a.py'}, SOURCE)
    edit = Tool(
        'str_replace_editor', {'command': 'str_replace', 'path': '/repo/a.py', 'old_str': 'x', 'new_str': 'y'}
    )
    view_2 = Tool('str_replace_editor', {'command': 'view', 'path': '/repo/a.py'}, SOURCE.replace('x', 'y'))
    log = history(view_1, edit, view_2, *filler())
    old = results(dedupe(log))[0]
    assert old.content.startswith(f'[superseded: re-read later by call {view_2.id} (str_replace_editor(')
    assert 'after the file was modified' in old.content
    # Keeping reads of older versions instead:
    assert dedupe(log, across_writes=False) == log


def test_shell_write_in_between_is_detected() -> None:
    cat_1 = Tool('bash', {'command': 'cat src/a.py'}, SOURCE)
    write = Tool('bash', {'command': "sed -i 's/x/y/' src/a.py"}, '')
    cat_2 = Tool('bash', {'command': 'cat src/a.py'}, SOURCE.replace('x', 'y'))
    old = results(dedupe(history(cat_1, write, cat_2, *filler())))[0]
    assert 'after the file was modified' in old.content
    unrelated = Tool('bash', {'command': 'echo hi > notes.txt'}, '')
    old = results(dedupe(history(cat_1, unrelated, cat_2, *filler())))[0]
    assert old.content.startswith('[superseded')
    assert 'modified' not in old.content


@pytest.mark.timeout(10, method='thread')
def test_a_command_of_many_options_is_checked_for_writes_in_linear_time() -> None:
    # `sed -sed -sed ...` made the write check rescan every option from every `sed` (quadratic).
    cat_1 = Tool('bash', {'command': 'cat src/a.py'}, SOURCE)
    long_sed = Tool('bash', {'command': 'sed ' + '-sed ' * 200_000 + 'src/a.py'}, '')
    sed_in_place = Tool('bash', {'command': "sed -n -E -i 's/x/y/' src/a.py"}, '')
    cat_2 = Tool('bash', {'command': 'cat src/a.py'}, SOURCE.replace('x', 'y'))
    old = results(dedupe(history(cat_1, long_sed, cat_2, *filler())))[0]
    assert 'modified' not in old.content
    old = results(dedupe(history(cat_1, sed_in_place, cat_2, *filler())))[0]
    assert 'after the file was modified' in old.content


def test_whole_file_read_supersedes_older_ranges_but_not_the_reverse() -> None:
    part = Tool('str_replace_editor', {'command': 'view', 'path': 'a.py', 'view_range': [1, 40]}, SOURCE)
    whole = Tool('str_replace_editor', {'command': 'view', 'path': 'a.py'}, SOURCE + SOURCE)
    view = dedupe(history(part, whole, *filler()))
    assert results(view)[0].content.startswith(f'[superseded: re-read later by call {whole.id}')
    log = history(whole, part, *filler())
    assert dedupe(log) == log
    other_range = Tool(
        'str_replace_editor', {'command': 'view', 'path': 'a.py', 'view_range': [41, 80]}, SOURCE + '!'
    )
    log = history(part, other_range, *filler())
    assert dedupe(log) == log


def test_copies_form_a_chain_to_the_next_copy() -> None:
    reads = [Tool('read_file', {'path': 'a.py'}, SOURCE + str(i)) for i in range(3)]
    first, second, third = results(dedupe(history(*reads, *filler())))[:3]
    assert marker(first)['by'] == reads[1].id  # type: ignore[index]
    assert marker(second)['by'] == reads[2].id  # type: ignore[index]
    assert third.content == SOURCE + '2'


def test_small_outputs_stay() -> None:
    log = history(
        Tool('read_file', {'path': 'a.py'}, 'x = 1'), Tool('read_file', {'path': 'a.py'}, 'x = 1'), *filler()
    )
    assert dedupe(log) == log
    assert dedupe(log, min_tokens=0) == log  # a back-reference longer than the output is never worth it


def test_pinned_copy_stays() -> None:
    log = history(
        Tool('read_file', {'path': 'a.py'}, SOURCE), Tool('read_file', {'path': 'a.py'}, SOURCE), *filler()
    )
    log[2] = dataclasses.replace(
        log[2], parts=[dataclasses.replace(log[2].parts[0], metadata={'pinned': True})]
    )
    assert dedupe(log) == log


def test_custom_key() -> None:
    def by_url(call: ToolCallPart) -> str | None:
        url = call.args.get('url') if isinstance(call.args, dict) else None
        return f'web:{url}' if call.tool_name == 'fetch' and url else None

    log = history(
        Tool('fetch', {'url': 'https://x.org'}, SOURCE),
        Tool('fetch', {'url': 'https://x.org'}, SOURCE + '!'),
        *filler(),
    )
    assert results(dedupe(log, key=by_url))[0].content.startswith('[superseded')
    assert dedupe(log) == log  # the default key does not know `fetch`


@pytest.mark.parametrize(
    ('tool', 'args', 'key'),
    [
        ('read_file', {'path': 'a.py'}, 'read_file:a.py'),
        (
            'read_file',
            {'file_path': 'a.py', 'offset': 10, 'limit': 5},
            'read_file:a.py#{"limit": 5, "offset": 10}',
        ),
        ('mcp__fs__read_file', {'path': 'a.py'}, 'mcp__fs__read_file:a.py'),
        ('view_file', '{"filename": "b.md"}', 'view_file:b.md'),
        (
            'str_replace_editor',
            {'command': 'view', 'path': '/r/a.py', 'view_range': [1, 9]},
            'str_replace_editor:view:/r/a.py#{"view_range": [1, 9]}',
        ),
        ('str_replace_editor', {'command': 'create', 'path': '/r/a.py', 'file_text': 'x'}, None),
        ('bash', {'command': 'cat a.py'}, 'bash:a.py'),
        ('execute_bash', {'command': 'cat -n  a.py'}, 'execute_bash:a.py'),
        ('bash', {'command': 'nl -ba a.py'}, 'bash:a.py'),
        ('bash', {'command': 'head -n 20 a.py'}, 'bash:a.py#head -n 20 a.py'),
        ('bash', {'command': "sed -n '5,9p' a.py"}, 'bash:a.py#sed -n 5,9p a.py'),
        ('bash', {'command': "nl -ba a.py | sed -n '5,9p'"}, 'bash:a.py#nl -ba a.py | sed -n 5,9p'),
        ('bash', {'command': 'cat a.py b.py'}, None),
        ('bash', {'command': 'cat a.py > b.py'}, None),
        ('bash', {'command': "sed -i 's/a/b/' a.py"}, None),
        ('bash', {'command': 'cd src && cat a.py'}, None),
        ('bash', {'command': "cat <<'EOF' > a.py\nx\nEOF"}, None),
        ('bash', {'command': 'pytest -q'}, None),
        ('bash', {'command': 'grep -n x a.py'}, None),
        ('think', {'thought': 'cat a.py'}, None),
    ],
)
def test_read_key(tool: str, args: object, key: str | None) -> None:
    call = ToolCallPart(tool, args)  # type: ignore[arg-type]
    assert read_key(call) == key
    assert (read_path(call) is None) == (key is None)


def test_idempotent_deterministic_and_input_untouched() -> None:
    log = history(*[Tool('read_file', {'path': 'a.py'}, SOURCE + str(i % 2)) for i in range(6)], *filler(3))
    snapshot = copy.deepcopy(log)
    once = dedupe(log)
    assert once != log
    assert log == snapshot
    twice = dedupe(once)
    assert twice == once
    assert all(a is b for a, b in zip(twice, once, strict=True))
    assert dedupe(snapshot) == once


def test_notes_what_it_did() -> None:
    context = CompileContext(counter=HeuristicCounter())
    log = history(
        Tool('read_file', {'path': 'a.py'}, SOURCE), Tool('read_file', {'path': 'a.py'}, SOURCE), *filler()
    )
    dedupe_reads(**EAGER).apply(log, context)
    reason, details = context._take_notes()
    assert 'superseded 1 older copy' in reason
    assert details == {'superseded': 1}


def test_standalone_history_processor() -> None:
    log = history(
        Tool('read_file', {'path': 'a.py'}, SOURCE), Tool('read_file', {'path': 'a.py'}, SOURCE), *filler()
    )
    assert results(dedupe_reads(**EAGER)(log))[0].content.startswith('[superseded')


@PROPS
@given(log=any_histories)
def test_invariants_idempotence_and_determinism(log: list[ModelMessage]) -> None:
    snapshot = copy.deepcopy(log)
    view = normalize(dedupe(log))
    assert_all(log, snapshot, view)
    assert dedupe(snapshot) == dedupe(log)
    compiled = normalize(dedupe(normalize(log)))
    assert normalize(dedupe(compiled)) == compiled


def load(path: Path) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_json(path.read_bytes())


@pytest.mark.parametrize('path', TRAJECTORIES, ids=lambda p: p.stem)
def test_trajectory(path: Path) -> None:
    log = load(path)
    snapshot = copy.deepcopy(log)
    view = dedupe(log, keep_recent=3, step=5)
    assert_all(log, snapshot, view)
    counter = HeuristicCounter()
    assert counter.count_messages(view) <= counter.count_messages(log)
    ids_after: list[str] = []
    for i, part in enumerate(results(view)):
        record = marker(part)
        if record is not None and record.get('kind') == 'superseded':
            ids_after.append(record['by'])
            later = [p.tool_call_id for p in results(view)[i + 1 :]]
            assert record['by'] in later  # the back-reference points forward, at a result in the view
    assert dedupe(view, keep_recent=3, step=5) == view


def test_within_step_supersedes_only_inside_one_frontier_step() -> None:
    """Cache stability: an older copy changes only at the frontier jump that also compacts it."""
    source = 'def main():\n' + '    print("hello")\n' * 40
    h = History().user('fix main.py')
    for i in range(9):
        name = 'read_file' if i in (0, 2, 5) else 'ls'
        h.step(
            Tool(
                name,
                {'path': 'main.py'} if name == 'read_file' else {},
                source if name == 'read_file' else str(i),
            )
        )
    log = h.build()
    view = dedupe(log, keep_recent=1, step=4, within_step=True)
    contents = [p.content for m in view for p in m.parts if isinstance(p, ToolReturnPart)]
    # Observations 0-3 and 4-7 are the two compacted steps: read 0 is superseded by read 2 (same
    # step); read 2 is not superseded by read 5 (a later step) -- that would rewrite a part the
    # previous request already sent.
    assert contents[0].startswith('[superseded')
    assert contents[2] == source
    assert contents[5] == source
    everything = dedupe(log, keep_recent=1, step=4, within_step=False)
    assert [p.content for m in everything for p in m.parts if isinstance(p, ToolReturnPart)][2].startswith(
        '[superseded'
    )


def rereading_log(seed: int, steps: int = 60) -> list[ModelMessage]:
    """A run that re-reads a few files (whole and in ranges), repeats a command with the same
    output, and edits in between: copies to supersede in most frontier steps."""
    rng = random.Random(seed)
    h = History().user('Fix the bug', system='You are a coding agent.')
    for i in range(steps):
        path = rng.choice(['a.py', 'b.py'])
        version = rng.randrange(2)
        read = long_text(30, prefix=f'{path} v{version}')
        tool = rng.choice(
            [
                Tool('read_file', {'path': path}, read),
                Tool('read_file', {'path': path}, read),
                Tool('read_file', {'path': path, 'offset': 10}, long_text(20, prefix=f'{path} v{version}')),
                Tool('bash', {'command': f'cat {path}'}, read),
                Tool('bash', {'command': 'pytest -q'}, long_text(25, prefix=f'pytest {version}')),
                Tool('bash', {'command': 'pytest -q'}, long_text(25, prefix=f'pytest {version}')),
                Tool('edit_file', {'path': path, 'old': 'x', 'new': 'y'}, 'ok'),
                Tool('execute_bash', {'command': f'echo {i}'}, str(i)),
            ]
        )
        h.step(tool)
    return h.build()


def compile_in_scope(
    policy: DedupeReads, scope: MemoScope, log: list[ModelMessage], messages: list[ModelMessage], window: int
) -> list[ModelMessage]:
    """`policy` applied to `messages` (the output of the steps before it in a profile) during a
    compile of `log`, where what it kept from its previous compile may be reused."""
    context = CompileContext(
        counter=HeuristicCounter(), budget=ContextBudget(context_window=window, reserved_output=300)
    )
    with compiling(scope, log):
        return policy.apply(list(messages), context)


def fresh_dedupe(messages: list[ModelMessage], window: int, **settings: object) -> list[ModelMessage]:
    context = CompileContext(
        counter=HeuristicCounter(), budget=ContextBudget(context_window=window, reserved_output=300)
    )
    return dedupe_reads(**settings).apply(list(messages), context)


def rewritten(messages: list[ModelMessage], index: int) -> list[ModelMessage]:
    """`messages` with the results of request `index` replaced by new content (as an earlier step
    of a profile's chain may rewrite an old message between two compiles)."""
    out = list(messages)
    request = out[index]
    assert isinstance(request, ModelRequest)
    parts: list[Any] = [
        dataclasses.replace(p, content=long_text(30, prefix='rewritten'))
        for p in request.parts
        if isinstance(p, ToolReturnPart)
    ]
    out[index] = dataclasses.replace(request, parts=parts)
    return out


@pytest.mark.parametrize('seed', range(6))
@pytest.mark.parametrize('window', [3_000, 9_000, 200_000])
def test_resumed_steps_equal_a_fresh_pass(seed: int, window: int) -> None:
    """When the frontier moves, `dedupe_reads` keeps the frontier steps of its previous pass whose
    messages did not change and computes the others: every view equals a fresh pass, request
    after request (a budget moves the frontier by single observations, so a pass often ends with
    a step that the next one completes), and when an earlier step of the chain rewrites an old
    message between two compiles."""
    log = rereading_log(seed)
    settings: dict[str, object] = {'keep_recent': 2, 'step': 3}
    policy = dedupe_reads(**settings)
    scope = MemoScope()
    ends = [i + 1 for i, m in enumerate(log) if isinstance(m, ModelRequest)][1:]
    superseded: set[str] = set()
    for end in ends:
        view = compile_in_scope(policy, scope, log[:end], log[:end], window)
        assert view == fresh_dedupe(log[:end], window, **settings), f'request at message {end}'
        superseded |= {p.tool_call_id for p in results(view) if (marker(p) or {}).get('kind') == 'superseded'}
        index = ends[len(ends) // 4] - 1
        if end % 7 == 0 and index < end - 10:
            # An earlier step of the chain rewrote an old observation: the steps from it on change.
            changed = rewritten(log[:end], index)
            view = compile_in_scope(policy, scope, log[:end], changed, window)
            assert view == fresh_dedupe(changed, window, **settings), f'rewritten, request at {end}'
    assert len(superseded) >= 3, 'little was superseded: the test proves nothing'


def test_frontier_steps_kept_when_the_frontier_moves_are_the_previous_objects() -> None:
    """The steps a moved frontier had already passed keep the very messages of the previous view
    (their placeholders are not rebuilt), so the next steps of the chain (trim, mask) see an
    unchanged prefix and resume after it."""
    log = rereading_log(1)
    policy = dedupe_reads(keep_recent=2, step=3)
    scope = MemoScope()
    ends = [i + 1 for i, m in enumerate(log) if isinstance(m, ModelRequest)][1:]
    previous = compile_in_scope(policy, scope, log[: ends[20]], log[: ends[20]], 200_000)
    for end in ends[21:]:
        view = compile_in_scope(policy, scope, log[:end], log[:end], 200_000)
        # The frontier moves by 3 observations: only the last steps before it may be new.
        assert all(a is b for a, b in zip(previous[:-16], view, strict=False)), f'request at message {end}'
        previous = view
    assert sum(a is not b for a, b in zip(log, view, strict=False)) >= 3  # placeholders in the kept steps


def test_a_pass_with_another_step_size_starts_over() -> None:
    """Steps of another size group other observations: none of the previous pass is kept."""
    log = rereading_log(2)
    policy = dedupe_reads(keep_recent=2, step=3)
    scope = MemoScope()
    ends = [i + 1 for i, m in enumerate(log) if isinstance(m, ModelRequest)][1:]
    compile_in_scope(policy, scope, log[: ends[40]], log[: ends[40]], 200_000)
    policy.step = 4
    for end in ends[41:]:
        view = compile_in_scope(policy, scope, log[:end], log[:end], 200_000)
        assert view == fresh_dedupe(log[:end], 200_000, keep_recent=2, step=4), f'request at message {end}'


def test_what_a_call_reads_follows_its_arguments() -> None:
    """What a call reads is remembered per call, while its arguments and tool name stay the same."""
    call = ToolCallPart('read_file', {'path': 'a.py'})
    assert read_key(call) == 'read_file:a.py'
    call.args = {'path': 'b.py'}
    assert read_key(call) == 'read_file:b.py'
    call.tool_name = 'bash'
    assert read_key(call) is None
    call.args = {'command': 'cat b.py'}
    assert read_key(call) == read_key(ToolCallPart('bash', {'command': 'cat b.py'})) == 'bash:b.py'
