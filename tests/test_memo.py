"""Caches stay right when messages are edited in place, and let go of conversations (issue 15, items 1-2)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import gc
import threading
import weakref
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import messages as messages_module
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_context import (
    ContextBudget,
    ContextBudgetExceeded,
    HeuristicCounter,
    InMemorySummaryCache,
    _memo,
    available_profiles,
    normalize,
    profile,
    validate_view,
)
from pydantic_ai_context._memo import ENTRY_BYTES, PART_FIELDS, PARTS_FIELDS, VALUE_BYTES, ObjectMemo
from pydantic_ai_context._scope import MemoScope, TextMemo, active_generation, compiling
from pydantic_ai_context.policies.mask import mask_observations
from pydantic_ai_context.readback.archive import ContextArchive
from pydantic_ai_context.replay import extractive_summary_model
from pydantic_ai_context.tokens import default_counter

from ._examples import examples
from .strategies import broken_histories, histories

PRESETS = available_profiles()


def coding_log(steps: int, *, output: Any = None) -> list[ModelMessage]:
    log: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart('You are a coding agent.'), UserPromptPart('Fix the bug.')])
    ]
    for i in range(steps):
        call = ToolCallPart('read_file', {'path': f'src/mod_{i}.py'}, tool_call_id=f'c{i}')
        log.append(ModelResponse(parts=[TextPart(f'Reading module {i}.'), call]))
        content = output(i) if output is not None else f'src/mod_{i}.py: line\n' * 60
        log.append(ModelRequest(parts=[ToolReturnPart('read_file', content, tool_call_id=f'c{i}')]))
    return log


def ghost(log: list[ModelMessage]) -> None:
    """What the issue did: the newest request's parts reassigned with a result no call asked for."""
    log[-1].parts = [*log[-1].parts, ToolReturnPart('read_file', 'ghost', tool_call_id='ghost')]


def settings_for(name: str, window: int) -> dict[str, Any]:
    # Summaries are an input of the view (DESIGN.md section 1): live and fresh profiles share them.
    extra: dict[str, Any] = (
        {'summary_cache': InMemorySummaryCache()} if name in {'chat', 'long_horizon'} else {}
    )
    if name != 'transparent':
        extra |= {'keep_recent': 1, 'step': 2}
    else:
        # `transparent` does not compact: over a known window it refuses (check_budget).
        window = 100_000_000
    return {
        'context_window': window,
        'counter': HeuristicCounter(),
        'summary_model': extractive_summary_model(),
        **extra,
    }


# --- item 1: edits in place --------------------------------------------------------------------


@pytest.mark.parametrize('name', PRESETS)
async def test_a_result_added_in_place_is_seen_by_the_next_compile(name: str) -> None:
    log = coding_log(30)
    options = settings_for(name, 16_000)
    live = profile(name, **options)
    await live.compile(log)
    ghost(log)
    view = await live.compile(log)
    validate_view(view)
    assert view == await profile(name, **options).compile(log)


def test_normalize_sees_a_result_added_in_place() -> None:
    log = coding_log(3)
    assert normalize(log) == log
    ghost(log)
    view = normalize(log)
    validate_view(view)
    assert all(getattr(p, 'tool_call_id', None) != 'ghost' for m in view for p in m.parts)


def test_a_list_edited_in_place_is_seen_too() -> None:
    log = coding_log(3)
    normalize(log)
    log[-1].parts.append(ToolReturnPart('read_file', 'ghost', tool_call_id='ghost'))
    validate_view(normalize(log))


def _delta_parts() -> list[Any]:
    """Parts pydantic-ai appends to the request it is about to send (2.x), else a stand-in."""
    out: list[Any] = []
    tools = getattr(messages_module, 'ToolAvailabilityDeltaPart', None)
    if tools is not None:
        out.append(tools(tools_added=['search']))
    settings_delta = getattr(messages_module, 'ModelSettingsDeltaPart', None)
    if settings_delta is not None:
        out.append(settings_delta(settings={'thinking': 'high'}))
    return out or [UserPromptPart('(a part added before sending)')]


