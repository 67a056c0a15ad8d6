"""The layout stays readable: small modules and classes, and no import cycle.

Imports are read from the source, including those inside functions and under `TYPE_CHECKING`,
because a cycle hidden in either still ties two rooms together (docs/architecture.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pydantic_ai_context

PACKAGE = 'pydantic_ai_context'
ROOT = Path(pydantic_ai_context.__file__).parent
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 400


def _modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module under `root` (the directory of package `package`), by dotted name."""
    found: dict[str, Path] = {}
    for path in root.rglob('*.py'):
        parts = [package, *path.relative_to(root).with_suffix('').parts]
        if parts[-1] == '__init__':
            parts.pop()
        found['.'.join(parts)] = path
    return found


MODULES = _modules()


def _owner(name: str, modules: dict[str, Path]) -> str:
    """The module `name` names, or the nearest package holding it (`pkg.attr` -> `pkg`)."""
    while name and name not in modules:
        name = name.rpartition('.')[0]
    return name


def imports_of(name: str, modules: dict[str, Path] = MODULES, root_package: str = PACKAGE) -> set[str]:
    """Every module of the package that `name` imports, wherever the import statement is (inside
    functions and under `TYPE_CHECKING` too: `ast.walk` visits every node)."""
    path = modules[name]
    package = name.split('.') if path.name == '__init__.py' else name.split('.')[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
        if isinstance(node, ast.Import):
            found.update(
                _owner(alias.name, modules) for alias in node.names if alias.name.startswith(root_package)
            )
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = '.'.join([*base, node.module] if node.module else base)
            if not target.startswith(root_package):
                continue
            for alias in node.names:
                submodule = f'{target}.{alias.name}'
                found.add(submodule if submodule in modules else _owner(target, modules))
    found.discard(name)
    found.discard('')
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_import_cycle() -> None:
    graph = {name: imports_of(name) for name in MODULES}
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}, 'e': {'e'}}
    assert import_cycles(graph) == [['a', 'b', 'c']]


def test_imports_inside_functions_and_type_checking_are_read(tmp_path: Path) -> None:
    # `_recall` once imported `replay` only under TYPE_CHECKING, and `replay` imported it back: a
    # tiny package on disk whose only cycle runs through such imports must show it.
    root = tmp_path / 'pkg'
    (root / 'sub').mkdir(parents=True)
    (root / '__init__.py').write_text('')
    (root / 'sub' / '__init__.py').write_text('')
    (root / 'a.py').write_text('import os\n\n\ndef f():\n    from pkg.sub import b\n    return b, os\n')
    (root / 'sub' / 'b.py').write_text(
        'from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .. import a\n\n\n'
        'class C:\n    def m(self):\n        import pkg.sub.c\n'
    )
    (root / 'sub' / 'c.py').write_text('X = 1\n')
    modules = _modules(root, 'pkg')
    assert set(modules) == {'pkg', 'pkg.sub', 'pkg.a', 'pkg.sub.b', 'pkg.sub.c'}
    graph = {name: imports_of(name, modules, 'pkg') for name in modules}
    assert graph['pkg.a'] == {'pkg.sub.b'}  # inside a function; `os` is not the package's
    assert graph['pkg.sub.b'] == {'pkg.a', 'pkg.sub.c'}  # under TYPE_CHECKING, and inside a method
    assert import_cycles(graph) == [['pkg.a', 'pkg.sub.b']]
    # And in this package: `store.urls` imports the settings only inside `open_store`.
    assert f'{PACKAGE}.settings' in imports_of(f'{PACKAGE}.store.urls')


def test_only_the_outer_rooms_import_read_back() -> None:
    # Read-back imports the core (markers, parts, integrity); the core and the policies never
    # import it back: only what offers the tools or the archive does (docs/architecture.md).
    readback = {
        name for name in MODULES if name == f'{PACKAGE}.readback' or name.startswith(f'{PACKAGE}.readback.')
    }
    outer = ('integration', 'profiles', 'replay', 'session', 'archive')
    importers = {
        name for name in MODULES if name not in readback and name != PACKAGE and imports_of(name) & readback
    }
    assert importers
    assert all(name.split('.')[1] in outer for name in importers), sorted(importers)


@pytest.mark.parametrize('name', sorted(MODULES))
def test_module_is_small(name: str) -> None:
    lines = len(MODULES[name].read_text(encoding='utf-8').splitlines())
    assert lines <= MAX_MODULE_LINES, f'{name} has {lines} lines'


@pytest.mark.parametrize('name', sorted(MODULES))
def test_classes_are_small(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text(encoding='utf-8'))
    large = {
        node.name: (node.end_lineno or node.lineno) - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_CLASS_LINES
    }
    assert large == {}
