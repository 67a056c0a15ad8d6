from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
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
    compile_view,
    normalize,
    profile,
    validate_view,
)
from pydantic_ai_context._markers import without_ref
from pydantic_ai_context._parts import marker
from pydantic_ai_context.policies.fit import DROPPED_NOTE, FitToBudget, drop_record, fit_to_budget
from pydantic_ai_context.views import CompileContext

from . import data
from ._examples import examples
from .builders import History, Tool, long_text
from .invariants import assert_all
from .strategies import any_histories

PROPS = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
TRAJECTORIES = list(data.TRAJECTORIES)
COUNTER = HeuristicCounter()


def budget(limit: int) -> ContextBudget:
    return ContextBudget(context_window=limit, reserved_output=0, safety_margin=0)


def fit(log: list[ModelMessage], limit: int | None, **settings: object) -> list[ModelMessage]:
    """`fit_to_budget` as a profile runs it: on the normalized log (a valid log is unchanged). On a
    broken one the step's reading would differ from what is sent: pydantic-ai merges consecutive
    requests, so the current prompt is the merged request's."""
    context = CompileContext(counter=COUNTER, budget=budget(limit) if limit is not None else None)
    return fit_to_budget(**settings).apply(normalize(list(log)), context)


def tokens(messages: list[ModelMessage]) -> int:
    return COUNTER.count_messages(messages)


def call_ids(messages: list[ModelMessage]) -> list[str]:
    return [p.tool_call_id for m in messages for p in m.parts if isinstance(p, ToolCallPart)]


def steps(n: int, *, lines: int = 20, start: int = 0) -> list[Tool]:
    return [
        Tool('execute_bash', {'command': f'run {i}'}, long_text(lines, prefix=f'out {i}'))
        for i in range(start, n)
    ]


def agent_log(n: int = 10) -> list[ModelMessage]:
    h = History().user('Fix the failing test.', system='You are a coding agent.')
    for tool in steps(n):
        h.step(tool)
    return h.build()


def test_no_budget_or_within_budget_changes_nothing() -> None:
    log = agent_log()
    for view in (fit(log, None), fit(log, tokens(log))):
        assert view == log
        assert all(a is b for a, b in zip(view, log, strict=True))


def test_drops_the_oldest_steps_first_and_says_so() -> None:
    log = agent_log(10)
    limit = tokens(log) // 2
    view = fit(log, limit, drop_granularity=0)
    validate_view(view)
    assert tokens(view) <= limit
    kept = call_ids(view)
    assert kept == call_ids(log)[-len(kept) :]  # a suffix: the newest steps
    assert 2 <= len(kept) < 10
    head = view[0]
    assert head.parts[:2] == log[0].parts  # system prompt and task, verbatim
    note = head.parts[-1]
    assert isinstance(note, UserPromptPart)
    assert note.content.startswith('[Note from context management, not a new instruction')
    dropped = len(log) - len(view)
    record = marker(head)
    assert record is not None
    assert record['kind'] == 'dropped'
    assert record['messages'] == dropped
    # The same text whatever was dropped (the ref names the span of dropped steps, and comes from
    # the first step dropped, where drops always start): the cached prefix holds.
    assert without_ref(note.content) == DROPPED_NOTE
    assert note.content.endswith(f"read_context('{record['ref']}')]")
    assert record['tokens'] > 0
    assert view[1:] == log[1 + dropped :]
    assert all(a is b for a, b in zip(view[1:], log[1 + dropped :], strict=True))


def test_drops_just_enough_without_granularity() -> None:
    log = agent_log(10)
    limit = tokens(log) - 10
    view = fit(log, limit, drop_granularity=0)
    assert len(view) == len(log) - 2  # one step is enough


def test_recency_window_and_framing_always_stay() -> None:
    log = agent_log(6)
    view = fit(log, tokens(log[:1] + log[-4:]) + 80, keep_last_steps=2, drop_granularity=0)
    assert view[0].parts[:2] == log[0].parts
    assert view[-4:] == log[-4:]
    assert len(view) == 5


