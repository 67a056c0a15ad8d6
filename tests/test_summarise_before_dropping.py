"""DESIGN invariant 14: summarise before dropping, whatever the shape of the model's own turns, and
say why when a summarising step fires and makes no summary."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import ContextBudgetExceeded, HeuristicCounter, profile
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR, marker
from pydantic_ai_context.events import CompactionEvent, ContextEvent
from pydantic_ai_context.policies.summarize._summary_plan import NO_ROOM
from pydantic_ai_context.policies.summary_cache import InMemorySummaryCache
from pydantic_ai_context.replay import extractive_summary_model, replay

from ._examples import examples
from .builders import History, Tool, long_text
from .realistic import prose
from .strategies import histories
from .test_presets import kept_history, summarising

WINDOW = 16_000
STEPS = 40


def counting(calls: list[int]) -> FunctionModel:
    """The replay's extractive summariser, counting its calls."""
    inner = extractive_summary_model().function
    assert inner is not None

    def summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return inner(messages, info)

    return FunctionModel(summarise)


def thinking_agent(p: Any) -> Agent[None, str]:
    """The issue's agent: 40 tool steps, each response a note of about 720 tokens beside a command
    whose output is 20,000 characters."""
    step = iter(range(1, 1_000))

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = next(step)
        if n > STEPS:
            return ModelResponse(parts=[TextPart('All tests pass.')])
        return ModelResponse(
            parts=[
                TextPart(f'Step {n}: ' + prose(560, seed=n)),
                ToolCallPart('run', {'command': f'make test-{n}'}, tool_call_id=f'c{n}'),
            ]
        )

    agent = Agent(FunctionModel(model), capabilities=[p]) if PYDANTIC_AI_MAJOR >= 2 else None
    if agent is None:
        agent = Agent(FunctionModel(model), history_processors=p.history_processors)

    @agent.tool_plain
    def run(command: str) -> str:
        """Run a shell command."""
        return command_output(command)

    return agent


def command_output(command: str) -> str:
    """What the issue's agent's command prints: 20,000 characters."""
    lines = (f'src/mod_{command[-2:]}/f{j}.py:{j}: ok ' + 'y' * 50 for j in range(330))
    return f'$ {command}\n' + '\n'.join(lines)[:20_000]


def thinking_log() -> list[ModelMessage]:
    """The issue's agent's log, as its run writes it (on pydantic-ai 1.x a run's messages are the
    views it was sent, so the log is built here)."""
    h = History().user('Fix the failing tests in the repository.')
    for n in range(1, STEPS + 1):
        command = f'make test-{n}'
        h.step(
            Tool('run', {'command': command}, command_output(command)),
            text=f'Step {n}: ' + prose(560, seed=n),
        )
    return h.build()


@pytest.mark.parametrize('ahead', [True, False], ids=['ahead', 'synchronous'])
@pytest.mark.parametrize('name', ['long_horizon', 'chat'])
def test_a_model_that_thinks_out_loud_is_summarised_not_dropped(name: str, ahead: bool) -> None:
    """The issue's agent at 16k: the summariser used never to be called (the tail the plan kept,
    a whole step of notes, never fitted beside a summary asked at full size), and `fit_to_budget`
    dropped the oldest steps, the model's notes among them, with no word why. Now the summariser
    is called, and once a summary is in the view no later request drops messages."""
    calls: list[int] = []
    events: list[ContextEvent] = []
    p = profile(
        name,
        context_window=WINDOW,
        counter=HeuristicCounter(),
        summary_model=counting(calls),
        summary_ahead=ahead,
        on_event=events.append,
    )
    thinking_agent(p).run_sync('Fix the failing tests in the repository.')
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert calls, 'the summariser is called'
    first = next(
        i
        for i, e in enumerate(compactions)
        if e.policy == 'summarize_window' and e.messages_after < e.messages_before
    )
    late_drops = [
        (n, e) for n, e in enumerate(compactions) if n > first and e.details.get('dropped_messages')
    ]
    assert not late_drops, [e.reason for _, e in late_drops]


async def test_a_log_compiled_again_on_its_cached_summaries_drops_nothing() -> None:
    """The extractive summariser writes longer summaries than asked, so the issue's agent's view
    with its newest summary is over the limit, and `fit_to_budget` shortens the newest results.
    Compiled again on the same cache (a retry, a fresh profile, another worker), the cached chain
    already reaches the newest step: it is applied, not left out. The plan used to say there was
    no room, and `fit_to_budget` dropped the oldest steps, which the summaries covered."""
    cache = InMemorySummaryCache()

    def summarising_on(cache: InMemorySummaryCache) -> Any:
        return profile(
            'long_horizon',
            context_window=WINDOW,
            counter=HeuristicCounter(),
            summary_model=extractive_summary_model(),
            summary_ahead=False,
            summary_cache=cache,
        )

    log = thinking_log()
    live = summarising_on(cache)
    compared = 0
    for end in [n for n in range(3, len(log) + 1) if isinstance(log[n - 1], ModelRequest)]:
        view = await live.compile(log[:end])
        fresh = summarising_on(cache)
        assert await fresh.compile(log[:end]) == view, end
        assert not any(e.details.get('dropped_messages') for e in fresh.last_compile_events), end
        compared += any(e.details.get('summary_calls') for e in live.last_compile_events)
    assert compared >= 10, 'the live profile summarised, and the fresh ones compiled on its summaries'


