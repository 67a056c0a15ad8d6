from __future__ import annotations

import asyncio
import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic_ai.messages import (
    ImageUrl,
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
    CompileContext,
    ContextBudget,
    HeuristicCounter,
    _facts,
    _parts,
    compile_view,
    normalize,
    profile,
)
from pydantic_ai_context._facts import extract_facts
from pydantic_ai_context.policies._frontier import Frontier, observation_indices
from pydantic_ai_context.policies.mask import MaskObservations, mask_observations
from pydantic_ai_context.policies.trim import trim_tool_outputs

from . import data
from ._examples import examples
from .builders import History, Tool, long_text
from .invariants import assert_all
from .strategies import any_histories, histories

PROPS = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
COUNTER = HeuristicCounter(chars_per_token=4.0)
TRAJECTORIES = list(data.TRAJECTORIES)


def run(policy: Any, log: list[ModelMessage], budget: ContextBudget | None = None) -> list[ModelMessage]:
    return normalize(policy.apply(list(log), CompileContext(counter=COUNTER, budget=budget)))


def mask(**settings: Any) -> MaskObservations:
    return mask_observations(**({'keep_recent': 1, 'step': 1} | settings))


OUTPUT = (
    'collected 12 items\n'
    + 'tests/test_io.py ....F\n' * 30
    + 'FAILED tests/test_io.py::test_vla - AssertionError'
)


def test_old_results_become_digests_and_responses_stay() -> None:
    log = (
        History()
        .user('fix it', system='sys')
        .step(Tool('bash', {'command': 'pytest tests/test_io.py'}, OUTPUT), text='Running the tests.')
        .step(Tool('bash', {'command': 'ls'}, 'a.py'))
        .build()
    )
    view = run(mask(), log)
    part = view[2].parts[0]
    assert isinstance(part, ToolReturnPart)
    # The call is right before its result, so the digest does not repeat it.
    assert part.content.startswith('[output masked] ok, 32 lines')
    assert 'pytest' not in part.content
    repeated = run(mask(repeat_call=True), log)[2].parts[0].content
    assert repeated.startswith("[output masked] bash(command='pytest tests/test_io.py') → ok, 32 lines")
    assert 'FAILED tests/test_io.py::test_vla - AssertionError' in part.content
    assert part.tool_call_id == log[2].parts[0].tool_call_id
    assert part.tool_name == 'bash'
    record = _parts.marker(part)
    assert record is not None
    assert record['kind'] == 'masked'
    assert record['tokens'] == COUNTER.count_text(OUTPUT)
    assert view[1] is log[1]  # the agent's reasoning and call
    assert view[0] is log[0]
    assert view[3] is log[3]
    assert view[4] is log[4]


def test_outcome_is_kept() -> None:
    h = History().user('go').step(Tool('bash', {}, OUTPUT))
    log = h.step(Tool('bash', {}, 'ok')).step(Tool('bash', {}, 'ok')).build()  # resolved by a success
    if not hasattr(log[2].parts[0], 'outcome'):
        pytest.skip('pydantic-ai 1.x has no outcome')
    log[2] = dataclasses.replace(log[2], parts=[dataclasses.replace(log[2].parts[0], outcome='denied')])
    part = run(mask(), log)[2].parts[0]
    assert part.outcome == 'denied'
    assert part.content.startswith('[output masked] denied')


def test_excluded_tools_and_tiny_results_stay() -> None:
    log = (
        History()
        .user('go')
        .step(Tool('think', {'thought': 'hmm'}, 'Your thought has been logged. ' * 20))
        .step(Tool('bash', {'command': 'echo hi'}, 'hi'))
        .step(Tool('bash', {'command': 'ls'}, 'a.py'))
        .build()
    )
    view = run(mask(), log)
    assert view[2] is log[2]  # excluded tool
    assert view[4] is log[4]  # a digest would be longer than 'hi'
    assert run(mask(exclude_tools=()), log)[2] is not log[2]


def test_failures_stay_until_a_later_success_has_left_the_window() -> None:
    failing = Tool('pytest', {}, OUTPUT, failed=True)
    h = History().user('go').step(failing).step(Tool('ls', {}, OUTPUT)).step(Tool('ls', {}, OUTPUT))
    log = h.build()
    if not hasattr(log[2].parts[0], 'outcome'):
        pytest.skip('pydantic-ai 1.x has no outcome')
    assert run(mask(), log)[2] is log[2]
    h.step(Tool('pytest', {}, 'passed ' * 40))
    assert run(mask(), h.build())[2] is log[2]  # the success is still in the window
    h.step(Tool('ls', {}, OUTPUT))
    assert run(mask(), h.build())[2].parts[0].content.startswith('[output masked] error')