MUTATIONS = (
    'delta',  # `request.parts = [*request.parts, delta]` (_agent_graph, _instructions)
    'ghost',  # the reproducer
    'instructions',  # `request.instructions = ...`
    'metadata',  # `request.metadata = ...` (durable request metadata)
    'run_ids',  # fill_run_metadata: run id, conversation id, timestamp
    'system_prompt',  # 1.x: dynamic system prompts re-rendered, `msg.parts = reevaluated`
    'redact',  # an application replacing an old message's parts
    'in_place',  # a list edited in place
)


def mutate(log: list[ModelMessage], kind: str, at: int) -> None:
    newest = next(m for m in reversed(log) if isinstance(m, ModelRequest))
    if kind == 'delta':
        newest.parts = [*newest.parts, *_delta_parts()]
    elif kind == 'ghost':
        newest.parts = [*newest.parts, ToolReturnPart('grep', 'ghost', tool_call_id='ghost')]
    elif kind == 'instructions':
        newest.instructions = f'Instructions changed to version {at}.'
    elif kind == 'metadata':
        newest.metadata = {**(newest.metadata or {}), 'pydantic_ai': {'step': at}}
    elif kind == 'run_ids':
        newest.run_id = newest.run_id or 'filled-run'
        newest.conversation_id = newest.conversation_id or 'filled-conversation'
        newest.timestamp = datetime(2026, 1, 1, 0, 0, at % 60, tzinfo=UTC)
    elif kind == 'system_prompt':
        first = log[0]
        if isinstance(first, ModelRequest):
            first.parts = [
                SystemPromptPart(f're-rendered {at}') if isinstance(p, SystemPromptPart) else p
                for p in first.parts
            ] or [SystemPromptPart(f're-rendered {at}')]
    elif kind == 'redact':
        message = log[at % len(log)]
        message.parts = [
            dataclasses.replace(p, content='[redacted]') if isinstance(p, ToolReturnPart | TextPart) else p
            for p in message.parts
        ]
    else:
        newest.parts.append(UserPromptPart(f'added in place {at}'))


async def _compile_or_error(compiled: Any, log: list[ModelMessage]) -> Any:
    try:
        return await compiled.compile(log)
    except ContextBudgetExceeded as exc:
        return ('exceeded', exc.used, exc.limit)


@pytest.mark.parametrize('name', PRESETS)
@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log=histories(max_runs=2, max_steps=5, in_progress=True),
    edits=st.lists(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 1_000)), min_size=1, max_size=12),
)
async def test_every_preset_sees_every_edit_pydantic_ai_makes(
    name: str, log: list[ModelMessage], edits: list[tuple[str, int]]
) -> None:
    """Compile request after request, editing messages in place between compiles the ways pydantic-ai
    does: every view equals what a fresh profile compiles from the log as it is now, and is valid."""
    options = settings_for(name, 3_000)
    live = profile(name, **options)
    ends = [i + 1 for i, m in enumerate(log) if isinstance(m, ModelRequest)]
    for n, end in enumerate(ends):
        current = log[:end]
        view = await _compile_or_error(live, current)
        if not isinstance(view, tuple):
            validate_view(view)
        assert view == await _compile_or_error(profile(name, **options), current), f'request {n}'
        kind, at = edits[n % len(edits)]
        mutate(current, kind, at)
    # After the last edit too.
    view = await _compile_or_error(live, log)
    assert view == await _compile_or_error(profile(name, **options), log)


def test_a_policy_called_on_its_own_sees_edits_too() -> None:
    log = coding_log(12)
    policy = mask_observations(keep_recent=1, step=2)
    policy(log)
    log[3].parts = [dataclasses.replace(log[3].parts[0], content='[redacted] ' + 'x' * 400)]
    view = policy(log)
    assert view == mask_observations(keep_recent=1, step=2)(log)
    assert 'src/mod_1.py' not in str(view[3].parts[0].content)


# --- MemoScope ---------------------------------------------------------------------------------


def test_a_scope_keeps_its_generation_while_the_log_only_grows() -> None:
    scope = MemoScope()
    log = coding_log(2)
    with compiling(scope, log) as first:
        assert active_generation() == first
    log.append(ModelResponse(parts=[TextPart('done')]))
    with compiling(scope, log) as second:
        assert second == first
    assert active_generation() is None


