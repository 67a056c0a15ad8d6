"""The replay measurement: records per request, cache prefix, fact retention, loading errors."""

from __future__ import annotations

import collections
import copy
import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolReturnPart,
)

from pydantic_ai_context import CompactionEvent, ContextBudgetExceeded, TiktokenCounter, profile
from pydantic_ai_context._model_texts import ModelTexts
from pydantic_ai_context.replay import (
    FactIndex,
    HistoryLoadError,
    ReplayResult,
    error_lines,
    extractive_summary_model,
    geometric_mean,
    load_histories,
    load_history,
    paths_in,
    replay,
)

from . import data
from .builders import History, Tool

REAL = data.SMALLEST
COUNTER = TiktokenCounter()


def small_log() -> list[ModelMessage]:
    return (
        History()
        .user('fix the crash', system='You are a coding agent.')
        .step(Tool('bash', {'command': 'ls -R'}, 'src/app/main.py\nsrc/app/util.py\ndocs/index.md'))
        .step(
            Tool(
                'bash',
                {'command': 'python src/app/main.py'},
                'Traceback (most recent call last):\n  File "src/app/main.py", line 3\nValueError: bad value',
            ),
            text='Run it.',
        )
        .step(Tool('str_replace_editor', {'command': 'view', 'path': '/repo/src/app/main.py'}, 'x = 1'))
        .answer('Fixed.', input_tokens=999_999, output_tokens=7)
        .build()
    )


async def replay_none(log: Sequence[ModelMessage], window: int = 128_000) -> ReplayResult:
    return await replay(log, None, context_window=window, counter=COUNTER)


# --- facts ------------------------------------------------------------------------------------


def test_paths_follow_the_issue_regex() -> None:
    text = 'see /testbed/django/db/models.py, a/b.tar.gz and README.md or x/y (dir) and ./pkg/mod.pyi!'
    assert paths_in(text) == ['testbed/django/db/models.py', 'a/b.tar.gz', './pkg/mod.pyi']


def test_error_lines_are_stripped_cut_and_not_too_short() -> None:
    long = 'AssertionError: ' + 'x' * 200
    text = f'ok\n   ValueError: bad value  \nError\nFAILED tests/t.py::test_a\n{long}\nerror: x\nall good'
    assert error_lines(text) == ['ValueError: bad value', 'FAILED tests/t.py::test_a', long[:120]]


def test_fact_index_orders_facts_by_first_tool_return() -> None:
    log = small_log()
    facts = FactIndex.build(log)
    assert facts.facts == [
        'src/app/main.py',
        'src/app/util.py',
        'docs/index.md',
        'Traceback (most recent call last):',
        'ValueError: bad value',
    ]
    assert facts.first_seen == [2, 2, 2, 4, 4]
    # Facts come from tool returns only: the user prompt, calls and answers add none.
    assert facts.known_before(2) == []
    assert facts.known_before(3) == [0, 1, 2]


def test_needed_facts_are_paths_used_at_or_after_the_request() -> None:
    log = small_log()
    facts = FactIndex.build(log)
    # src/app/main.py is used by the calls at messages 3 and 5; the others never.
    assert facts.last_use[:3] == [5, -1, -1]
    assert facts.needed_before(3) == [0]
    assert facts.needed_before(5) == [0]
    # After its last use a path is no longer needed; error lines never are.
    assert facts.needed_before(7) == []


def test_needed_facts_ignore_uses_before_the_fact_appeared() -> None:
    log = (
        History()
        .user('go')
        .step(Tool('bash', {'command': 'cat lib/a.py'}, 'lib/a.py: no such file'))
        .step(Tool('bash', {'command': 'ls'}, 'lib/b.py'))
        .answer('lib/a.py is missing')
        .build()
    )
    facts = FactIndex.build(log)
    assert facts.facts == ['lib/a.py', 'lib/b.py']
    assert facts.needed_before(3) == [0]  # the final answer still mentions lib/a.py
    assert facts.needed_before(5) == [0]
    assert 1 not in facts.needed_before(5)  # lib/b.py is never used after it appeared


