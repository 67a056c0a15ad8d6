"""The artifact side store (`ArtifactStore`), alike on every store: session stores and conversation stores."""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelRequest, UserPromptPart

from pydantic_ai_context import (
    Artifact,
    ArtifactStore,
    MemoryStore,
    SqliteStore,
    StoreEntryMissing,
    StoreError,
)
from pydantic_ai_context.store._compat import HAS_CONVERSATION_STORE

KINDS = ['MemoryStore', 'SqliteStore', 'memory://', 'sqlite://', 'postgresql://']


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    kind = request.param
    made: Any
    if kind == 'MemoryStore':
        made = MemoryStore()
    elif kind == 'SqliteStore':
        made = SqliteStore(tmp_path / 's.db')
    else:
        if not HAS_CONVERSATION_STORE:
            pytest.skip('conversation stores need pydantic-ai 2.66+')
        from pydantic_ai_context import open_store

        url = {
            'memory://': 'memory://',
            'sqlite://': f'sqlite:///{tmp_path / "c.db"}',
            'postgresql://': request.getfixturevalue('postgres_url') if kind == 'postgresql://' else '',
        }[kind]
        made = open_store(url)
    async with made:
        yield made


async def test_put_get_list_delete(store: Any) -> None:
    assert isinstance(store, ArtifactStore)
    await store.put_artifacts(
        'originals', {'call_1': 'full output', 'call_2': 'é ✓ \x00 nul kept'}, conversation_id='c1'
    )
    await store.put_artifacts('originals', {'other': 'x'}, meta={'tool': 'read_file', 'n': [1, 2]})
    await store.put_artifacts('elsewhere', {'call_1': 'another namespace'})

    one = await store.get_artifact('originals', 'call_1')
    assert (one.namespace, one.key, one.value, one.conversation_id) == (
        'originals',
        'call_1',
        'full output',
        'c1',
    )
    assert one.updated_at.tzinfo is not None
    found = await store.get_artifacts('originals', ['call_2', 'missing', 'other'])
    assert list(found) == ['call_2', 'other']  # in the order asked, missing keys left out
    assert found['call_2'].value == 'é ✓ \x00 nul kept'
    assert found['other'].meta == {'tool': 'read_file', 'n': [1, 2]}
    assert found['other'].conversation_id is None
    assert await store.get_artifacts('originals', []) == {}

    assert await store.artifact_keys('originals') == ['call_1', 'call_2', 'other']
    assert await store.artifact_keys('originals', conversation_id='c1') == ['call_1', 'call_2']
    assert await store.artifact_keys('originals', prefix='call_') == ['call_1', 'call_2']

    await store.put_artifacts('originals', {'call_1': 'replaced'})  # replaces value, meta and owner
    replaced = await store.get_artifact('originals', 'call_1')
    assert (replaced.value, replaced.conversation_id) == ('replaced', None)

    assert await store.delete_artifacts('originals', ['call_1', 'missing']) == 1
    assert await store.delete_artifacts('originals', conversation_id='c1') == 1
    assert await store.artifact_keys('originals') == ['other']
    assert await store.delete_artifacts('originals') == 1
    assert (await store.get_artifact('elsewhere', 'call_1')).value == 'another namespace'


async def test_bad_keys_and_values_are_refused_before_anything_is_written(store: Any) -> None:
    bad_calls = [
        lambda: store.put_artifacts('ns', {'ok': 'fine', 'bad': 3}),
        lambda: store.put_artifacts('ns', {'ok': 'fine', '': 'empty key'}),
        lambda: store.put_artifacts('ns', {'ok': 'fine', 'k\udc80': 'surrogate key'}),
        lambda: store.put_artifacts('ns', {'ok': 'fine', 'k': 'surrogate \udc80 value'}),
        lambda: store.put_artifacts('ns', {'ok': 'fine'}, meta={'not json': object()}),
        lambda: store.put_artifacts('', {'ok': 'fine'}),
        lambda: store.get_artifacts('ns', 'ok'),
    ]
    for call in bad_calls:
        with pytest.raises(StoreError):
            await call()
    assert await store.artifact_keys('ns') == []


async def test_deleting_a_session_deletes_its_artifacts(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / 's.db') as sqlite:
        for store in (MemoryStore(), sqlite):
            await store.append('s1', [ModelRequest(parts=[UserPromptPart('hi')])])
            await store.put_artifacts('originals', {'a': '1'}, conversation_id='s1')
            await store.put_artifacts('originals', {'b': '2'}, conversation_id='s2')
            await store.delete('s1')
            assert await store.artifact_keys('originals') == ['b']


@pytest.mark.parametrize('obj', [Artifact, ArtifactStore, StoreEntryMissing], ids=lambda o: o.__name__)
def test_docstring_example_runs(obj: Any) -> None:
    doc = inspect.getdoc(obj) or ''
    assert doc.split('\n')[0].endswith('.'), 'the docstring opens with one sentence'
    [block] = re.findall(r'```python\n(.*?)```', doc, flags=re.DOTALL)
    exec(compile(textwrap.dedent(block), f'<{obj.__name__} example>', 'exec'), {'__name__': 'example'})
