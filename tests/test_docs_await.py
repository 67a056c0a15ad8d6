"""The docs call every coroutine method of a store with `await`: a reader copies what they read."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from pydantic_ai_context import MemoryStore, SqliteStore
from pydantic_ai_context.store import SessionStore

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / 'README.md', *(ROOT / 'docs').glob('*.md')])


def _coroutine_methods() -> set[str]:
    names = set()
    for cls in (SessionStore, MemoryStore, SqliteStore):
        for name, member in inspect.getmembers(cls):
            if not name.startswith('_') and inspect.iscoroutinefunction(member):
                names.add(name)
    return names


def test_store_coroutines_are_awaited_in_the_docs() -> None:
    names = _coroutine_methods()
    assert 'sessions' in names
    call = re.compile(rf'(?<![\w.])(\w*store)\.({"|".join(sorted(names))})\(')
    unawaited = []
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), start=1):
            for match in call.finditer(line):
                before = line[: match.start()]
                if not re.search(r'await\s+$', before):
                    unawaited.append(f'{page.name}:{number}: {match.group()}')
    assert unawaited == []