def test_retention_counts_facts_missing_from_the_view() -> None:
    log = small_log()
    facts = FactIndex.build(log)
    cleared = [_clear_returns(m) if i == 2 else m for i, m in enumerate(log[:5])]
    # The first return is gone, but the paths survive in later messages where they are quoted.
    share, needed_share = facts.retention(5, cleared)
    # Known: 5 facts; src/app/main.py survives in the next call and return; util.py and index.md are lost.
    assert share == pytest.approx(3 / 5)
    assert needed_share == 1.0
    assert facts.retention(1, log[:1]) == (1.0, 1.0)  # no facts yet: nothing lost


# --- replay -----------------------------------------------------------------------------------


async def test_one_record_per_response_and_the_prefix_grows() -> None:
    log = small_log()
    snapshot = copy.deepcopy(log)
    result = await replay_none(log)
    assert [r.index for r in result.records] == [i for i, m in enumerate(log) if isinstance(m, ModelResponse)]
    assert result.records[0].cached_tokens == 0
    for before, after in zip(result.records, result.records[1:], strict=False):
        assert after.cached_tokens == before.view_tokens
        assert after.view_tokens > before.view_tokens
    assert all(r.fact_retention == 1.0 and r.needed_fact_retention == 1.0 for r in result.records)
    assert all(
        r.view_tokens == r.log_tokens == COUNTER.count_messages(log[: r.index]) for r in result.records
    )
    assert result.profile == 'none'
    assert log == snapshot


async def test_replayed_responses_report_the_view_as_usage() -> None:
    log = small_log()
    result = await replay_none(log)
    responses = [m for m in result.messages if isinstance(m, ModelResponse)]
    assert len(result.messages) == len(log)
    for record, response in zip(result.records, responses, strict=True):
        assert response.usage.input_tokens == record.view_tokens
        assert (
            response.usage.output_tokens == record.output_tokens == COUNTER.count_message(log[record.index])
        )
        assert response.parts == log[record.index].parts
    # The recorded usage belongs to the original run; the input log keeps it.
    assert log[-1].usage.input_tokens == 999_999  # type: ignore[union-attr]
    # Requests are passed through untouched (same objects).
    assert all(a is b for a, b in zip(result.messages, log, strict=True) if isinstance(a, ModelRequest))


async def test_aggregates_and_cost() -> None:
    result = await replay_none(small_log())
    assert result.requests == 4
    assert result.input_tokens == sum(r.view_tokens for r in result.records)
    assert result.cost == pytest.approx(result.uncached_tokens + 0.1 * result.cached_tokens)
    assert result.peak_view_tokens == result.records[-1].view_tokens
    assert result.requests_over_window == 0
    assert result.ratio_to(result) == 1.0
    tight = await replay_none(small_log(), window=result.records[1].view_tokens)
    assert tight.requests_over_window == 2
    assert set(result.summary()) <= set(result.to_dict())
    json.dumps(result.to_dict())