@pytest.mark.parametrize(
    'edit',
    [
        lambda log: setattr(log[1], 'parts', list(log[1].parts)),  # a new list, even an equal one
        lambda log: log[1].parts.append(TextPart('more')),  # the same list, longer
        lambda log: setattr(log[-1], 'instructions', 'new'),  # the open tail's other fields
        lambda log: setattr(log[-1], 'metadata', {'pinned': True}),
        lambda log: log.__setitem__(2, dataclasses.replace(log[2])),  # a replaced message
    ],
    ids=['parts reassigned', 'parts appended', 'instructions', 'metadata', 'replaced'],
)
def test_any_edit_starts_a_new_generation(edit: Any) -> None:
    scope = MemoScope()
    log = coding_log(2)
    with compiling(scope, log) as first:
        pass
    edit(log)
    with compiling(scope, log) as second:
        assert second != first


def test_a_scope_holds_a_bounded_number_of_conversations() -> None:
    scope = MemoScope(lineages=2)
    logs = [coding_log(1) for _ in range(3)]
    generations = []
    for log in logs:
        with compiling(scope, log) as generation:
            generations.append(generation)
    refs = [weakref.ref(m) for m in logs[0]]
    del logs[0], log
    gc.collect()
    assert all(r() is None for r in refs), 'the oldest conversation is released'
    with compiling(scope, logs[-1]) as again:
        assert again == generations[-1]


def test_an_empty_log_displaces_no_conversation() -> None:
    scope = MemoScope(lineages=1)
    log = coding_log(1)
    with compiling(scope, log) as first:
        pass
    for _ in range(3):
        with compiling(scope, []):
            pass
    with compiling(scope, log) as again:
        assert again == first


def test_a_view_that_becomes_the_log_continues_the_conversation() -> None:
    """pydantic-ai 1.x `history_processors`: the view replaces the run's history."""
    scope = MemoScope()
    log = coding_log(2)
    with compiling(scope, log) as generation:
        scope.seal(generation, log[:3])
    with compiling(scope, [*log[:3], ModelResponse(parts=[TextPart('a')])]) as second:
        scope.seal(second, log[:3])
    with compiling(scope, [*log[:3], ModelResponse(parts=[TextPart('b')])]) as third:
        assert third == second
    log[0].parts = [UserPromptPart('edited')]
    with compiling(scope, [*log[:3], ModelResponse(parts=[TextPart('c')])]) as fourth:
        assert fourth != third


# --- item 2: letting go ------------------------------------------------------------------------


class Output(str):
    """A tool output a weak reference can watch."""


@pytest.mark.parametrize('name', PRESETS)
async def test_nothing_survives_its_owner(name: str) -> None:
    """A 60-step log with large tool results: once the log, the view and the profile are gone,
    no message, part, tool output or view message is kept alive by a cache."""
    log = coding_log(60, output=lambda i: Output(f'src/mod_{i}.py: line\nValueError: bad {i}\n' * 2_000))
    # `transparent` does not compact: over a known window it refuses (check_budget).
    window = 100_000_000 if name == 'transparent' else 32_000
    compiled = profile(name, context_window=window, summary_model=extractive_summary_model())
    view: list[ModelMessage] = []
    for end in range(3, len(log) + 1, 2):
        view = await compiled.compile(log[:end])
    watched = [
        *map(weakref.ref, log),
        *(weakref.ref(p) for m in log for p in m.parts),
        *(
            weakref.ref(p.content)
            for m in log
            for p in m.parts
            if isinstance(getattr(p, 'content', None), Output)
        ),
        *map(weakref.ref, view),
    ]
    del log, view, compiled
    gc.collect()
    # A summary being written ahead ends with its profile, at the loop's next turn.
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    gc.collect()
    assert [r for r in watched if r() is not None] == []


async def test_the_shared_default_counter_keeps_nothing_alive() -> None:
    log = coding_log(5, output=lambda i: Output('x' * 10_000))
    counter = default_counter()
    assert counter.count_messages(log) > 5_000
    watched = [
        weakref.ref(p.content)
        for m in log
        for p in m.parts
        if isinstance(getattr(p, 'content', None), Output)
    ]
    del log
    gc.collect()
    assert all(r() is None for r in watched)
    assert counter is default_counter()  # still shared: its memo was never the problem once weak