def test_pinned_content_stays() -> None:
    log = History().user('go').step(Tool('bash', {}, OUTPUT)).step(Tool('bash', {}, OUTPUT)).build()
    log[2] = dataclasses.replace(
        log[2], parts=[dataclasses.replace(log[2].parts[0], metadata={'pinned': True})]
    )
    assert run(mask(), log)[2] is log[2]


def test_trimmed_results_are_masked_with_the_original_size_and_facts() -> None:
    lines = [f'noise {i} ' + 'x' * 60 for i in range(300)]
    lines[150] = 'ValueError: boom in src/widgets/core.py'
    h = History().user('go')
    for _ in range(3):
        h.step(Tool('bash', {'command': 'make'}, '\n'.join(lines)))
    log = h.build()
    trimmed = run(trim_tool_outputs(keep_recent=1, step=1, max_tokens=200, keep_tokens=100), log)
    assert _parts.marker(trimmed[2].parts[0])['kind'] == 'trimmed'  # type: ignore[index]
    view = run(mask(), trimmed)
    content = view[2].parts[0].content
    assert '300 lines' in content
    assert 'src/widgets/core.py' in content
    assert 'ValueError: boom in src/widgets/core.py' in content


def test_digests_do_not_repeat_facts_shown_earlier_in_the_view() -> None:
    output = 'src/widgets/core.py:10: in run\nValueError: the widget exploded\n' + 'more output here\n' * 20
    h = History().user('go')
    for i in range(3):
        h.step(Tool('bash', {'command': f'python run_{i}.py'}, output))
    log = h.build()
    view = run(mask(), log)
    first, second = view[2].parts[0].content, view[4].parts[0].content
    assert 'src/widgets/core.py' in first
    assert 'ValueError: the widget exploded' in first
    assert 'src/widgets/core.py' not in second
    assert 'ValueError' not in second
    repeated = run(mask(skip_seen_facts=False), log)[4].parts[0].content
    assert 'src/widgets/core.py' in repeated


def test_facts_a_summary_lists_are_not_left_out_of_digests_after_it() -> None:
    """Issue: a view of a summarised view masked results the view itself left whole. Masking runs
    before summarising, so on the first compile a digest is made beside the messages a summary
    later stands for; the summary may list facts those messages did not show (it reads the
    originals). Counting its facts as shown shortened the digests after it on a recompile only."""
    output = 'src/widgets/core.py:10: in run\nValueError: the widget exploded\n' + 'more output here\n' * 20
    facts = 'Facts: src/widgets/core.py\nValueError: the widget exploded'
    summary = ModelRequest(
        parts=[UserPromptPart('go'), UserPromptPart(facts)],
        metadata=_parts.with_marker(None, {'kind': 'summary', 'part': 1}),
    )
    h = History().user('go')
    h.messages[0] = summary
    for i in range(2):
        h.step(Tool('bash', {'command': f'python run_{i}.py'}, output))
    digest = run(mask(), h.build())[2].parts[0].content
    assert 'src/widgets/core.py' in digest
    assert 'ValueError: the widget exploded' in digest
    # The same facts in a prompt the view shows are left out.
    h.messages[0] = ModelRequest(parts=[UserPromptPart('go'), UserPromptPart(facts)])
    digest = run(mask(), h.build())[2].parts[0].content
    assert 'src/widgets/core.py' not in digest
    assert 'ValueError' not in digest


def test_token_window() -> None:
    h = History().user('go')
    for i in range(6):
        h.step(Tool('bash', {'command': f'c{i}'}, long_text(20)))  # ~350 tokens each
    log = h.build()
    view = run(mask_observations(keep_recent_tokens=1_000, step=1), log)
    masked = [i for i, m in enumerate(view) if any(_parts.marker(p) for p in m.parts)]
    assert masked == [2, 4, 6]  # the newest three observations hold the protected 1,000 tokens


def test_factory_and_name() -> None:
    policy = mask_observations(keep_recent=7, step=3, exclude_tools=['think'])
    assert policy.frontier == Frontier(keep_recent=7, step=3)
    assert policy.exclude_tools == frozenset({'think'})
    assert policy.name == 'mask_observations'