def test_pinned_steps_are_never_dropped() -> None:
    log = agent_log(8)
    log[4] = dataclasses.replace(log[4], metadata={'pinned': True})  # the second step's results
    view = fit(log, tokens(log) // 2, drop_granularity=0)
    assert log[3] in view
    assert log[4] in view
    assert log[1] not in view
    validate_view(view)
    assert_all(log, copy.deepcopy(log), view)


def test_later_user_prompts_are_dropped_last() -> None:
    h = History().user('First task.', system='sys')
    for tool in steps(4):
        h.step(tool)
    h.answer('First done.').user('Second task. ' * 40)
    for tool in steps(8, start=4):
        h.step(tool)
    log = h.build()
    second = next(m for m in log if any(getattr(p, 'content', None) == 'Second task. ' * 40 for p in m.parts))
    view = fit(log, tokens(log) // 2, drop_granularity=0)
    assert second in view
    assert call_ids(view)[0] not in call_ids(log)[:4]  # the first task's steps went
    validate_view(view)
    # Under a tighter budget every other step goes; the current run's prompt is the task at hand
    # (DESIGN.md invariant 1): it stays, whole while it fits beside the newest step.
    tight = tokens(log[:1] + log[-4:]) + tokens([second]) + 80
    view = fit(log, tight, drop_granularity=0)
    assert second.parts[0] in [p for m in view for p in m.parts]
    assert tokens(view) <= tight


def test_degrades_the_recency_window_before_failing() -> None:
    """Issue 14: with no step left to drop, the window's older results are trimmed (then the
    newest is clamped) rather than failing the run."""
    log = agent_log(4)
    limit = tokens(log[-4:])  # the recency window alone does not fit with the framing
    view = fit(log, limit)
    assert tokens(view) <= limit
    validate_view(view)
    kinds = [(marker(p) or {}).get('kind') for m in view for p in m.parts if isinstance(p, ToolReturnPart)]
    assert 'trimmed' in kinds
    assert view[0].parts[0] == log[0].parts[0]  # the task framing stays
    assert fit(view, limit) == view


def test_clamps_the_newest_result_with_its_original_size() -> None:
    log = (
        History().user('Summarise this.').step(Tool('read_file', {'path': 'big.log'}, long_text(400))).build()
    )
    original = COUNTER.count_text(log[-1].parts[0].content)
    view = fit(log, 1_000)
    assert tokens(view) <= 1_000
    record = marker(view[-1].parts[0]) or {}
    assert record.get('kind') == 'clamped'
    assert record.get('tokens') == original
    assert f'~{original:,} tokens' in view[-1].parts[0].content


def test_raises_naming_the_framing_when_even_the_clamped_newest_step_cannot_fit() -> None:
    log = (
        History()
        .user('Summarise this. ' * 300)
        .step(Tool('read_file', {'path': 'big.log'}, long_text(400)))
        .build()
    )
    framing = COUNTER.count_message(log[0])
    with pytest.raises(ContextBudgetExceeded) as info:
        fit(log, framing - 10)
    err = info.value
    assert err.used > err.limit == framing - 10
    assert err.policy == 'fit_to_budget'
    assert f'the task framing alone is {framing:,} tokens' in err.detail
    with pytest.raises(ContextBudgetExceeded) as info:
        fit(log, framing + 20)
    assert 'the task framing' in info.value.detail
    assert 'the newest step' in info.value.detail


def test_granularity_keeps_the_prefix_stable_while_the_log_grows() -> None:
    base = History().user('Long task.', system='sys')
    tools = steps(30)
    for tool in tools:
        base.step(tool)
    log = base.build()
    limit = tokens(log[:21])
    stable = 0
    previous: list[ModelMessage] | None = None
    for end in range(21, len(log) + 1, 2):
        view = fit(log[:end], limit, drop_granularity=0.25)
        assert tokens(view) <= limit
        if previous is not None and view[: len(previous)] == previous:
            stable += 1
        previous = view
    # Most requests only append to the previous view; without chunks every request rewrites it.
    assert stable >= 3
    previous = None
    for end in range(21, len(log) + 1, 2):
        view = fit(log[:end], limit, drop_granularity=0)
        assert previous is None or view[: len(previous)] != previous
        previous = view


def test_second_pass_under_a_smaller_budget_keeps_one_note() -> None:
    log = agent_log(12)
    first = fit(log, tokens(log) * 3 // 4, drop_granularity=0)
    second = fit(first, tokens(log) // 3, drop_granularity=0)
    notes = [
        p for m in second for p in m.parts if isinstance(p, UserPromptPart) and p.content.startswith('[Note')
    ]
    assert len(notes) == 1
    record = marker(second[0])
    assert record is not None
    assert record['messages'] == len(log) - len(second)


def test_idempotent_deterministic_and_input_untouched() -> None:
    log = agent_log(10)
    snapshot = copy.deepcopy(log)
    limit = tokens(log) // 2
    once = fit(log, limit)
    assert log == snapshot
    twice = fit(once, limit)
    assert twice == once
    assert all(a is b for a, b in zip(twice, once, strict=True))
    assert fit(snapshot, limit) == once


def test_notes_what_it_did() -> None:
    log = agent_log(10)
    context = CompileContext(counter=COUNTER, budget=budget(tokens(log) // 2))
    view = fit_to_budget().apply(log, context)
    reason, details = context._take_notes()
    assert reason.startswith('dropped ')
    assert details['dropped_messages'] == len(log) - len(view)


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match='keep_last_steps'):
        FitToBudget(keep_last_steps=-1)
    with pytest.raises(ValueError, match='drop_granularity'):
        FitToBudget(drop_granularity=1.5)


def test_standalone_use_has_no_budget() -> None:
    log = agent_log(3)
    assert fit_to_budget()(log) == log


def fit_or_none(
    log: list[ModelMessage], window: int, keep: int, **settings: object
) -> list[ModelMessage] | None:
    """The fitted view, or None when `fit_to_budget` raised `ContextBudgetExceeded` with its numbers."""
    try:
        return fit(log, window, keep_last_steps=keep, **settings)
    except ContextBudgetExceeded as err:
        if not (err.used > err.limit == window and err.detail):
            raise
        return None


@PROPS
@given(log=any_histories, window=st.integers(150, 3_000), keep=st.integers(0, 3))
def test_invariants_or_a_clear_error(log: list[ModelMessage], window: int, keep: int) -> None:
    snapshot = copy.deepcopy(log)
    out = fit_or_none(log, window, keep)
    assert log == snapshot
    if out is not None:
        assert tokens(out) <= window
        assert_all(log, snapshot, normalize(out))
        assert fit_or_none(snapshot, window, keep) == out
    compiled = fit_or_none(normalize(log), window, keep)
    if compiled is not None:
        compiled = normalize(compiled)
        assert normalize(fit(compiled, window, keep_last_steps=keep)) == compiled


def load(path: Path) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_json(path.read_bytes())


@pytest.mark.parametrize('path', TRAJECTORIES, ids=lambda p: p.stem)
def test_trajectory(path: Path) -> None:
    log = load(path)
    snapshot = copy.deepcopy(log)
    for window in (32_000, 8_000):
        view = fit_or_none(log, window, 2)
        if view is None:
            continue
        assert tokens(view) <= window
        assert_all(log, snapshot, view)
        # The newest result stays, or, when nothing else fits, is clamped with its original size.
        assert view[-1] is log[-1] or all(
            (marker(p) or {}).get('kind') == 'clamped' for p in view[-1].parts if p not in log[-1].parts
        )
        assert fit(view, window) == view
    assert log == snapshot


def test_a_growing_log_gets_the_view_a_fresh_compile_gives() -> None:
    """Regression (found by the incremental-vs-fresh property): a drop that ran out of older steps
    before reaching its target must not be reused once a longer log offers one more step."""
    h = History().user('go')
    for i in range(3):
        h.step(Tool('ls', {}, f'small output {i} ' * 25))
    h.step(Tool('cat', {'path': 'big.txt'}, 'word ' * 2_000))
    h.step(Tool('ls', {}, 'small 3'))
    log = h.build()
    counter = HeuristicCounter()
    limit = counter.count_messages(log) - 40
    policy = fit_to_budget(keep_last_steps=2, drop_granularity=0.2)
    context = CompileContext(counter=counter, budget=budget(limit))
    policy.apply(list(log), context)  # the three small steps are all it may drop: short of its target
    longer = [*log, *History().step(Tool('ls', {}, 'small 4')).build()]
    live = policy.apply(list(longer), CompileContext(counter=counter, budget=budget(limit)))
    fresh = fit_to_budget(keep_last_steps=2, drop_granularity=0.2).apply(
        list(longer), CompileContext(counter=counter, budget=budget(limit))
    )
    assert live == fresh


def test_the_older_steps_of_the_recency_window_go_before_failing() -> None:
    """Only the task framing and the newest step must fit: an older step of the recency window
    whose text cannot be trimmed goes rather than the run failing."""
    log = (
        History()
        .user('Fix the bug.')
        .step(Tool('ls', {}, 'a.py b.py'), text='Thinking aloud. ' * 600)
        .step(Tool('cat', {'path': 'a.py'}, 'print(1)'))
        .build()
    )
    limit = tokens([log[0], *log[-2:]]) + 80
    view = fit(log, limit)
    assert tokens(view) <= limit
    assert view[0].parts[0] == log[0].parts[0]
    assert view[-1] == log[-1]
    assert not any('Thinking aloud' in str(getattr(p, 'content', '')) for m in view for p in m.parts)


def test_the_drop_note_keeps_its_text_as_more_steps_are_dropped_and_reads_them_all_back() -> None:
    from pydantic_ai_context import CompileContext, ContextBudget
    from pydantic_ai_context.archive import ContextArchive
    from pydantic_ai_context.readback import read_context

    h = History().user('fix it', system='sys')
    for i in range(12):
        h.step(Tool('cat', {'path': f'src/m{i}.py'}, f'UNIQUE-{i} ' + long_text(60)))
    log = h.build()
    archive = ContextArchive()
    notes: list[str] = []
    views: list[list[ModelMessage]] = []
    for end in (len(log) - 6, len(log)):  # a longer log: more steps dropped
        sink = archive.sink(log[:end], results=True)
        context = CompileContext(
            counter=HeuristicCounter(),
            budget=ContextBudget(context_window=6_000, reserved_output=500),
            originals=sink,
        )
        view = fit_to_budget().apply(list(log[:end]), context)
        archive.compiled(sink, view)  # as a profile does: the view is this conversation's
        views.append(view)
        notes += [
            str(p.content)
            for m in view
            for p in m.parts
            if isinstance(p, UserPromptPart) and DROPPED_NOTE in str(p.content)
        ]
    assert len(notes) == 2, 'both compiles dropped steps'
    assert notes[0] == notes[1], 'the note changed: the cached prefix holding it breaks'
    ref = notes[1].rsplit("'", 2)[1]
    pages, offset = [], 0
    while True:  # page through: a page holds at most PAGE_CHARS characters
        pages.append(read_context(ref, views[1], archive, offset=offset, limit=100_000))
        header = pages[-1].split('\n', 1)[0]
        if 'next page' not in header:
            break
        offset = int(header.rsplit('offset=', 1)[1].rstrip(')]'))
    page = '\n'.join(pages)
    assert 'span of 0 messages' not in pages[0]
    first, second = (drop_record(v[1]) or drop_record(v[0]) for v in views)
    assert first is not None
    assert second is not None
    assert second['messages'] > first['messages']  # more was dropped, under the same ref
    assert second['ref'] == first['ref'] == ref
    dropped = [i for i in range(12) if f'UNIQUE-{i} ' not in str(views[1])]
    assert dropped
    missing = [i for i in dropped if f'UNIQUE-{i} ' not in page]
    assert not missing, (missing, page[:3000])


@pytest.mark.parametrize('name', ['coding', 'chat', 'long_horizon'])
async def test_parallel_results_each_clamped_to_the_trim_share_are_clamped_again_to_fit(name: str) -> None:
    # The trim policy clamps each newest result to half the budget; three of them in one step were
    # then too large together, and fit could not clamp a result already clamped: the compile
    # raised ContextBudgetExceeded although the newest step, clamped to the room left, fits.
    counter = HeuristicCounter()
    h = History().user('read the three files')
    h.step(Tool('ls', {}, 'a.py\nb.py\nc.py', id='c1'))
    h.step(
        *(Tool('read_file', {'path': f}, long_text(400, prefix=f), id=f) for f in ('a.py', 'b.py', 'c.py'))
    )
    log = h.build()
    snapshot = copy.deepcopy(log)
    view = await profile(name, context_window=4_000, counter=counter).compile(log)
    assert_all(log, snapshot, view)
    assert counter.count_messages(view) <= 2_920
    newest = view[-1].parts
    assert [marker(p)['kind'] for p in newest] == ['clamped'] * 3
    # Each marker still states its original's size, once, and names its ref.
    assert [marker(p)['tokens'] for p in newest] == [counter.count_text(p.content) for p in log[-1].parts]
    assert all(p.content.count('trimmed by pydantic-ai-context') == 1 for p in newest)
    assert await profile(name, context_window=4_000, counter=counter).compile(view) == view


def fresh_result_log(steps_after: int = 0) -> list[ModelMessage]:
    """A run whose views hold long model texts (they are never masked), then one large tool result
    (the test run), then `steps_after` small steps."""
    h = History().user('Fix the header bug.', system='You are a coding agent.')
    for i in range(12):
        h.step(
            Tool('bash', {'command': f'step {i}'}, long_text(8, prefix=f'out {i}')),
            text=f'THOUGHT {i}: ' + 'I reason about the code. ' * 30,
        )
    h.step(Tool('bash', {'command': 'pytest'}, long_text(100, prefix='FAILED test')), text='Run the tests.')
    for j in range(steps_after):
        h.step(Tool('bash', {'command': f'fix {j}'}, 'ok'), text=f'THOUGHT: fix {j}.')
    return h.build()


async def test_a_fresh_large_result_just_over_the_limit_drops_no_steps_that_come_back() -> None:
    """Regression (stop 25): in `coding`, a fresh large result that took the view just over the
    limit made `fit_to_budget` drop older steps; the next request masked that result, the view
    fitted whole again and the steps came back: the cached prefix broke twice (replay at 16k, 10 of
    71 requests of `mini_gemini3pro_requests_1142`, cost 1.063 of sending everything). Now the fresh
    result is clamped to the room left (with `clamp_fresh`), and the next request's view extends
    this one (the presets' default). With `clamp_fresh=False`, older steps go and the fresh result
    stays whole (invariant 3)."""
    counter = HeuristicCounter()
    off = profile('coding', context_window=4_000, reserved_output=0, counter=counter, clamp_fresh=False)
    whole = await off.compile(fresh_result_log(steps_after=1)[:-2])
    assert whole[-1].parts[0].content == fresh_result_log()[-1].parts[0].content
    assert any(drop_record(m) for m in whole)
    coding = profile('coding', context_window=4_000, reserved_output=0, counter=counter)
    limit = coding.budget_for().limit
    later = fresh_result_log(steps_after=1)
    log = later[:-2]
    assert counter.count_messages(log) > limit
    view = await coding.compile(log)
    assert counter.count_messages(view) <= limit
    assert len(view) == len(log)  # no step dropped
    assert not any(drop_record(m) for m in view)
    clamped = view[-1].parts[0]
    record = marker(clamped) or {}
    assert record.get('kind') == 'clamped'
    original = COUNTER.count_text(log[-1].parts[0].content)
    assert record.get('tokens') == original
    assert f'~{original:,} tokens' in clamped.content
    assert f"read_context('{log[-1].parts[0].tool_call_id}')" in clamped.content  # read-back reaches it
    # The next request (the fresh result masked now) is this view plus the new messages, the
    # fresh result aside: nothing dropped comes back.
    next_view = await coding.compile(later)
    assert len(next_view) == len(later)
    assert next_view[: len(view) - 1] == view[:-1]
    # Pure: a fresh profile compiling the same log gives the same view; a view of it is the same.
    fresh = profile('coding', context_window=4_000, reserved_output=0, counter=counter)
    assert await fresh.compile(log) == view
    assert await fresh.compile(view) == view


def test_clamp_fresh_clamps_the_newest_result_instead_of_dropping_steps() -> None:
    log = agent_log(10)
    big = dataclasses.replace(
        log[-1], parts=[dataclasses.replace(log[-1].parts[0], content=long_text(60, prefix='fresh'))]
    )
    log = [*log[:-1], big]
    limit = tokens(log) - 300
    # Off (the default): older steps go, the newest result stays whole.
    dropped = fit(log, limit)
    assert len(dropped) < len(log)
    assert dropped[-1] is big
    # On: every step stays, the newest result is clamped to the room left, its size in the marker.
    view = fit(log, limit, clamp_fresh=True)
    assert tokens(view) <= limit
    assert view[:-1] == log[:-1]
    record = marker(view[-1].parts[0]) or {}
    assert record.get('kind') == 'clamped'
    assert record.get('tokens') == COUNTER.count_text(big.parts[0].content)
    assert fit(view, limit, clamp_fresh=True) == view
    # A small newest result (within `trim_tokens`) is never clamped for this: steps go.
    small = fit(log, limit, clamp_fresh=True, trim_tokens=5_000)
    assert small[-1] is log[-1]
    assert len(small) < len(log)


def test_clamp_fresh_sizes_the_chunk_without_the_fresh_excess_when_steps_go_anyway() -> None:
    def with_fresh(lines: int) -> list[ModelMessage]:
        log = agent_log(12)
        big = dataclasses.replace(
            log[-1], parts=[dataclasses.replace(log[-1].parts[0], content=long_text(lines, prefix='fresh'))]
        )
        return [*log[:-1], big]

    log = with_fresh(25)
    limit = tokens(log[:-1]) - 20  # a step must go even without the fresh result
    plain = fit(log, limit, drop_granularity=0)
    view = fit(log, limit, drop_granularity=0, clamp_fresh=True)
    assert tokens(view) <= limit
    # The fresh result's size made one more step go; now it is clamped into the room left.
    assert len(view) == len(plain) + 2
    assert view[-1] is not log[-1]
    assert (marker(view[-1].parts[0]) or {}).get('kind') == 'clamped'
    assert fit(view, limit, drop_granularity=0, clamp_fresh=True) == view
    # When the room left would hold less than half the fresh result, steps go as without the setting.
    log = with_fresh(40)
    limit = tokens(log[:-1]) - 20
    assert fit(log, limit, drop_granularity=0, clamp_fresh=True) == fit(log, limit, drop_granularity=0)


@PROPS
@given(log=any_histories, window=st.integers(150, 3_000), keep=st.integers(0, 3))
def test_invariants_or_a_clear_error_clamping_fresh_results(
    log: list[ModelMessage], window: int, keep: int
) -> None:
    snapshot = copy.deepcopy(log)
    out = fit_or_none(log, window, keep, clamp_fresh=True)
    assert log == snapshot
    if out is not None:
        assert tokens(out) <= window
        assert_all(log, snapshot, normalize(out))
        assert fit_or_none(snapshot, window, keep, clamp_fresh=True) == out
    compiled = fit_or_none(normalize(log), window, keep, clamp_fresh=True)
    if compiled is not None:
        compiled = normalize(compiled)
        assert normalize(fit(compiled, window, keep_last_steps=keep, clamp_fresh=True)) == compiled


def _changes(log: list[ModelMessage]) -> list[tuple[list[ModelMessage], list[ModelMessage]]]:
    """Pairs of fit inputs, one request apart: the second changed near its end, as the chain before
    fit changes its view from one request to the next."""
    newest = len(log) - 1
    older = newest - 2  # the result before the newest, which trim shortens as it ages

    def with_result(
        messages: list[ModelMessage], i: int, text: str, call_id: str | None = None
    ) -> list[ModelMessage]:
        out = list(messages)
        part = out[i].parts[0]
        assert isinstance(part, ToolReturnPart)
        extra = [ToolReturnPart(part.tool_name, 'late', tool_call_id=call_id)] if call_id else []
        out[i] = dataclasses.replace(out[i], parts=[dataclasses.replace(part, content=text), *extra])
        return out

    def with_note(messages: list[ModelMessage], i: int) -> list[ModelMessage]:
        out = list(messages)
        out[i] = dataclasses.replace(out[i], parts=[*out[i].parts, *note.parts[-1:]], metadata=note.metadata)
        return out

    first_call = next(p for m in log for p in m.parts if isinstance(p, ToolCallPart))
    counter = HeuristicCounter()
    noted = fit_to_budget().apply(
        list(log), CompileContext(counter=counter, budget=budget(counter.count_messages(log) * 3 // 4))
    )
    note = next(m for m in noted if drop_record(m) is not None)
    shorter = log[: newest - 3]
    last = shorter[-1].parts[0]
    assert isinstance(last, ToolReturnPart)
    removed = counter.count_messages(log) - counter.count_messages(shorter)
    shorter[-1] = dataclasses.replace(
        shorter[-1], parts=[dataclasses.replace(last, content=str(last.content) + ' pad' * removed)]
    )
    middle = range(len(log) // 2, len(log))
    # Each message from the middle on as a new object (the same content), or a response as a request.
    copies = [[*log[:i], dataclasses.replace(log[i]), *log[i + 1 :]] for i in middle]
    broken = [
        [*log[:i], ModelRequest(parts=[UserPromptPart('hm')]), *log[i + 1 :]]
        for i in middle
        if isinstance(log[i], ModelResponse)
    ]
    changed = [
        *copies,
        *broken,
        with_note(log, newest),
        shorter,
        with_result(log, older, 'short'),
        with_result(log, older, 'long output ' * 200),
        with_result(log, newest, 'x'),
        with_result(log, newest, 'x', call_id=first_call.tool_call_id),  # answers the oldest call
        with_result(log, older, 'short')[: newest - 3],
        [*with_result(log, older, 'short'), *History().step(Tool('ls', {}, 'new ' * 30)).build()],
    ]
    # A note the previous input carried after the dropped steps, then a change after it.
    noted_before = with_note(log, older - 2)
    return [*((log, c) for c in changed), (noted_before, with_result(noted_before, newest, 'x'))]


@pytest.mark.parametrize('keep', [1, 3])
def test_a_view_changed_after_the_dropped_steps_gets_the_view_a_fresh_compile_gives(keep: int) -> None:
    """Issue 22: when fit's input changed only after the steps it dropped (a recent result trimmed
    as it aged), the previous drop is resumed rather than planned again; the view must be what a
    fresh policy gives, for every limit, whatever changed (sizes, cut points, steps left, notes)."""
    from pydantic_ai_context._scope import MemoScope, compiling

    h = History().user('go')
    for i in range(12):
        h.step(Tool('ls', {}, f'output {i} ' * (10 + 7 * (i % 5))))
    log = h.build()
    counter = HeuristicCounter()
    total = counter.count_messages(log)

    def fit(policy: FitToBudget, messages: list[ModelMessage], limit: int) -> list[ModelMessage] | str:
        try:
            return policy.apply(list(messages), CompileContext(counter=counter, budget=budget(limit)))
        except ContextBudgetExceeded as exc:
            return str(exc)

    for limit in range(total // 4, total, max(1, total // 60)):
        for index, (before, after) in enumerate(_changes(log)):
            policy = fit_to_budget(keep_last_steps=keep, drop_granularity=0.2)
            scope = MemoScope()
            for messages in (before, after):
                # The scope sees the run's log (unchanged); fit's input is the chain's view of it.
                with compiling(scope, log):
                    live = fit(policy, messages, limit)
            fresh = fit(fit_to_budget(keep_last_steps=keep, drop_granularity=0.2), after, limit)
            assert live == fresh, f'limit {limit}, change {index}'


@pytest.mark.parametrize('keep', [1, 3])
def test_a_target_that_moves_back_resumes_its_earlier_drop_as_a_fresh_compile_would(keep: int) -> None:
    """Issue 22: fit's input often crosses a multiple of the drop quantum and back at the next
    request (an older result trimmed or masked); the drop remembered for the target it returns to
    is resumed, and the view (and the note's read-back span) must be what a fresh policy gives."""
    from pydantic_ai_context._scope import MemoScope, compiling

    h = History().user('go')
    for i in range(12):
        h.step(Tool('ls', {}, f'output {i} ' * (10 + 7 * (i % 5))))
    log = h.build()
    counter = HeuristicCounter()
    total = counter.count_messages(log)

    def larger(messages: list[ModelMessage]) -> list[ModelMessage]:
        out = list(messages)
        part = out[-1].parts[0]
        if isinstance(part, ToolReturnPart):
            out[-1] = dataclasses.replace(out[-1], parts=[dataclasses.replace(part, content='long ' * 150)])
        return out

    def fit(
        policy: FitToBudget, messages: list[ModelMessage], limit: int, sink: _Spans
    ) -> list[ModelMessage] | str:
        context = CompileContext(counter=counter, budget=budget(limit), originals=sink)
        try:
            return policy.apply(list(messages), context)
        except ContextBudgetExceeded as exc:
            return str(exc)

    resumed = 0
    for limit in range(total // 4, total, max(1, total // 40)):
        for index, (before, after) in enumerate(_changes(log)):
            policy = fit_to_budget(keep_last_steps=keep, drop_granularity=0.2)
            drops: list[int] = []
            policy._drop = _counting(policy._drop, drops)  # type: ignore[method-assign]
            scope, sink, fresh_sink = MemoScope(), _Spans(), _Spans()
            # In between, the newest result is larger: the target moves up, then back.
            for messages in (before, larger(before)):
                with compiling(scope, log):
                    fit(policy, messages, limit, sink)
            planned = len(drops)
            with compiling(scope, log):
                live = fit(policy, after, limit, sink)
                resumed += len(drops) == planned and target_moved(
                    policy
                )  # its call in this compile's generation
            fresh = fit(fit_to_budget(keep_last_steps=keep, drop_granularity=0.2), after, limit, fresh_sink)
            assert live == fresh, f'limit {limit}, change {index}'
            if isinstance(fresh, list) and (note := next(filter(None, map(drop_record, fresh)), None)):
                assert sink.spans[note['ref']] == fresh_sink.spans[note['ref']], (
                    f'limit {limit}, change {index}'
                )
    assert resumed  # the earlier drop was resumed at least once


def _counting(plan: Any, calls: list[int]) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return plan(*args, **kwargs)

    return counted


def target_moved(policy: FitToBudget) -> bool:
    """The latest call resumed a drop other than the one before it (an earlier target's); read
    inside the compile's scope (a policy keeps its previous call per generation)."""
    last = policy._last
    return last is not None and any(e.extra is not last.extra for e in policy._earlier.values())


class _Spans:
    """A read-back sink that keeps spans in a dict."""

    def __init__(self) -> None:
        self.spans: dict[str, list[ModelMessage | str]] = {}

    def keep_result(self, ref: str, part: Any) -> None:
        pass

    def keep_span(self, ref: str, items: Sequence[ModelMessage | str], *, replace: bool = False) -> None:
        if replace or ref not in self.spans:
            self.spans[ref] = list(items)


def test_a_log_of_prompted_observations_resumes_its_plan_as_the_prompt_moves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mini-swe-agent-style log sends every observation as a user prompt, so the current prompt
    (a step never dropped) moves at every request. The next compile reuses the plan before it and
    the span refs of the steps dropped before, and its view is a fresh policy's."""
    from pydantic_ai_context._scope import MemoScope, compiling
    from pydantic_ai_context.policies import _fit_plan

    log: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Fix the failing test.')])]
    for i in range(60):
        log.append(ModelResponse(parts=[TextPart(f'THOUGHT: look again.\n```bash\nrun {i}\n```')]))
        log.append(
            ModelRequest(parts=[UserPromptPart(f'<output>{long_text(15, prefix=f"out {i}")}</output>')])
        )
    counter = HeuristicCounter()
    limit = counter.count_messages(log) // 3
    refs: list[int] = []
    reused: list[bool] = []
    span_ref = _fit_plan._markers.span_ref
    monkeypatch.setattr(_fit_plan._markers, 'span_ref', lambda items: refs.append(1) or span_ref(items))
    reusable = _fit_plan._Reading.reusable_plan

    def reusable_plan(self: Any, *args: Any) -> Any:
        found = reusable(self, *args)
        reused.append(found is not None)
        return found

    monkeypatch.setattr(_fit_plan._Reading, 'reusable_plan', reusable_plan)
    policy = fit_to_budget(keep_last_steps=2, drop_granularity=0.05)
    scope = MemoScope()
    for end in range(len(log) - 20, len(log) + 1, 2):
        fresh = fit_to_budget(keep_last_steps=2, drop_granularity=0.05).apply(
            log[:end], CompileContext(counter=counter, budget=budget(limit))
        )
        refs.clear()
        reused.clear()
        with compiling(scope, log[:end]):
            live = policy.apply(log[:end], CompileContext(counter=counter, budget=budget(limit)))
        assert live == fresh
        assert any(map(drop_record, live))
        if end > len(log) - 20:
            assert reused == [True], end
            assert len(refs) <= 2, end  # the steps dropped since the previous compile, if any


async def test_the_task_framing_is_the_first_prompt_that_is_no_tools_content() -> None:
    """Regression (found with the summarising policy's property test): a log that opens with a
    system prompt and a tool call whose result came with content of its own (a screenshot: a
    tool's content, not a prompt). The plan's head ended at that result, so the step holding the
    first real prompt could be dropped (DESIGN invariant 1)."""
    big = 'line of output\n' * 200

    def call(cid: str, path: str) -> list[ModelMessage]:
        return [
            ModelResponse(parts=[ToolCallPart('cat', {'path': path}, tool_call_id=cid)]),
            ModelRequest(parts=[ToolReturnPart('cat', big, tool_call_id=cid)]),
        ]

    task = UserPromptPart('task 1: fix the bug in models.py')
    log: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart('You are a careful coding agent.')]),
        ModelResponse(parts=[ToolCallPart('screenshot', {}, tool_call_id='c1')]),
        ModelRequest(
            parts=[
                ToolReturnPart('screenshot', 'see below', tool_call_id='c1'),
                UserPromptPart(['screenshot: the page shows an error']),
            ]
        ),
        ModelResponse(parts=[TextPart('I see the page.')]),
        ModelRequest(parts=[task]),
        *call('c2', 'a.py'),
        *call('c3', 'b.py'),
        ModelResponse(parts=[TextPart('Fixed.')]),
        ModelRequest(parts=[UserPromptPart('task 2: now add a test')]),
        *call('c4', 'c.py'),
    ]
    counter = HeuristicCounter()
    budget = ContextBudget(context_window=600, reserved_output=0, safety_margin=0)
    view = await compile_view(log, [fit_to_budget()], CompileContext(counter=counter, budget=budget))
    assert any(drop_record(m) for m in view)  # it dropped steps
    assert task in [p for m in view for p in m.parts]
    assert_all(log, copy.deepcopy(log), view)