async def test_a_deleted_conversation_is_let_go_while_the_profile_lives_on() -> None:
    """A long-lived profile serving many conversations keeps at most its last few."""
    compiled = profile('coding', context_window=32_000)
    first = coding_log(10, output=lambda i: Output('y' * 5_000))
    await compiled.compile(first)
    watched = [
        weakref.ref(p.content)
        for m in first
        for p in m.parts
        if isinstance(getattr(p, 'content', None), Output)
    ]
    del first
    for _ in range(compiled._scope.lineages + 1):
        await compiled.compile(coding_log(10))
    gc.collect()
    assert all(r() is None for r in watched)


def test_an_object_memo_is_bounded_by_bytes() -> None:
    budget = 20 * (ENTRY_BYTES + VALUE_BYTES + 1_000)
    memo: ObjectMemo[str] = ObjectMemo(max_bytes=budget, fields=PART_FIELDS)
    parts = [ToolReturnPart('t', f'output {i}', tool_call_id=f'c{i}') for i in range(100)]
    for part in parts:
        memo.put(part, 'z' * 1_000, size=1_000)
        assert memo.bytes <= budget
    assert 15 <= len(memo) <= 20
    assert memo.get(parts[-1]) == 'z' * 1_000  # the newest stay
    assert memo.get(parts[0]) is None  # the oldest went first
    del parts, part
    gc.collect()
    assert len(memo) == 0
    assert memo.bytes == 0


@pytest.mark.parametrize(
    ('edit', 'hit'),
    [
        (lambda m: setattr(m, 'parts', [*m.parts]), True),  # an equal list: as good
        (lambda m: setattr(m, 'parts', [UserPromptPart('other')]), False),
        (lambda m: m.parts.append(UserPromptPart('more')), False),
        (lambda m: setattr(m, 'instructions', 'be brief'), False),
        (lambda m: setattr(m, 'metadata', {'pinned': True}), False),
        (lambda m: setattr(m, 'run_id', 'run-2'), False),
    ],
    ids=['equal parts', 'new parts', 'appended', 'instructions', 'metadata', 'run id'],
)
def test_an_object_memo_misses_an_edited_object_and_forgets_a_freed_one(edit: Any, hit: bool) -> None:
    memo: ObjectMemo[int] = ObjectMemo()
    message = ModelRequest(parts=[UserPromptPart('hi')])
    memo.put(message, 1)
    edit(message)
    assert (memo.get(message) == 1) is hit
    del message
    gc.collect()
    assert len(memo) == 0


def test_memos_of_one_object_share_one_row_and_plain_values_leave_the_collector_alone() -> None:
    """Ten memos remembering 100 messages make 100 rows, not 1,000 weak references: a full
    collection walks every object allocated here. An entry holding a count is a tuple the
    collector stops tracking."""
    memos: list[ObjectMemo[int]] = [ObjectMemo() for _ in range(10)]
    log = [ModelRequest(parts=[UserPromptPart(f'prompt {i}')]) for i in range(100)]
    before = len(_memo._ROWS)
    for memo in memos:
        for i, message in enumerate(log):
            memo.put(message, i)
    assert len(_memo._ROWS) - before == 100
    assert all(memo.get(message) == i for memo in memos for i, message in enumerate(log))
    gc.collect()
    assert not any(gc.is_tracked(entry) for memo in memos for entry in memo._items.values())
    del log, message
    gc.collect()
    assert all(len(memo) == 0 and memo.bytes == 0 for memo in memos)
    assert len(_memo._ROWS) == before


def test_an_edit_of_any_field_a_memo_reads_misses_every_memo_of_the_object() -> None:
    """One stamp per object: pydantic-ai setting a request's instructions in place also misses a
    memo of its parts alone (a miss costs one message's values; a hit on a changed object would be
    wrong)."""
    parts_memo: ObjectMemo[int] = ObjectMemo(fields=PARTS_FIELDS)
    message_memo: ObjectMemo[int] = ObjectMemo()
    message = ModelRequest(parts=[UserPromptPart('hi')])
    parts_memo.put(message, 1)
    message_memo.put(message, 2)
    message.parts = [*message.parts]  # an equal list: as good, for both
    assert (parts_memo.get(message), message_memo.get(message)) == (1, 2)
    message.instructions = 'be brief'
    assert (parts_memo.get(message), message_memo.get(message)) == (None, None)
    parts_memo.put(message, 3)
    assert (parts_memo.get(message), message_memo.get(message)) == (3, None)