@PROPS
@given(any_histories)
def test_invariants_idempotence_determinism(log: list[ModelMessage]) -> None:
    snapshot = copy.deepcopy(log)
    base = normalize(log)
    view = run(mask(), base)
    assert_all(log, snapshot, view)
    assert run(mask(), view) == view
    assert run(mask(), base) == view


def chain(frontier: Frontier | None = None) -> list[Any]:
    if frontier is None:
        return [trim_tool_outputs(max_tokens=20, keep_tokens=10), mask_observations()]
    return [
        trim_tool_outputs(frontier=frontier, max_tokens=20, keep_tokens=10, max_arg_chars=30),
        mask_observations(frontier=frontier),
    ]


def compile_chain(
    steps: list[Any], log: list[ModelMessage], budget: ContextBudget | None = None
) -> list[ModelMessage]:
    context = CompileContext(counter=COUNTER, budget=budget)
    return asyncio.run(compile_view(log, steps, context))


@PROPS
@given(any_histories)
def test_chain_keeps_invariants_and_is_idempotent(log: list[ModelMessage]) -> None:
    snapshot = copy.deepcopy(log)
    steps = chain(Frontier(keep_recent=1, step=2))
    budget = ContextBudget(context_window=3_000, reserved_output=0)
    base = normalize(log)
    view = compile_chain(steps, base, budget)
    assert_all(log, snapshot, view)
    assert compile_chain(steps, view, budget) == view


def test_a_tools_content_before_any_prompt_is_masked_with_its_result_and_the_first_prompt_kept() -> None:
    # The log opens with a system prompt and tool steps; the first user prompt part is a screenshot
    # a tool returned beside its result (`ToolReturn` content): no prompt, masked with the result.
    log: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart('You are a coding agent.')])]
    for i in range(4):
        output = '\n'.join(f'src/app/models.py:{n}: some output line {n}' for n in range(40))
        log.append(ModelResponse(parts=[ToolCallPart('read_file', {'path': 'a.py'}, tool_call_id=f'c{i}')]))
        parts: list[Any] = [ToolReturnPart('read_file', output, tool_call_id=f'c{i}')]
        if i == 0:
            parts.append(UserPromptPart(['read_file screenshot:', ImageUrl('https://example.com/shot.png')]))
        log.append(ModelRequest(parts=parts))
    log.append(ModelResponse(parts=[TextPart('Two actions, sorry.')]))
    log.append(ModelRequest(parts=[UserPromptPart('Please provide exactly one action.')]))
    view = compile_chain(chain(Frontier(keep_recent=1, step=2)), normalize(log))
    assert not any(
        isinstance(p, UserPromptPart) and not isinstance(p.content, str) for m in view for p in m.parts
    )
    assert_all(log, copy.deepcopy(log), view)


def test_a_runs_prompt_sent_with_deferred_tool_results_stays_when_the_results_are_masked() -> None:
    # Run 2 opens with the result of a call run 1 deferred and the user's new prompt beside it
    # (pydantic-ai's `deferred_tool_results`): that prompt is the task at hand, not tool content.
    output = '\n'.join(f'src/app/models.py:{n}: some output line {n}' for n in range(40))
    log: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('task 1')], run_id='run-1'),
        ModelResponse(parts=[ToolCallPart('deploy', {'env': 'prod'}, tool_call_id='d1')], run_id='run-1'),
        ModelRequest(
            parts=[
                ToolReturnPart('deploy', output, tool_call_id='d1'),
                UserPromptPart(['Approved. Now check the logs:', ImageUrl('https://example.com/shot.png')]),
            ],
            run_id='run-2',
        ),
    ]
    for i in range(4):
        log.append(
            ModelResponse(
                parts=[ToolCallPart('read_file', {'path': 'a.py'}, tool_call_id=f'c{i}')], run_id='run-2'
            )
        )
        log.append(
            ModelRequest(parts=[ToolReturnPart('read_file', output, tool_call_id=f'c{i}')], run_id='run-2')
        )
    view = run(mask(), normalize(log))
    masked = view[2]
    assert _parts.marker(masked.parts[0]) is not None  # the deferred result is masked ...
    assert log[2].parts[1] in masked.parts  # ... and the run's prompt kept verbatim
    assert_all(log, copy.deepcopy(log), view)


