"""A long log read for the first time is read in pieces that yield (`_warm`): the view, the events
and the next requests' views are those of a compile that read it at once."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from pydantic_ai_context import ContextBudgetExceeded, ContextProfile, _scope, profiles
from pydantic_ai_context import _warm as warm

from ._examples import examples
from .builders import History, Tool, long_text
from .strategies import PNG, any_histories
from .test_presets import make

PRESETS = ('coding', 'long_horizon', 'chat')


def many_runs(runs: int = 12, steps: int = 6) -> list[ModelMessage]:
    """A chat with a tool-using assistant: each run a few tool steps with large outputs, then an answer."""
    h = History().user('task 0: look at the parser', system='You are a coding agent.')
    for run in range(runs):
        for i in range(steps):
            h.step(
                Tool(
                    'execute_bash',
                    {'command': f'pytest tests/test_{run}_{i}.py'},
                    long_text(40, prefix=f'src/m{i}.py'),
                ),
                text=f'Run {run}, step {i}: checking the module.',
            )
        h.answer(f'Run {run} done: src/m{run % steps}.py was the cause.')
        h.user(f'task {run + 1}: now the next module')
    return h.build()


def pieces_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make every compile read its log in pieces (no threshold, many small pieces); the lengths read."""
    read: list[int] = []
    run = warm._run

    def counted(prefix: Any, policies: Any, context: Any) -> None:
        read.append(len(prefix))
        run(prefix, policies, context)

    monkeypatch.setattr(warm, '_run', counted)
    monkeypatch.setattr(profiles, 'WARM_MESSAGES', 1)
    monkeypatch.setattr(warm, 'MAX_PIECES', 40)
    monkeypatch.setattr(warm, 'PIECE_SECONDS', 0.0)  # every piece at the floor: as many as can be
    return read


async def views_and_reasons(p: ContextProfile, logs: list[list[ModelMessage]]) -> list[Any]:
    out: list[Any] = []
    for log in logs:
        try:
            view = await p.compile(log)
        except ContextBudgetExceeded as exc:
            out.append(('raised', str(exc)))
            continue
        out.append((view, [(e.policy, e.reason) for e in p.last_compile_events]))
    await p.close_background()
    return out


@pytest.mark.parametrize('name', PRESETS)
@pytest.mark.parametrize('window', [128_000, 16_000])
async def test_a_log_read_in_pieces_compiles_to_the_same_views(
    name: str, window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = many_runs()
    more = [*log, ModelResponse(parts=[TextPart('Looking.')]), ModelRequest(parts=[UserPromptPart('and?')])]
    at_once = await views_and_reasons(make(name, window), [log[:-1], log, more])
    read = pieces_read(monkeypatch)
    in_pieces = await views_and_reasons(make(name, window), [log[:-1], log, more])
    assert len(read) >= 30, 'the first compile read the log in pieces'
    assert read == sorted(read)
    assert read[-1] < len(log) - 1
    assert in_pieces == at_once


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=any_histories, name=st.sampled_from(PRESETS))
def test_any_log_read_in_pieces_compiles_to_the_same_view(log: list[ModelMessage], name: str) -> None:
    snapshot = copy.deepcopy(log)
    with pytest.MonkeyPatch.context() as patch:
        at_once = asyncio.run(views_and_reasons(make(name, 6_000, reserved_output=500), [log]))
        pieces_read(patch)
        in_pieces = asyncio.run(views_and_reasons(make(name, 6_000, reserved_output=500), [log]))
    assert log == snapshot
    assert in_pieces == at_once


async def test_a_prefix_the_budget_refuses_stops_the_reading_not_the_compile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Mid-run, the framing (a prompt with two mockups) and the newest step (a screenshot) overflow
    # 6k; once the run has ended, its step is isolated into a record and the log fits.
    h = History().user('task 0: match the mockups', system='You are a coding agent.')
    h.step(Tool('screenshot', {'page': 'home'}, 'taken'), text='Looking.')
    h.answer('Matched.')
    h.user('task 1: thanks')
    log = h.build()
    mockups = [BinaryContent(PNG, media_type='image/png')] * 2
    log[0] = ModelRequest(
        parts=[*log[0].parts[:-1], UserPromptPart(['task 0: match\n' + long_text(50), *mockups])]
    )
    log[2] = ModelRequest(
        parts=[*log[2].parts, UserPromptPart(['home:', BinaryContent(PNG, media_type='image/png')])]
    )
    with pytest.raises(ContextBudgetExceeded):
        await make('coding', 6_000, reserved_output=500).compile(log[:3])
    at_once = await views_and_reasons(make('coding', 6_000, reserved_output=500), [log])
    read = pieces_read(monkeypatch)
    in_pieces = await views_and_reasons(make('coding', 6_000, reserved_output=500), [log])
    assert read == [1, 3], 'the second prefix was refused'
    assert in_pieces == at_once
    assert at_once[0][0] != 'raised'


async def test_a_steady_compile_reads_no_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    log = many_runs(runs=4)
    p = make('coding', 16_000)
    await p.compile(log[:-2])
    read = pieces_read(monkeypatch)
    monkeypatch.setattr(profiles, 'WARM_MESSAGES', 50)
    await p.compile(log)  # two new messages: nothing to read ahead
    assert read == []


async def test_the_compile_after_a_read_in_pieces_resumes_every_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    # The compile numbers its calls of a fold from the first piece's, so the hint of the n-th call
    # names a fold of the first, short piece: it must not be taken over the fold of the whole log.
    log = many_runs()
    p = make('coding', 16_000)
    read = pieces_read(monkeypatch)
    monkeypatch.setattr(warm, 'PIECE_SECONDS', 10.0)  # a short first piece, then the rest at once
    monkeypatch.setattr(warm, 'MAX_PIECES', 20)
    await p.compile(log[:-2])
    assert len(read) == 2
    assert 4 <= read[0] < 20 < read[1]
    monkeypatch.setattr(profiles, 'WARM_MESSAGES', 10**9)
    fresh: list[int] = []
    resume = _scope._resume

    def spied(folds: Any, messages: Any, new: Any, order: Any = None) -> Any:
        def made() -> Any:
            fresh.append(len(messages))
            return new()

        return resume(folds, messages, made, order)

    monkeypatch.setattr(_scope, '_resume', spied)
    await p.compile(log)
    assert [n for n in fresh if n > 20] == [], 'a fold of the long log was read again from the start'
    await p.close_background()