def test_a_row_goes_with_the_last_entry_naming_it() -> None:
    memo: ObjectMemo[int] = ObjectMemo(max_entries=1)
    other: ObjectMemo[int] = ObjectMemo()
    first, second = (ModelRequest(parts=[UserPromptPart(text)]) for text in ('a', 'b'))
    memo.put(first, 1)
    other.put(first, 1)
    memo.put(second, 2)  # evicts `first` from `memo`; `other` still holds it
    assert id(first) in _memo._ROWS
    assert memo.get(first) is None
    assert other.get(first) == 1
    other.clear()
    assert id(first) not in _memo._ROWS
    assert id(second) in _memo._ROWS


def test_a_long_lived_message_does_not_collect_the_numbers_of_freed_memos() -> None:
    message = ModelRequest(parts=[UserPromptPart('kept for the whole process')])
    for i in range(200):
        memo: ObjectMemo[int] = ObjectMemo()
        memo.put(message, i)
        assert memo.get(message) == i
        del memo
    assert len(_memo._ROWS[id(message)].memos) <= 2


def test_memos_used_from_threads_never_return_another_objects_value() -> None:
    """Four threads put and read their own short-lived messages in shared memos (ids are reused as
    soon as a message is freed): every hit is the value stored for that very object."""
    memos: list[ObjectMemo[str]] = [ObjectMemo(max_entries=50), ObjectMemo(fields=PARTS_FIELDS)]
    wrong: list[str] = []

    def work(worker: int) -> None:
        for i in range(1_500):
            message = ModelRequest(parts=[UserPromptPart(f'{worker}-{i}')])
            for memo in memos:
                found = memo.get(message)
                if found is not None:
                    wrong.append(found)
                memo.put(message, f'{worker}-{i}')
            for memo in memos:
                found = memo.get(message)
                if found is not None and found != f'{worker}-{i}':
                    wrong.append(found)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    gc.collect()
    assert all(len(memo) == 0 for memo in memos)


def test_a_text_memo_is_bounded_by_characters() -> None:
    memo: TextMemo[int] = TextMemo(max_chars=10_000)
    texts = [f'{i:04d}' * 250 for i in range(30)]  # 1,000 characters each
    for i, text in enumerate(texts):
        memo.put(text, i)
        assert memo._chars <= 10_000
    assert memo.get(texts[-1]) == 29
    assert memo.get(texts[0]) is None


def test_ids_reused_by_new_objects_never_hit() -> None:
    memo: ObjectMemo[str] = ObjectMemo()
    for i in range(500):
        message = ModelRequest(parts=[UserPromptPart(f'prompt {i}')])
        assert memo.get(message) is None
        memo.put(message, f'value {i}')
        assert memo.get(message) == f'value {i}'


def test_compiles_in_concurrent_tasks_each_see_their_own_generation() -> None:
    scope = MemoScope()

    async def one(log: list[ModelMessage]) -> tuple[int, int | None]:
        with compiling(scope, log) as generation:
            await asyncio.sleep(0)
            return generation, active_generation()

    async def both() -> list[tuple[int, int | None]]:
        return list(await asyncio.gather(one(coding_log(1)), one(coding_log(2))))

    for generation, seen in asyncio.run(both()):
        assert generation == seen


# --- folds resumed from the first changed message -------------------------------------------------


def _variants(log: list[ModelMessage], cuts: list[tuple[int, int, str]]) -> list[list[ModelMessage]]:
    """Lists a compile may see one after another: prefixes, and branches that share a prefix with
    the log and then differ (fresh copies of its messages, or some left out)."""
    out: list[list[ModelMessage]] = []
    for k, j, how in cuts:
        k, j = min(k, len(log)), min(max(j, k), len(log))
        if how == 'prefix':
            out.append(log[:j])
        elif how == 'copies':
            out.append([*log[:k], *(dataclasses.replace(m) for m in log[k:j])])
        elif how == 'deep':  # equal messages with parts of their own (a log reloaded from JSON)
            out.append([*log[:k], *copy.deepcopy(log[k:j])])
        else:
            out.append([*log[:k], *log[j:]])
    return out