async def test_the_notes_go_into_the_summary_and_stay_readable_back() -> None:
    """Long model texts are summarised like anything else: what the summary covers is read back
    whole, the notes included."""
    from .test_readback import read_all

    h = History().user('Fix the failing tests.')
    for i in range(30):
        h.step(
            Tool('run', {'command': f'make test-{i}'}, long_text(40)), text=f'Note {i}: ' + prose(500, seed=i)
        )
    log = h.build()
    p = profile(
        'long_horizon',
        context_window=WINDOW,
        counter=HeuristicCounter(),
        summary_model=extractive_summary_model(),
        summary_ahead=False,
    )
    view = await p.compile(log)
    summary = next(m for m in view if (marker(m) or {}).get('kind') == 'summary')
    record = marker(summary)
    assert record is not None
    assert record['status'] == 'summary'
    assert not any(e.details.get('dropped_messages') for e in p.last_compile_events)
    original = read_all(record['ref'], log, p.archive)
    assert prose(500, seed=0)[:200] in original


# --- saying why no summary is made ------------------------------------------------------------


def _huge_newest_step(room: int, limit: int, counter: Any = None) -> list[ModelMessage]:
    """A long run whose newest step (a note no policy shortens) leaves about `room` tokens of the
    limit beside it."""
    counter = counter or HeuristicCounter()
    h = History().user('Port the storage layer.')
    for i in range(30):
        h.step(
            Tool('read_file', {'path': f'src/m{i}.py'}, long_text(20, prefix=f'src/m{i}.py')), text='Reading.'
        )
    words = limit * (limit - room) // counter.count_text(prose(limit, seed=1))
    while counter.count_text(prose(words, seed=1)) > limit - room:
        words -= 10
    h.step(Tool('ls', {}, 'src/'), text=prose(words, seed=1))
    return h.build()


async def test_no_room_beside_the_framing_and_the_newest_step_is_said() -> None:
    counter = HeuristicCounter()
    p = profile(
        'long_horizon',
        context_window=8_000,
        counter=counter,
        summary_model=extractive_summary_model(),
        summary_ahead=False,
    )
    limit = p.budget_for(None).limit
    await p.compile(_huge_newest_step(120, limit))
    said = [e for e in p.last_compile_events if e.no_summary is not None]
    assert [e.no_summary for e in said] == [NO_ROOM]
    event = said[0]
    assert event.policy == 'summarize_window'
    assert event.messages_before == event.messages_after  # the view is unchanged ...
    assert NO_ROOM in event.reason  # ... and the reason says why
    # What the drop took, it took for that reason: the two events of the compile sit side by side.
    policies = [e.policy for e in p.last_compile_events]
    assert policies.index('fit_to_budget') == policies.index('summarize_window') + 1


async def test_the_run_in_progress_kept_out_of_summaries_is_said() -> None:
    """`chat` keeps the run in progress out of summaries while the view fits: over its soft
    threshold but under the limit, the step fires, makes none, and says so."""
    h = History().user('Port the storage layer.')
    for i in range(40):
        h.step(
            Tool('read_file', {'path': f'src/m{i}.py'}, long_text(8, prefix=f'src/m{i}.py')),
            text=prose(150, seed=i),
        )
    p = profile(
        'chat',
        context_window=8_000,
        counter=HeuristicCounter(),
        summary_model=extractive_summary_model(),
        summary_ahead=False,
    )
    log = h.build()
    for end in range(3, len(log) + 1, 2):
        view = await p.compile(log[:end])
        said = [e.no_summary for e in p.last_compile_events if e.no_summary]
        if said:
            assert said == [
                'no whole step to summarise before the run in progress (kept while the view fits)'
            ]
            assert view == log[:end] or len(view) == end
            return
    raise AssertionError('the soft threshold was never crossed')


async def test_a_replay_says_why_no_summary_took_the_drops() -> None:
    from pydantic_ai_context.cli.replay import drop_lines

    counter = HeuristicCounter()
    p = profile(
        'long_horizon', context_window=8_000, counter=counter, summary_model=extractive_summary_model()
    )
    log = [*_huge_newest_step(120, p.budget_for(None).limit), ModelResponse(parts=[TextPart('Done.')])]
    result = await replay(log, p, context_window=8_000, counter=counter)
    assert result.drop_reasons.get(NO_ROOM, 0) >= 1
    assert result.summary()['drop_reasons'] == result.drop_reasons
    [line] = drop_lines({'long_horizon': result})
    assert NO_ROOM in line


# --- the property: with a working summariser, fit drops nothing a summary could cover ----------

