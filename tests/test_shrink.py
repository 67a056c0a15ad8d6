"""Issue 14: under a budget, summaries come before drops, shrink the view to a low-water mark, and
are reused from the cache (one summary per shrink) so the following requests append to an
unchanged prefix."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import HeuristicCounter, profile
from pydantic_ai_context._parts import marker
from pydantic_ai_context.replay import extractive_summary_model

from .builders import History, Tool, long_text

WINDOW = 8_000


def growing_log(steps: int) -> list[ModelMessage]:
    h = History().user(
        'Port the storage layer to the new API; keep every test green.', system='You are a coding agent.'
    )
    for i in range(steps):
        h.step(
            Tool(
                'read_file',
                {'path': f'src/store/part_{i}.py'},
                long_text(25, prefix=f'src/store/part_{i}.py'),
            ),
            text=f'Reading part {i}. ' + 'I will keep track of the call sites as I go. ' * 8,
        )
    return h.build()


def kinds(view: list[ModelMessage]) -> list[str | None]:
    return [(marker(m) or {}).get('kind') for m in view]


async def test_one_summary_per_shrink_down_to_the_low_water_mark() -> None:
    counter = HeuristicCounter()
    p = profile(
        'long_horizon',
        context_window=WINDOW,
        counter=counter,
        summary_model=extractive_summary_model(),
        summary_ahead=False,  # the synchronous shrink (test_summary_ahead.py covers the other)
    )
    budget = p.budget_for(None)
    log = growing_log(80)
    previous: list[ModelMessage] = []
    summary_text = None
    shrinks = calls = 0
    sent = cached = 0
    for end in range(3, len(log) + 1, 2):
        view = await p.compile(log[:end])
        events = p.last_compile_events
        calls += sum(int(e.details.get('summary_calls', 0)) for e in events)
        assert not any(e.details.get('dropped_messages') for e in events), (
            'dropped while a summary could shrink'
        )
        assert counter.count_messages(view) <= budget.limit
        summary = next((m for m in view if kinds([m]) == ['summary']), None)
        text = None if summary is None else str(summary.parts[(marker(summary) or {})['part']].content)
        if text != summary_text:
            shrinks += 1
            # A shrink goes down to the low-water mark (beside the summary), not just under the limit.
            assert summary is not None
            assert counter.count_messages(view) <= 0.6 * budget.limit + counter.count_message(summary)
            summary_text = text
        common = 0
        for a, b in zip(view, previous, strict=False):
            if a != b:
                break
            common += counter.count_message(a)
        sent += counter.count_messages(view)
        cached += common
        previous = view
    assert shrinks >= 2, 'the log outgrows the window several times'
    assert calls == shrinks, 'one summariser call per shrink: the cached summary is reused in between'
    assert cached / sent >= 0.7, 'between shrinks the prefix stays (a provider serves it from its cache)'


async def test_an_unavailable_summariser_leaves_a_marker_saying_what_was_removed() -> None:
    def down(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError('provider down')

    counter = HeuristicCounter()
    p = profile(
        'long_horizon',
        context_window=WINDOW,
        counter=counter,
        summary_model=FunctionModel(down),
        summary_ahead=False,
    )
    view = await p.compile(growing_log(80))
    assert counter.count_messages(view) <= p.budget_for(None).limit
    record = next(marker(m) for m in view if kinds([m]) == ['summary'])
    assert record is not None
    assert record['status'] == 'fallback'
    text = '\n'.join(str(getattr(part, 'content', '')) for m in view for part in m.parts)
    assert 'earlier messages were removed to fit the context window' in text


async def test_a_summary_far_over_the_size_asked_for_is_discarded() -> None:
    def verbose(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('Files: ' + ', '.join(f'src/pkg/m{i}.py' for i in range(400)))])

    counter = HeuristicCounter()
    log = History().user('go')
    for i in range(150):
        log.step(Tool('read_file', {'path': f'src/m{i}.py'}, long_text(30, prefix=f'src/m{i}.py')))
    p = profile(
        'long_horizon',
        context_window=3_000,
        reserved_output=400,
        counter=counter,
        # A summary model with a window of its own (128k, by its name): the transcript fits it.
        summary_model=FunctionModel(verbose, model_name='gpt-4o'),
        summary_ahead=False,
    )
    view = await p.compile(log.build())  # used to raise: the summary in the task framing left no room
    assert counter.count_messages(view) <= p.budget_for(None).limit
    record = next(marker(m) for m in view if kinds([m]) == ['summary'])
    assert record is not None
    assert record['status'] == 'fallback'
    assert any('asked for' in e.reason for e in p.last_compile_events)


async def test_a_drop_after_a_summary_in_the_task_framing_keeps_the_summary_marker() -> None:
    """fit_to_budget's note used to replace the marker of the request it was added to, which may be
    the task framing with the summary merged into it: the summary lost its metadata. A summary is
    now asked to fit beside the tail it keeps, so the drop comes from a tighter budget than the one
    the summary was planned for (a provider's rejection tightens it so)."""
    from pydantic_ai_context import CompileContext, ContextBudget
    from pydantic_ai_context.policies.fit import fit_to_budget

    h = History().user('Fix everything.')
    for i in range(120):
        h.step(
            Tool('read_file', {'path': f'src/m{i}.py'}, long_text(30, prefix=f'src/m{i}.py')),
            text='Reading. ' * 30,
        )
    h.step(Tool('ls', {}, 'src/'), text='Listing.')
    counter = HeuristicCounter()
    p = profile(
        'long_horizon',
        context_window=6_000,
        counter=counter,
        summary_model=extractive_summary_model(),
        summary_ahead=False,
    )
    summarised = await p.compile(h.build())
    assert kinds(summarised[:1]) == ['summary']  # merged into the task framing (a single long run)
    fit = fit_to_budget()
    size = counter.count_messages(summarised)
    tighter = CompileContext(
        counter=counter, budget=ContextBudget(context_window=int(size * 0.8), reserved_output=0)
    )
    view = fit.apply(summarised, tighter)
    record = marker(view[0])
    assert record is not None
    assert record['kind'] == 'summary'
    assert record['dropped']['messages'] > 0
    assert fit.apply(view, tighter) == view