def _folded(messages: list[ModelMessage], counter: Any) -> tuple[Any, ...]:
    from pydantic_ai_context._instructions import newest_instructions
    from pydantic_ai_context._markers import first_conversation_id
    from pydantic_ai_context.integrity import _already_valid, safe_cut_points
    from pydantic_ai_context.policies._frontier import (
        compaction_frontier,
        observation_indices,
        unresolved_failures,
    )
    from pydantic_ai_context.views import run_spans

    return (
        safe_cut_points(messages),
        observation_indices(messages),
        unresolved_failures(messages),
        run_spans(messages),
        _already_valid(messages),
        counter.count_messages(messages),
        newest_instructions(messages),
        first_conversation_id(messages),
        _ARCHIVE._fingerprints_of(messages),
        compaction_frontier(messages, keep_recent=1, step=2, counter=counter, budget=_BUDGET, slot='test'),
    )


_BUDGET = ContextBudget(context_window=3_000, reserved_output=0)


_ARCHIVE = ContextArchive()


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log=st.one_of(histories(max_runs=3, max_steps=8), broken_histories()),
    cuts=st.lists(
        st.tuples(
            st.integers(0, 60), st.integers(0, 60), st.sampled_from(['prefix', 'copies', 'deep', 'drop'])
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_folds_resumed_within_a_compile_equal_fresh_ones(
    log: list[ModelMessage], cuts: list[tuple[int, int, str]]
) -> None:
    """Cut points, observations, unresolved failures, runs, the validity check, token totals, the
    newest instructions, conversation ids, lineage fingerprints and the frontier's tally are folds the compiling scope
    resumes from the first message that differs from (is not equal to) a list it folded before:
    each must equal the value computed outside any compile, whatever order the lists come in,
    equal copies (shallow or deep) included."""
    counter = HeuristicCounter()
    scope = MemoScope()
    with compiling(scope, log):
        for variant in [log, *_variants(log, cuts), log]:
            assert _folded(variant, counter) == _folded_fresh(variant, counter)


def _folded_fresh(messages: list[ModelMessage], counter: Any) -> tuple[Any, ...]:
    from pydantic_ai_context._scope import suspended

    with suspended():  # no compile active: computed from scratch
        return _folded(messages, counter)


def test_cut_points_come_back_when_a_result_far_from_its_call_is_cut_off() -> None:
    """A result answering a call several messages back makes every position between unsafe; a
    shorter list without that result, folded next in the same compile, has them safe again."""
    from pydantic_ai_context.integrity import safe_cut_points

    log: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('go')]),
        ModelResponse(parts=[ToolCallPart('ls', {}, tool_call_id='a')]),
        ModelRequest(parts=[UserPromptPart('wait')]),
        ModelResponse(parts=[TextPart('waiting')]),
        ModelRequest(parts=[ToolReturnPart('ls', 'x.py', tool_call_id='a')]),
    ]
    with compiling(MemoScope(), log):
        assert safe_cut_points(log) == [0, 1, 5]
        assert safe_cut_points(log[:4]) == [0, 1, 2, 3, 4]
        assert safe_cut_points(log) == [0, 1, 5]


def test_a_fold_is_resumed_for_equal_messages_and_not_past_a_different_one() -> None:
    """Folds are resumed by value: a deep copy of the log continues the fold of the log (only the new
    messages are read), while a list as long as the log whose middle message differs is read
    again from that message."""
    from pydantic_ai_context._scope import resumed_fold

    class Reads:
        read = 0

        def __init__(self) -> None:
            self.messages: list[ModelMessage] = []
            self.tokens: list[int] = [0]

        def truncate(self, n: int) -> None:
            del self.messages[n:], self.tokens[n + 1 :]

        def extend(self, messages: Any) -> None:
            for message in messages[len(self.messages) :]:
                Reads.read += 1
                self.messages.append(message)
                self.tokens.append(self.tokens[-1] + len(repr(message.parts)))

    def total(messages: list[ModelMessage]) -> int:
        return resumed_fold('test.reads', messages, Reads, lambda fold: fold.tokens[-1])

    log = coding_log(20)
    changed = list(log)
    changed[21] = ModelRequest(parts=[ToolReturnPart('read_file', 'other text', tool_call_id='c10')])
    with compiling(MemoScope(), log):
        fresh = total(log)
        Reads.read = 0
        assert total(changed) == sum(len(repr(m.parts)) for m in changed)
        assert Reads.read == len(log) - 21  # read again from the message that differs
        total(log)
        Reads.read = 0
        assert total([*copy.deepcopy(log), *coding_log(1)[1:]]) > fresh
        assert Reads.read == 2  # the deep copy continued the fold: the two new messages only
