"""Every shipped real trajectory loads, compiles with `transparent`, and passes the invariant checks."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelResponse

from pydantic_ai_context import analyze_pairs, profile

from . import data
from .invariants import assert_all

FILES = data.TRAJECTORIES
load = data.load_trajectory


def test_every_shipped_trajectory_is_present_with_its_attribution() -> None:
    missing = [p.name for p in FILES if not p.is_file()]
    assert not missing, f'missing test data in {data.TRAJECTORY_DIR}: {missing}'
    shipped = {p.stem for p in data.TRAJECTORY_DIR.glob('*.json')}
    assert shipped == set(data.TRAJECTORY_NAMES)
    source = (data.TRAJECTORY_DIR / 'SOURCE.md').read_text()
    for name in data.TRAJECTORY_NAMES:
        assert f'## {name}.json' in source
    assert source.count('license: MIT') == len(data.TRAJECTORY_NAMES)


@pytest.mark.parametrize('path', FILES, ids=lambda p: p.stem)
async def test_transparent_compiles_every_request_validly(path: Path) -> None:
    log = load(path)
    assert analyze_pairs(log).is_valid
    snapshot = copy.deepcopy(log)
    # Wide enough for the largest shipped run (485k tokens): transparent raises over its window.
    transparent = profile('transparent', context_window=1_000_000)
    # The view of the whole log, and of the input to a sample of its recorded requests.
    cuts = [i for i, m in enumerate(log) if isinstance(m, ModelResponse)][::15]
    for end in [*cuts, len(log)]:
        view = await transparent.compile(log[:end])
        assert_all(log[:end], snapshot[:end], view)
        assert view == log[:end]
    assert log == snapshot