@PROPS
@given(histories(max_runs=2, max_steps=15, in_progress=True))
def test_view_of_a_longer_log_extends_the_previous_view_between_jumps(log: list[ModelMessage]) -> None:
    step = 3
    frontier = Frontier(keep_recent=2, step=step)
    steps = chain(frontier)
    ends = [i + 1 for i, m in enumerate(log) if isinstance(m, ModelRequest)]
    previous: list[ModelMessage] | None = None
    previous_frontier = 0
    rewrites = 0
    context = CompileContext(counter=COUNTER)
    for end in ends:
        prefix = log[:end]
        view = compile_chain(steps, prefix)
        position = frontier.locate(prefix, context)
        if previous is not None and view[: len(previous)] != previous:
            rewrites += 1
            assert position != previous_frontier, 'the prefix changed without a frontier jump'
        previous, previous_frontier = view, position
    assert rewrites <= -(-len(observation_indices(log)) // step)


@pytest.mark.parametrize('path', TRAJECTORIES, ids=lambda p: p.stem)
def test_recorded_trajectories(path: Path) -> None:
    log = ModelMessagesTypeAdapter.validate_json(path.read_bytes())
    snapshot = copy.deepcopy(log)
    budget = ContextBudget(context_window=32_000)
    policies: list[list[Any]] = [[trim_tool_outputs()], [mask_observations()], chain()]
    for steps in policies:
        view = compile_chain(steps, log, budget)
        assert_all(log, snapshot, view)
        assert compile_chain(steps, view, budget) == view
        assert len(view) == len(normalize(log))
    # Facts of masked results stay visible (within the digest caps).
    view = compile_chain([mask_observations()], log)
    text = '\n'.join(_parts.message_text(m) for m in view)
    originals = [p for m in log for p in _parts.tool_results(m)]
    for part in originals[:20]:
        facts = extract_facts(_parts.tool_content_text(part.content))
        for error in facts.error_lines[:8]:
            assert error in text
    assert isinstance(view[-1], ModelRequest)
    assert not isinstance(view[0], ModelResponse)


LISTING = '\n'.join(f'/repo/src/pkg/mod_{i}.py' for i in range(60))


def listing_log(*later: Tool) -> list[ModelMessage]:
    h = History().user('fix the parser', system='sys').step(Tool('ls', {'path': '/repo/src/pkg'}, LISTING))
    for tool in later:
        h.step(tool)
    return h.build()


def test_a_digest_lists_a_few_paths_and_counts_the_rest() -> None:
    log = listing_log(*(Tool('bash', {'command': f'echo {i}'}, str(i)) for i in range(3)))
    digest, ref_line = run(mask(), log)[2].parts[0].content.rsplit('\n', 1)
    assert digest.endswith(
        'paths: ' + ', '.join(f'/repo/src/pkg/mod_{i}.py' for i in range(8)) + ' (+52 more)'
    )
    assert ref_line.startswith('[original: read_context(')
    everything = run(mask(max_paths=100), log)[2].parts[0].content
    assert all(f'/repo/src/pkg/mod_{i}.py' in everything for i in range(60))


def test_paths_named_again_by_the_next_messages_are_listed_first() -> None:
    # The agent goes on to open one file of the listing (spelt relative to the repository).
    opened = Tool('bash', {'command': 'cat src/pkg/mod_41.py'}, 'def parse(): ...')
    log = listing_log(opened, *(Tool('bash', {'command': f'echo {i}'}, str(i)) for i in range(3)))
    digest = run(mask(), log)[2].parts[0].content
    assert 'paths: /repo/src/pkg/mod_41.py, /repo/src/pkg/mod_0.py,' in digest
    assert '/repo/src/pkg/mod_41.py' not in run(mask(named_again_within=0), log)[2].parts[0].content


def test_a_mention_past_the_horizon_leaves_the_digest_as_it_was() -> None:
    # Bounded, so a digest stops changing: the cached prefix that holds it stays valid.
    fillers = [Tool('bash', {'command': f'echo {i}'}, str(i)) for i in range(12)]
    opened = Tool('bash', {'command': 'cat src/pkg/mod_41.py'}, 'def parse(): ...')
    # (Each log gets new call ids, so the digests are compared without their ref line.)
    before = run(mask(), listing_log(*fillers))[2].parts[0].content.rsplit('\n', 1)[0]
    after = run(mask(), listing_log(*fillers, opened))[2].parts[0].content.rsplit('\n', 1)[0]
    assert after == before
    assert '/repo/src/pkg/mod_41.py' not in after


def test_paths_named_again_after_the_frontier_wait_for_it_so_a_longer_log_extends_the_view() -> None:
    # The listing is masked at message 11; the agent opens a listed file at message 13, while the
    # frontier stays put. The digest names that file only once the frontier passes message 13, so
    # every request's view is the previous one plus the new messages, as a fresh compile gives.
    fillers = [Tool('bash', {'command': f'echo {i}'}, str(i)) for i in range(4)]
    opened = Tool('bash', {'command': 'cat src/pkg/mod_41.py'}, 'def parse(): ...')
    log = listing_log(*fillers, opened, *(Tool('bash', {'command': f'echo {i}'}, str(i)) for i in range(6)))
    live = mask(keep_recent=1, step=4)
    named: list[bool] = []
    for end in range(11, len(log) + 1, 2):
        view = run(live, log[:end])
        assert view == run(mask(keep_recent=1, step=4), log[:end]), f'request at message {end}'
        assert _parts.marker(view[2].parts[0]) is not None
        named.append('/repo/src/pkg/mod_41.py' in view[2].parts[0].content)
    assert named[:3] == [False, False, False]
    assert named[-1]


@pytest.mark.parametrize('name', ['coding', 'long_horizon', 'chat'])
@pytest.mark.parametrize('failure_lines', [12, 80], ids=['short', 'long'])
async def test_views_resumed_across_frontier_moves_equal_fresh_views_as_failures_resolve(
    name: str, failure_lines: int
) -> None:
    """Mask and trim resume from their previous pass when the frontier moves; a failure that a
    later success resolves once it leaves the window changes a message far before the frontier
    (masked by `coding`, trimmed by `chat`). Every incremental view equals a fresh profile's."""
    counter = HeuristicCounter()
    h = History().user('make the tests pass')
    h.step(
        Tool(
            'pytest',
            {'args': '-x'},
            'FAILED tests/test_a.py::test_x - AssertionError\n' + long_text(failure_lines),
            failed=True,
        )
    )
    for i in range(40):
        h.step(Tool('read_file', {'path': f'src/m{i}.py'}, long_text(60, prefix=f'src/m{i}.py')))
        if i == 25:
            h.step(Tool('pytest', {'args': '-x'}, '1 passed\n' + long_text(60)))
    log = h.build()
    incremental = profile(name, context_window=16_000, counter=counter)
    ends = [i for i, m in enumerate(log) if isinstance(m, ModelRequest)][1:]
    seen_failure_compacted = False
    for end in ends:
        view = await incremental.compile(log[: end + 1])
        fresh = await profile(name, context_window=16_000, counter=counter).compile(log[: end + 1])
        assert view == fresh, f'request {end}'
        first = next(
            (
                p
                for m in view
                for p in m.parts
                if isinstance(p, ToolReturnPart) and p.tool_call_id == log[1].parts[0].tool_call_id
            ),
            None,
        )
        if first is not None:  # a summary or a drop may have taken it out of the view
            seen_failure_compacted |= (_parts.marker(first) or {}).get('kind') in ('masked', 'trimmed')
    if name != 'chat' or failure_lines > 12:  # chat does not mask; a short result is not trimmed
        assert seen_failure_compacted, 'the failure was never resolved and compacted: the test proves nothing'


def test_a_compile_scans_each_text_for_facts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Masking reads the paths the messages after a result name (to list them first in its digest),
    # and which facts each message shows; both read the same texts, scanned once between them.
    scanned: list[str] = []
    scan = _facts.extract_facts

    def counting(text: str) -> Any:
        scanned.append(text)
        return scan(text)

    monkeypatch.setattr(_facts, 'extract_facts', counting)
    log: list[Any] = [ModelRequest(parts=[UserPromptPart('Audit src/pkg.')])]
    for i in range(60):
        note = ' '.join(
            f'Point {k}: src/pkg/module_{(i + k) % 9}.py reads token {i * 7 + k}.' for k in range(20)
        )
        log.append(
            ModelResponse(
                parts=[TextPart(note), ToolCallPart('view', {'path': f'src/m{i}.py'}, tool_call_id=f'c{i}')]
            )
        )
        output = '\n'.join(f'{n:4}  def f_{n}():  # src/pkg/module_{n % 9}.py' for n in range(80))
        log.append(ModelRequest(parts=[ToolReturnPart('view', output, tool_call_id=f'c{i}')]))
    compiled = profile('coding', context_window=128_000, counter=HeuristicCounter())
    asyncio.run(compiled.compile(log))
    assert scanned
    twice = sum(len(text) for text in set(scanned) if scanned.count(text) > 1)
    assert twice <= 0.01 * sum(map(len, scanned)), 'texts were scanned for facts more than once'
