"""No tool output stalls a compile (DESIGN.md invariant 11).

Adversarial results — separator-free runs of one word character, of `a.`, of `ab/`, of `x-y_z.`,
hex and base64 dumps, and a 5 MB mix of them — as the oldest and the newest tool result (and inside
a shell command), through every preset at 8k, 32k and 128k windows: every compile finishes, well
inside a generous timeout, and keeps the invariants. Before issue 13 one 150 kB run took 28 s.
"""

from __future__ import annotations

import base64
import copy
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage

from pydantic_ai_context import ContextBudgetExceeded, HeuristicCounter, available_profiles, profile
from pydantic_ai_context.replay import extractive_summary_model

from ._examples import examples
from .builders import History, Tool, long_text
from .invariants import assert_all

KINDS = ('word', 'a.', 'ab/', 'x-y_z.', 'hex', 'base64')
WINDOWS = (8_000, 32_000, 128_000)
MIX_CHARS = 5_000_000
# One counter for every compile: its memo counts each (large) text once, as in a run.
COUNTER = HeuristicCounter()


def adversarial(kind: str, size: int, *, char: str = 'A', seed: int = 0) -> str:
    """`size` characters of one adversarial shape (`char` for a run of one word character)."""
    rng = random.Random(seed)
    if kind == 'word':
        return char * size
    if kind == 'hex':
        return rng.randbytes(size // 2 + 1).hex()[:size]
    if kind == 'base64':
        return base64.b64encode(rng.randbytes(size * 3 // 4 + 3)).decode()[:size]
    return (kind * (size // len(kind) + 1))[:size]


def mix(size: int) -> str:
    """Every kind in turn, in blocks of 250 kB, to `size` characters."""
    blocks: list[str] = []
    total = 0
    while total < size:
        for n, kind in enumerate(KINDS):
            block = adversarial(kind, 250_000, seed=n)
            blocks.append(block)
            total += len(block)
    return ''.join(blocks)[:size]


def log_with(old: str, newest: str) -> list[ModelMessage]:
    """A coding run whose first and last tool results are `old` and `newest`, with a shell command
    built from `old` in between."""
    h = History().user('The parser chokes on dump.bin: find out why.', system='You are a coding agent.')
    h.step(Tool('bash', {'command': 'cat dump.bin'}, old))
    h.step(Tool('bash', {'command': 'sed -n -i ' + old[:100_000]}, 'done'))
    for i in range(5):
        output = f'FAILED tests/test_{i}.py::test_parse - ValueError: bad byte\n' + long_text(40)
        h.step(Tool('bash', {'command': f'pytest tests/test_{i}.py'}, output), text=f'Step {i}.')
    h.step(Tool('bash', {'command': 'cat big.log'}, newest))
    return h.build()


async def compile_everywhere(log: list[ModelMessage]) -> None:
    """Compile `log` with every preset at every window and check the invariants of each view."""
    snapshot = copy.deepcopy(log)
    for name in available_profiles():
        for window in WINDOWS:
            compiled = profile(
                name, context_window=window, counter=COUNTER, summary_model=extractive_summary_model()
            )
            try:
                view = await compiled.compile(log)
            except ContextBudgetExceeded:
                # Only a preset that compacts nothing may give up; every other one clamps the result.
                assert name == 'transparent'
                continue
            assert_all(log, snapshot, view)


@pytest.mark.timeout(30, method='thread')
@settings(max_examples=examples(5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    old_kind=st.sampled_from(KINDS),
    new_kind=st.sampled_from(KINDS),
    size=st.integers(min_value=20_000, max_value=300_000),
    char=st.sampled_from('A_9zé'),
    seed=st.integers(min_value=0, max_value=2**16),
)
async def test_adversarial_results_compile_through_every_preset(
    old_kind: str, new_kind: str, size: int, char: str, seed: int
) -> None:
    old = adversarial(old_kind, size, char=char, seed=seed)
    newest = adversarial(new_kind, size // 2, char=char, seed=seed + 1)
    await compile_everywhere(log_with(old, newest))


@pytest.mark.timeout(30, method='thread')
async def test_a_5_mb_mix_compiles_through_every_preset() -> None:
    blob = mix(MIX_CHARS)
    assert len(blob) == MIX_CHARS
    await compile_everywhere(log_with(blob, blob))
