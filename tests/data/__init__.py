"""The recorded agent runs the tests carry with them (see `trajectories/SOURCE.md` for provenance
and licences). A missing file fails the tests that need it; nothing here skips."""

from __future__ import annotations

from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

DATA = Path(__file__).resolve().parent
TRAJECTORY_DIR = DATA / 'trajectories'

TRAJECTORY_NAMES = (
    'mini_gemini3pro_django_15629',
    'mini_gemini3pro_requests_1142',
    'oh_sdk_gpt4o_browser_openagentsafety_metrics',
    'oh_sdk_sonnet4_astropy_fitsdiff',
    'oh_sdk_sonnet4_pylint_recursive_ignore_paths',
    'oh_sdk_sonnet4_sympy_matrixsymbol_difference',
)
"""Every trajectory shipped in `tests/data/trajectories`, by file stem."""

TRAJECTORIES = tuple(TRAJECTORY_DIR / f'{name}.json' for name in TRAJECTORY_NAMES)
"""Their paths, in name order; `test_trajectories.py` fails when one is missing."""

SMALLEST = TRAJECTORY_DIR / 'mini_gemini3pro_django_15629.json'
"""The smallest shipped run (103 messages), for tests that replay a whole file."""


def load_trajectory(path: Path) -> list[ModelMessage]:
    """A shipped run as pydantic-ai messages."""
    return list(ModelMessagesTypeAdapter.validate_json(path.read_bytes()))