@dataclasses.dataclass
class ClearingCompiler:
    """Clears every tool return but the newest, and reports a summariser call on its 2nd compile."""

    name: str = 'clearing'
    events: collections.deque[CompactionEvent] = dataclasses.field(default_factory=collections.deque)
    calls: int = 0

    async def compile(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        self.calls += 1
        if self.calls == 2:
            details = {'summary_input_tokens': 100, 'summary_output_tokens': 10}
            self.events.append(
                CompactionEvent(policy='s', messages_before=1, messages_after=1, details=details)
            )
        return [_clear_returns(m) if i < len(messages) - 1 else m for i, m in enumerate(messages)]


async def test_compaction_costs_retention_and_summariser_hook() -> None:
    log = small_log()
    base = await replay_none(log)
    result = await replay(log, ClearingCompiler(), context_window=128_000, counter=COUNTER)
    assert result.profile == 'clearing'
    assert [r.summary_calls for r in result.records] == [0, 1, 0, 0]
    assert result.summary_input_tokens == 100
    assert result.summary_output_tokens == 10
    assert result.cost == pytest.approx(result.uncached_tokens + 0.1 * result.cached_tokens + 100 + 40)
    assert result.input_tokens < base.input_tokens
    assert result.fact_retention < 1.0
    # The last request: only src/app/main.py survives (quoted in calls); the rest lived in cleared returns.
    assert result.records[-1].fact_retention == pytest.approx(1 / 5)
    assert result.records[-1].needed_fact_retention == 1.0
    # Each request clears the previous newest return: the prefix stops at that message.
    assert 0 < result.records[-1].cached_tokens < result.records[-2].view_tokens


@dataclasses.dataclass
class ScriptedCompiler:
    """Compiles the n-th request's input with the n-th function of `script` (one per request)."""

    script: Sequence[Any]
    name: str = 'scripted'
    calls: int = 0

    async def compile(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        self.calls += 1
        return list(self.script[self.calls - 1](list(messages)))


async def test_prefix_breaks_and_the_perfect_cache_on_a_hand_built_replay() -> None:
    """A break is a request the previous request's view is not a prefix of; a perfect cache serves
    every token the previous request held and charges only what is appended."""
    log = small_log()  # four requests: inputs log[:1], log[:3], log[:5], log[:7]
    script = [
        lambda m: m,  # the first request: nothing before it, no break
        lambda m: m,  # appends to the first: no break
        lambda m: [m[0], m[1], _clear_returns(m[2]), *m[3:]],  # rewrites message 2: a break
        lambda m: [m[0], *m[-2:]],  # drops the middle, shorter than the previous view: a break
    ]
    result = await replay(log, ScriptedCompiler(script), context_window=128_000, counter=COUNTER)
    records = result.records
    assert [r.prefix_break for r in records] == [False, False, True, True]
    assert result.prefix_breaks == 2
    assert result.breaks_per_100 == 50.0
    # Without a break, what is cached is the whole previous request, as a perfect cache would.
    assert records[1].cached_tokens == records[1].perfect_cached_tokens == records[0].view_tokens
    # A break caches less than the previous request; a perfect cache would have served all of it.
    assert records[2].view_tokens > records[1].view_tokens
    assert records[2].cached_tokens < records[2].perfect_cached_tokens == records[1].view_tokens
    # A view smaller than the previous one would be served whole by a perfect cache.
    assert records[3].view_tokens < records[2].view_tokens
    assert records[3].perfect_cached_tokens == records[3].view_tokens
    assert records[0].perfect_cached_tokens == records[0].cached_tokens == 0
    perfect = [0, records[0].view_tokens, records[1].view_tokens, records[3].view_tokens]
    expected = sum(r.view_tokens - p for r, p in zip(records, perfect, strict=True)) + 0.1 * sum(perfect)
    assert result.perfect_cache_cost == pytest.approx(expected)
    assert result.perfect_cache_cost < result.cost
    summary = result.summary()
    assert summary['prefix_breaks'] == 2
    assert summary['breaks_per_100'] == 50.0
    assert summary['perfect_cache_cost'] == result.perfect_cache_cost
    # Sending the log as is never breaks the prefix: its cost is the perfect cache's.
    none = await replay_none(log)
    assert none.prefix_breaks == 0
    assert none.perfect_cache_cost == pytest.approx(none.cost)


async def test_changed_instructions_break_the_prefix() -> None:
    """Instructions lead the request: a view that only appends to the previous one but changes them
    is a break, with nothing cached."""
    log = small_log()[:4]  # two requests: inputs log[:1] and log[:3]

    def instructed(messages: list[ModelMessage]) -> list[ModelMessage]:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        return [*messages[:-1], dataclasses.replace(last, instructions='Be brief.')]

    plain = await replay(log, ScriptedCompiler([lambda m: m] * 2), context_window=128_000, counter=COUNTER)
    result = await replay(
        log, ScriptedCompiler([lambda m: m, instructed]), context_window=128_000, counter=COUNTER
    )
    assert [r.prefix_break for r in plain.records] == [False, False]
    assert [r.prefix_break for r in result.records] == [False, True]
    assert result.records[1].cached_tokens == 0 < result.records[1].perfect_cached_tokens


async def test_budget_exceeded_is_recorded_not_raised() -> None:
    class Refusing:
        name = 'refusing'

        async def compile(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
            raise ContextBudgetExceeded(10, 5)

    result = await replay(small_log(), Refusing(), context_window=128_000, counter=COUNTER, label='r')
    assert result.profile == 'r'
    assert result.errors == result.requests == result.requests_over_window == 4
    assert all(r.error and r.view_tokens == r.log_tokens for r in result.records)


async def test_transparent_equals_none_on_a_real_trajectory() -> None:
    log = load_history(REAL)
    assert isinstance(log, list)
    assert isinstance(log[0], ModelRequest)
    facts = FactIndex.build(log)
    assert any(facts.is_path)
    assert any(u >= 0 for u in facts.last_use)
    none = await replay(log, None, context_window=32_000, counter=COUNTER, facts=facts)
    assert none.requests == sum(isinstance(m, ModelResponse) for m in log) == 51
    for before, after in zip(none.records, none.records[1:], strict=False):
        assert after.cached_tokens == before.view_tokens
    assert none.fact_retention == none.needed_fact_retention == 1.0
    assert none.requests_over_window == sum(r.view_tokens > 32_000 for r in none.records)
    transparent = await replay(
        log, profile('transparent', counter=COUNTER), context_window=32_000, counter=COUNTER, facts=facts
    )
    assert [r.view_tokens for r in transparent.records] == [r.view_tokens for r in none.records]
    assert transparent.ratio_to(none) == pytest.approx(1.0)
    assert transparent.compile_ms_median > 0


# --- loading ----------------------------------------------------------------------------------


def test_load_history_reads_a_list_of_lists(tmp_path: Path) -> None:
    log = small_log()
    single = tmp_path / 'one.json'
    single.write_bytes(ModelMessagesTypeAdapter.dump_json(log))
    assert load_history(single) == log
    assert load_histories(single) == [log]
    many = tmp_path / 'many.json'
    dumped = json.loads(ModelMessagesTypeAdapter.dump_json(log))
    many.write_text(json.dumps([dumped, dumped[:3]]))
    assert load_history(many) == [log, log[:3]]
    assert load_histories(many) == [log, log[:3]]


def test_load_history_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / 'missing.json'
    with pytest.raises(HistoryLoadError, match=r'missing\.json: cannot read'):
        load_history(missing)
    bad = tmp_path / 'bad.json'
    bad.write_text('[{"kind": "request", ')
    with pytest.raises(HistoryLoadError, match=r'bad\.json: not valid JSON'):
        load_history(bad)
    scalar = tmp_path / 'scalar.json'
    scalar.write_text('{"kind": "request"}')
    with pytest.raises(HistoryLoadError, match=r'scalar\.json: expected a JSON list'):
        load_history(scalar)


def test_validation_failure_names_the_message_index(tmp_path: Path) -> None:
    dumped = json.loads(ModelMessagesTypeAdapter.dump_json(small_log()))
    dumped[2] = {'kind': 'bogus', 'parts': []}
    path = tmp_path / 'invalid.json'
    path.write_text(json.dumps(dumped))
    with pytest.raises(
        HistoryLoadError, match=r'invalid\.json: message 2 is not a valid pydantic-ai message'
    ):
        load_history(path)
    path.write_text(json.dumps([dumped[:2], dumped]))
    with pytest.raises(HistoryLoadError, match=r'invalid\.json: history 1: message 2 '):
        load_history(path)


def test_geometric_mean() -> None:
    assert geometric_mean([0.5, 2.0]) == pytest.approx(1.0)
    assert geometric_mean([0.25]) == pytest.approx(0.25)
    assert math.isnan(geometric_mean([]))


def _clear_returns(message: ModelMessage) -> ModelMessage:
    if not isinstance(message, ModelRequest):
        return message
    parts: list[Any] = []
    for part in message.parts:
        if isinstance(part, ToolReturnPart):
            part = dataclasses.replace(cast(Any, part), content='[cleared]')
        parts.append(part)
    return dataclasses.replace(message, parts=parts)


# --- recall-charged cost (issue 10) ----------------------------------------------------------------


def recall_log(*, uses: int = 1, far: bool = False) -> list[ModelMessage]:
    """The agent lists files once, works on, then opens `uses` of the listed files (one deep in the
    output with `far`)."""
    listing = '\n'.join(f'pkg/mod_{i}/file_{i}.py' for i in range(400 if far else 20))
    target = 'pkg/mod_399/file_399.py' if far else 'pkg/mod_7/file_7.py'
    h = History().user('find and fix the bug', system='You are a coding agent.')
    h.step(Tool('bash', {'command': 'find pkg -name "*.py"'}, listing, id='ls'))
    for i in range(6):
        h.step(Tool('bash', {'command': f'echo step {i}'}, f'step {i} done ' * 30, id=f's{i}'))
    for n in range(uses):
        path = target if n == 0 else f'pkg/mod_{n}/file_{n}.py'
        h.step(Tool('read_file', {'path': path}, f'x = {n}', id=f'use{n}'))
        h.step(Tool('bash', {'command': f'echo after {n}'}, 'ok ' * 40, id=f'after{n}'))
    return h.build()


def no_digest_profile(**settings: Any) -> Any:
    """`coding` at a one-observation window with digests that list no facts: the path is only in the log."""
    from pydantic_ai_context import MaskObservations, TrimToolOutputs

    p = profile('coding', context_window=128_000, counter=COUNTER, keep_recent=1, step=1, **settings)
    steps = tuple(
        dataclasses.replace(s, max_paths=0, max_errors=0)
        if isinstance(s, MaskObservations | TrimToolOutputs)
        else s
        for s in p.steps
    )
    return p.replace(steps=steps)


async def test_a_used_fact_the_view_lacks_costs_a_read_back_round_trip() -> None:
    log = recall_log()
    base = await replay_none(log)
    result = await replay(log, no_digest_profile(), context_window=128_000, counter=COUNTER)
    charged = [r for r in result.records if r.recall_round_trips]
    assert len(charged) == 1
    record = charged[0]
    assert record.recall_missing == 1
    assert record.recall_unrecoverable == 0
    assert record.recall_cached_tokens == record.view_tokens, 'the extra request re-sends the view, cached'
    assert record.recall_uncached_tokens > COUNTER.count_text('pkg/mod_7/file_7.py'), 'the call and the page'
    extra = record.recall_uncached_tokens + record.recall_cached_tokens * result.cache_read_price
    assert result.recall_charged_cost == pytest.approx(result.cost + extra)
    assert result.needed_or_recoverable == 1.0
    assert result.needed_fact_retention < 1.0
    assert base.recall_charged_cost == base.cost, 'the uncompacted log lacks nothing'
    assert result.summary()['recall_round_trips'] == 1


async def test_without_read_back_a_missing_fact_is_unrecoverable() -> None:
    log = recall_log()
    result = await replay(log, no_digest_profile(readback=False), context_window=128_000, counter=COUNTER)
    assert result.recall_charged_cost == result.cost
    assert result.unrecoverable_facts == 1
    assert result.needed_or_recoverable < 1.0


async def test_kept_pages_are_carried_and_not_read_twice() -> None:
    log = recall_log(uses=3)
    result = await replay(log, no_digest_profile(), context_window=128_000, counter=COUNTER)
    assert result.recall_round_trips == 3, 'round trips: every use pays its own read-back'
    assert sum(r.recall_kept_round_trips for r in result.records) == 1, 'kept: the page stays in view'
    after = [r for r in result.records if r.recall_kept_tokens and not r.recall_kept_round_trips]
    assert after, 'later requests re-send the kept page'
    assert result.cost < result.recall_kept_cost


async def test_a_fact_far_down_an_output_is_searched_for_first() -> None:
    log = recall_log(far=True)
    result = await replay(log, no_digest_profile(), context_window=128_000, counter=COUNTER)
    (record,) = [r for r in result.records if r.recall_round_trips]
    # The search snippet shows the path itself: no read of page 2 is needed.
    assert record.recall_round_trips == 1
    assert record.recall_uncached_tokens < COUNTER.count_text(
        '\n'.join(f'pkg/mod_{i}/file_{i}.py' for i in range(200))
    )


# --- model texts kept -------------------------------------------------------------------------

THOUGHT = 'THOUGHT: the crash comes from main.py reading a value it never validates.'


def test_model_texts_count_long_response_texts_shown_verbatim_anywhere() -> None:
    log = (
        History()
        .user('fix the crash')
        .step(Tool('bash', {'command': 'ls'}, 'src/app/main.py'), text=THOUGHT)
        .step(Tool('bash', {'command': 'cat src/app/main.py'}, 'x = 1'), text='Look.')
        .answer('Fixed.')
        .build()
    )
    texts = ModelTexts.build(log)
    assert texts.texts == (THOUGHT,)  # 'Look.' and 'Fixed.' are too short to count
    assert texts.kept(1, log[:1]) == 1.0  # nothing said yet
    assert texts.kept(len(log), log) == 1.0
    quoted = [log[0], ModelResponse(parts=[TextPart(f'[Record: {THOUGHT}\n- bash(ls) → ok]')])]
    assert texts.kept(len(log), quoted) == 1.0
    shortened = [log[0], ModelResponse(parts=[TextPart(THOUGHT[:30] + ' [… 40 more characters]')])]
    assert texts.kept(len(log), shortened) == 0.0


async def test_replay_reports_model_texts_kept_per_request() -> None:
    log = small_log()
    log[1] = dataclasses.replace(log[1], parts=[TextPart(THOUGHT), *log[1].parts])
    result = await replay_none(log)
    assert all(r.model_texts_kept == 1.0 for r in result.records)
    assert result.model_texts_kept == 1.0
    assert result.summary()['model_texts_kept'] == 1.0

    class DropThoughts:
        name = 'drop_thoughts'

        async def compile(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
            return [
                dataclasses.replace(m, parts=[p for p in m.parts if not isinstance(p, TextPart)] or m.parts)
                if isinstance(m, ModelResponse)
                else m
                for m in messages
            ]

    dropped = await replay(log, DropThoughts(), context_window=128_000, counter=COUNTER)
    # The first request has no earlier text; every later one lost the thought.
    assert [r.model_texts_kept for r in dropped.records] == [1.0] + [0.0] * (len(dropped.records) - 1)


@pytest.mark.parametrize('name', ['long_horizon', 'chat'])
async def test_summaries_made_ahead_land_between_replayed_requests(name: str) -> None:
    # A replay never yielded to the profile's background summaries, so summarising presets (ahead
    # by default) looked like presets that only drop: 0 summariser calls on this run at 16k.
    log = data.load_trajectory(data.TRAJECTORY_DIR / 'mini_gemini3pro_requests_1142.json')
    counter = TiktokenCounter()

    async def run(ahead: bool) -> ReplayResult:
        p = profile(
            name,
            context_window=16_000,
            counter=counter,
            summary_model=extractive_summary_model(),
            summary_ahead=ahead,
        )
        return await replay(log, p, context_window=16_000, counter=counter)

    ahead, synchronous = await run(True), await run(False)
    assert synchronous.summary_calls > 0
    assert ahead.summary_calls > 0
    assert any(r.summarised for r in ahead.records)
    # Made one request later than the synchronous summary, not dropped in its place.
    assert ahead.cost <= synchronous.cost * 1.1


async def test_read_back_is_credited_on_a_log_without_pydantic_ai_ids() -> None:
    # Such a log is known to the archive by its compile lineage, which exists only once compiled:
    # the ledger named its conversation from the whole recorded log before any compile (and read
    # back through the recorded responses, not the replayed ones), so nothing was ever reachable.
    log = data.load_trajectory(data.TRAJECTORY_DIR / 'oh_sdk_sonnet4_astropy_fitsdiff.json')
    counter = TiktokenCounter()
    result = await replay(
        log, profile('coding', context_window=16_000, counter=counter), context_window=16_000, counter=counter
    )
    assert result.recall_round_trips >= 1
    assert result.to_dict()['needed_or_recoverable'] == 1.0
    assert result.needed_fact_retention < 1.0  # the view alone misses some: read-back makes up for them
