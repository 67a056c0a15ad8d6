"""The profile's rooms (issue 21): each idea in its own module, arrows one way, documented paths kept."""

from __future__ import annotations

import ast
from pathlib import Path

import pydantic_ai_context
from pydantic_ai_context import profiles

PACKAGE = Path(pydantic_ai_context.__file__).parent
ROOMS = (
    'dispatch.py',
    'gauge.py',
    'registry.py',
    *(f'integration/{p.name}' for p in sorted((PACKAGE / 'integration').glob('*.py'))),
)


def _imported(path: Path) -> set[str]:
    """Every module name `path` imports (relative ones resolved), wherever the import sits."""
    package = ['pydantic_ai_context', *path.relative_to(PACKAGE).parent.parts]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = '.'.join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f'{module}.{alias.name}' for alias in node.names)
    return names


def test_no_room_imports_the_profile() -> None:
    """The rooms receive the profile through Protocols: none imports `profiles` (or `presets`)."""
    for room in ROOMS:
        imported = _imported(PACKAGE / room)
        assert not {'pydantic_ai_context.profiles', 'pydantic_ai_context.presets'} & imported, room


def test_the_gauge_and_the_dispatch_import_nothing_of_the_integration() -> None:
    for room in ('dispatch.py', 'gauge.py', 'registry.py'):
        assert not any(
            name.startswith('pydantic_ai_context.integration') for name in _imported(PACKAGE / room)
        )


def test_documented_paths_still_import() -> None:
    from pydantic_ai_context.profiles import (
        ContextProfile,
        available_profiles,
        preset_factory,
        profile,
        register_profile,
        split_settings,
    )

    assert ContextProfile is pydantic_ai_context.ContextProfile
    assert profile is pydantic_ai_context.profile
    assert register_profile is pydantic_ai_context.register_profile
    assert available_profiles is pydantic_ai_context.available_profiles
    assert callable(preset_factory('coding'))
    assert split_settings({'context_window': 1, 'keep_recent': 2}) == (
        {'context_window': 1},
        {'keep_recent': 2},
    )
    assert profiles._PRESETS is pydantic_ai_context._registry.PRESETS


def test_a_copy_gets_rooms_of_its_own() -> None:
    """`replace` (a dataclass copy) builds new rooms: a copy never shares learned limits or run state."""
    original = profiles.ContextProfile(name='custom', context_window=32_000)
    copy = original.replace(soft_threshold=0.5)
    for room in ('_events_room', '_gauge', '_request_path', '_recovery', '_tools'):
        assert getattr(copy, room) is not getattr(original, room), room