PROPS = settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(
    log=histories(max_runs=2, max_steps=14, in_progress=True, note_words=900, web_search=True),
    name=st.sampled_from(['long_horizon', 'chat']),
    window=st.sampled_from([4_000, 6_000, 8_000]),
    ahead=st.booleans(),
)
async def test_fit_drops_nothing_a_summary_could_cover(
    log: list[ModelMessage], name: str, window: int, ahead: bool
) -> None:
    """Generated histories whose responses carry notes up to about the size of the window's tail,
    compiled request after request with a working summariser, summaries made ahead (the default,
    settled between requests as a model's answer lets them land) and synchronous, with web
    searches (must go back whole) among the steps: whenever
    `fit_to_budget` drops steps, the summarising step said there was no room for a summary beside
    the task framing and the newest step."""
    p = summarising(name, window, summary_ahead=ahead)
    await compile_checking_drops(p, log)
    await p.close_background()


async def compile_checking_drops(p: Any, log: list[ModelMessage]) -> int:
    """Compile `log` request after request, letting summaries made ahead land between requests;
    whenever `fit_to_budget` drops steps, the summarising step must have said there was no room
    for a summary. Returns how many requests compiled."""
    compiled = 0
    for end in range(1, len(log) + 1):
        if not isinstance(log[end - 1], ModelRequest):
            continue
        try:
            await p.compile(log[:end])
        except ContextBudgetExceeded:
            continue
        compiled += 1
        events = p.last_compile_events
        if any(e.details.get('dropped_messages') for e in events):
            reasons = [e.no_summary for e in events if e.policy == 'summarize_window']
            assert reasons == [NO_ROOM], (end, [(e.policy, e.reason) for e in events])
        await p.settle_background()
    return compiled


def test_inspect_shows_why_no_summary_took_the_drop(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai_context import TiktokenCounter
    from pydantic_ai_context.cli import main

    from .test_cli import write_log

    counter = TiktokenCounter()  # what inspect counts with
    limit = profile('long_horizon', context_window=8_000, counter=counter).budget_for(None).limit
    log = [*_huge_newest_step(120, limit, counter), ModelResponse(parts=[TextPart('Done.')])]
    path = write_log(tmp_path / 'notes.json', log)
    assert main(['inspect', str(path), '--profile', 'long_horizon', '--window', '8000']) == 0
    printed = ' '.join(capsys.readouterr().out.split())  # rich wraps long lines
    assert 'no summary: no room for a summary beside the task framing' in printed
    assert printed.index('no summary: no room') < printed.index('oldest messages')  # the drop's row follows


@pytest.mark.parametrize('ahead', [True, False], ids=['ahead', 'synchronous'])
async def test_what_a_summary_keeps_verbatim_counts_in_its_plan(ahead: bool) -> None:
    """Beside a summary of the run in progress stay, verbatim, the run's prompt (the task at hand)
    and its unresolved failures. The plan used to size the view without them: it reused a cached
    summary (or planned a span) whose view was over the limit once they were put back, and
    `fit_to_budget` dropped steps with no reason given (found by the property above once its
    histories drew web searches again, which made such views large)."""
    h = History().user('Set up the project.').step(Tool('ls', {}, 'a.py b.py')).answer('Done.')
    h.user('Now fix the failing build. ' + prose(400, seed=99))
    for n in range(30):
        failed = n % 3 == 0
        output = (f'error: target-{n} failed\n' if failed else '') + prose(150, seed=n)
        h.step(
            Tool('run', {'command': f'make target-{n}'}, output, failed=failed),
            text=f'Step {n}: ' + prose(200, seed=100 + n),
        )
    log = h.build()
    p = summarising('long_horizon', 4_000, summary_ahead=ahead)
    summaries = 0
    for end in range(3, len(log) + 1, 2):
        await p.compile(log[:end])
        events = p.last_compile_events
        summaries += any(
            e.policy == 'summarize_window' and e.messages_after < e.messages_before for e in events
        )
        if any(e.details.get('dropped_messages') for e in events):
            reasons = [e.no_summary for e in events if e.policy == 'summarize_window']
            assert reasons == [NO_ROOM], (end, [(e.policy, e.reason) for e in events])
        await p.settle_background()
    await p.close_background()
    assert summaries >= 10


async def test_a_view_the_ahead_path_projects_just_under_the_limit_makes_its_summary_when_over() -> None:
    """A history the property above found (`chat` at 4,000, summaries made ahead, each landed
    before the next request). At the 25th message the cached chain was projected at 3,496 tokens
    against a limit of 3,520, so the step sent it rather than make the planned summary; the block
    it built (the framing, the kept failure beside the summary) came to 3,524, and `fit_to_budget`
    dropped 4 messages a summary could have covered. Counted, a view over the limit makes its
    summary now."""
    log = kept_history('summary_ahead_a_few_tokens_over.json')
    p = summarising('chat', 4_000, summary_ahead=True)
    assert await compile_checking_drops(p, log) >= 10
    summarised = [e for e in p.events if e.policy == 'summarize_window' and e.details.get('summary_calls')]
    assert summarised, 'the summariser was called'
    await p.close_background()
