"""Every shared real trajectory loads, compiles with `transparent`, and passes the invariant checks."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse

from pydantic_ai_context import analyze_pairs, profile

from .invariants import assert_all

TRAJECTORIES = Path(__file__).resolve().parents[2] / 'shared' / 'trajectories'
FILES = sorted(TRAJECTORIES.glob('*.json'))


def load(path: Path) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_json(path.read_bytes())


def test_trajectories_are_present() -> None:
    assert len(FILES) >= 6, f'expected the shared trajectories in {TRAJECTORIES}'


@pytest.mark.parametrize('path', FILES, ids=lambda p: p.stem)
async def test_transparent_compiles_every_request_validly(path: Path) -> None:
    log = load(path)
    assert analyze_pairs(log).is_valid
    snapshot = copy.deepcopy(log)
    transparent = profile('transparent', context_window=200_000)
    # The view of the whole log, and of the input to a sample of its recorded requests.
    cuts = [i for i, m in enumerate(log) if isinstance(m, ModelResponse)][::15]
    for end in [*cuts, len(log)]:
        view = await transparent.compile(log[:end])
        assert_all(log[:end], snapshot[:end], view)
        assert view == log[:end]
    assert log == snapshot
