"""The conversation stores: pydantic-ai's behaviour on memory, SQLite and a real PostgreSQL, alike.

Every behaviour test runs on all three backends (the `store` fixture); pydantic-ai's own
`InMemoryConversationStore` (under `MemoryConversationStore`) is the reference the SQL stores must
match. On a pydantic-ai without `ConversationStore` (< 2.66) only the ImportError test runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import __version__ as pydantic_ai_version
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)

from pydantic_ai_context.errors import StoreEntryMissing, StoreError
from pydantic_ai_context.store import MIGRATIONS, SCHEMA_VERSION, SqliteStore
from pydantic_ai_context.store._compat import HAS_CONVERSATION_STORE

from ._conversation_worker import NO_LIMITS, echo_agent

if HAS_CONVERSATION_STORE:
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import ConversationConflict, ConversationStore

    from pydantic_ai_context import open_store
    from pydantic_ai_context.store import (
        POSTGRES_MIGRATIONS,
        MemoryConversationStore,
        PostgresConversationStore,
        SqliteConversationStore,
    )

needs_conversation_store = pytest.mark.skipif(
    not HAS_CONVERSATION_STORE, reason=f'pydantic-ai {pydantic_ai_version} has no ConversationStore (2.66+)'
)


pytestmark = needs_conversation_store


# --- helpers -------------------------------------------------------------------------------------

BACKENDS = ['memory', 'sqlite', 'postgres']


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> ConversationStore:
    if kind == 'memory':
        return open_store('memory://')
    if kind == 'sqlite':
        return open_store(f'sqlite:///{tmp_path / "conversations.db"}')
    return open_store(request.getfixturevalue('postgres_url'), timeout=5)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    made: Any = make_store(request.param, tmp_path, request)
    async with made:
        yield made


@pytest.fixture(params=['sqlite', 'postgres'])
async def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    made: Any = make_store(request.param, tmp_path, request)
    async with made:
        yield made


def texts(messages: list[ModelMessage]) -> list[str]:
    out: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart | TextPart) and isinstance(part.content, str):
                out.append(part.content)
    return out


async def turn(store: Any, cid: str, prompt: str, *, scope: str | None = None) -> Any:
    """Load (or start) `cid`, run one turn and save it: the way pydantic-ai documents it."""
    conversation = await store.load(cid, scope=scope) or Conversation(conversation_id=cid)
    result = await echo_agent().run(prompt, conversation=conversation, usage_limits=NO_LIMITS)
    return await store.save(result, scope=scope)


async def stored_texts(store: Any, cid: str, **kwargs: Any) -> list[str] | None:
    conversation = await store.load(cid, **kwargs)
    return None if conversation is None else texts(conversation.messages)


# --- pydantic-ai's behaviour, on every backend ---------------------------------------------------


async def test_save_appends_only_the_new_messages(store: Any) -> None:
    first = await turn(store, 'c', 'one')
    second = await turn(store, 'c', 'two')
    assert [len(first), len(second)] == [2, 2]
    assert first[0].parent_id is None
    assert second[0].parent_id == first[-1].id  # the log links each message to the one before
    conversation = await store.load('c')
    assert texts(conversation.messages) == ['one', 'ack one after 0', 'two', 'ack two after 2']
    assert conversation.usage.requests == 2  # the usage travels with the conversation
    assert [e.id for e in await store.load_entries('c')] == [e.id for e in first + second]
    assert texts((await store.load('c', limit=2)).messages) == ['two', 'ack two after 2']
    assert await store.load('missing') is None


async def test_a_rewritten_history_branches_and_keeps_the_old_one(store: Any) -> None:
    await turn(store, 'c', 'one')
    await turn(store, 'c', 'two')
    loaded = await store.load('c')
    old_head = (await store.load_entries('c'))[-1].id
    # Edited the second question: a conversation that does not say what is stored (as after
    # serializing it) is compared with the stored history and branches off the shared start.
    edited = Conversation(
        messages=[*loaded.messages[:2], ModelRequest(parts=[UserPromptPart('two, edited')])],
        conversation_id='c',
        revision=loaded.revision,
    )
    saved = await store.save(edited)
    assert len(saved) == 1
    assert await stored_texts(store, 'c') == ['one', 'ack one after 0', 'two, edited']
    [record] = await store.list_conversations()
    assert record.branches == [old_head]
    assert texts([e.message for e in await store.read_history(old_head)]) == [
        'one',
        'ack one after 0',
        'two',
        'ack two after 2',
    ]
    # ... and branching back restores it, leaving the edit as a branch in turn.
    back = await store.branch('c', from_entry=old_head, expected_revision=edited.revision)
    assert texts(back.messages)[-1] == 'ack two after 2'
    [record] = await store.list_conversations()
    assert record.head_id == old_head
    assert record.branches == [saved[0].id]


async def test_branch_at_continues_from_an_earlier_turn(store: Any) -> None:
    await turn(store, 'c', 'one')
    await turn(store, 'c', 'two')
    loaded = await store.load('c')
    branched = await store.branch('c', at=2, expected_revision=loaded.revision)
    assert texts(branched.messages) == ['one', 'ack one after 0']
    with pytest.raises(ConversationConflict):  # the old revision cannot be saved over the branch
        await store.branch('c', at=0, expected_revision=loaded.revision)
    result = await echo_agent().run('three', conversation=branched, usage_limits=NO_LIMITS)
    await store.save(result)
    assert await stored_texts(store, 'c') == ['one', 'ack one after 0', 'three', 'ack three after 2']


async def test_fork_shares_entries_and_leaves_the_original(store: Any) -> None:
    await turn(store, 'c', 'one')
    await turn(store, 'c', 'two')
    entries = await store.load_entries('c')
    fork = await store.fork('c', at=2, new_conversation_id='f')
    assert texts(fork.messages) == ['one', 'ack one after 0']
    assert [e.id for e in await store.load_entries('f')] == [e.id for e in entries[:2]]
    await turn(store, 'f', 'elsewhere')
    assert await stored_texts(store, 'c') == ['one', 'ack one after 0', 'two', 'ack two after 2']
    assert await stored_texts(store, 'f') == ['one', 'ack one after 0', 'elsewhere', 'ack elsewhere after 2']
    record = next(r for r in await store.list_conversations() if r.conversation_id == 'f')
    assert (record.forked_from, record.forked_at) == ('c', entries[1].id)
    with pytest.raises(ConversationConflict):
        await store.fork('c', new_conversation_id='f')


async def test_scope_keeps_a_conversation_to_its_owner(store: Any) -> None:
    await turn(store, 'c', 'mine', scope='alice')
    await turn(store, 'other', 'theirs', scope='bob')
    assert await store.load('c', scope='bob') is None  # invisible to another scope
    assert await store.load('c', scope='alice') is not None
    assert [r.conversation_id for r in await store.list_conversations(scope='alice')] == ['c']
    loaded = await store.load('c')
    with pytest.raises(ConversationConflict):  # saved with another scope
        await store.save(loaded, scope='bob')
    await store.delete('c', scope='bob')  # not bob's: left alone
    assert await store.load('c') is not None
    with pytest.raises(Exception, match='not in the store'):
        await store.fork('c', source_scope='bob')
    await store.delete('c', scope='alice')
    assert await store.load('c') is None
    assert await stored_texts(store, 'other') == ['theirs', 'ack theirs after 0']


async def test_delete_removes_what_no_fork_reaches(store: Any) -> None:
    await turn(store, 'c', 'one')
    await turn(store, 'c', 'two')
    entries = await store.load_entries('c')
    await store.fork('c', at=2, new_conversation_id='f')
    await store.put_artifacts('notes', {'c': 'of c'}, conversation_id='c')
    await store.put_artifacts('notes', {'shared': 'of nobody'})

    await store.delete('c')
    assert await store.load('c') is None
    assert await store.list_conversations() != []
    assert await store.get_artifact('notes', 'c') is None  # owned by c: deleted with it
    assert (await store.get_artifact('notes', 'shared')) is not None
    with pytest.raises(LookupError):  # only c reached its second turn
        await store.read_entry(entries[3].id)
    # The fork keeps the history it shares.
    assert await stored_texts(store, 'f') == ['one', 'ack one after 0']
    await turn(store, 'f', 'more')

    await store.delete('f')
    for entry in entries[:2]:  # now nothing reaches them
        with pytest.raises(LookupError):
            await store.read_entry(entry.id)
    assert await store.list_conversations() == []
    await store.delete('f')  # deleting twice is harmless


async def test_concurrent_saves_of_one_revision_conflict(store: Any) -> None:
    await turn(store, 'c', 'one')
    a = await store.load('c')
    b = await store.load('c')
    result_a = await echo_agent().run('from a', conversation=a, usage_limits=NO_LIMITS)
    result_b = await echo_agent().run('from b', conversation=b, usage_limits=NO_LIMITS)
    await store.save(result_a)
    with pytest.raises(ConversationConflict):
        await store.save(result_b)
    with pytest.raises(ConversationConflict):  # a new conversation under a taken id
        await store.save(Conversation(conversation_id='c'))
    assert await stored_texts(store, 'c') == ['one', 'ack one after 0', 'from a', 'ack from a after 2']


async def test_a_closed_store_refuses_every_call(store: Any) -> None:
    await turn(store, 'c', 'one')
    await store.aclose()
    await store.aclose()  # closing twice is harmless
    calls = [
        lambda: store.load('c'),
        lambda: store.save(Conversation(conversation_id='d')),
        lambda: store.list_conversations(),
        lambda: store.fork('c'),
        lambda: store.delete('c'),
        lambda: store.read_entry('e'),
        lambda: store.get_artifact('notes', 'k'),
        lambda: store.put_artifacts('notes', {'k': 'v'}),
        lambda: store.artifact_keys('notes'),
        lambda: store.delete_artifacts('notes'),
    ]
    for call in calls:  # never a silently empty store
        with pytest.raises(StoreError, match='closed'):
            await call()


async def test_list_is_newest_first_and_limited(store: Any) -> None:
    for cid in ('a', 'b', 'c'):
        await turn(store, cid, cid)
    await turn(store, 'a', 'again')
    assert [r.conversation_id for r in await store.list_conversations()] == ['a', 'c', 'b']
    assert [r.conversation_id for r in await store.list_conversations(limit=2)] == ['a', 'c']


async def test_the_three_backends_agree_on_a_random_workload(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """One seeded sequence of turns, branches, forks, rewrites and deletes; every backend ends the same."""

    async def workload(store: Any) -> dict[str, Any]:
        rng = random.Random(11)
        for step in range(40):
            cid = rng.choice(['a', 'b', 'c'])
            op = rng.choice(['turn', 'turn', 'turn', 'branch', 'fork', 'rewrite', 'delete'])
            loaded = await store.load(cid)
            if op == 'turn' or loaded is None:
                await turn(store, cid, f's{step}')
            elif op == 'branch':
                await store.branch(
                    cid, at=rng.randrange(len(loaded.messages) + 1), expected_revision=loaded.revision
                )
            elif op == 'fork':
                with contextlib.suppress(ConversationConflict):
                    await store.fork(
                        cid, at=rng.randrange(len(loaded.messages) + 1), new_conversation_id=f'{cid}{step}'
                    )
            elif op == 'rewrite':
                kept = loaded.messages[: rng.randrange(len(loaded.messages) + 1)]
                await store.save(
                    Conversation(
                        messages=[*kept, ModelRequest(parts=[UserPromptPart(f'r{step}')])],
                        conversation_id=cid,
                        revision=loaded.revision,
                    )
                )
            else:
                await store.delete(cid)
        state: dict[str, Any] = {}
        for record in await store.list_conversations():
            branches = [texts([e.message for e in await store.read_history(tip)]) for tip in record.branches]
            state[record.conversation_id] = (
                await stored_texts(store, record.conversation_id),
                branches,
                record.forked_from,
                record.usage.requests,
            )
        return state

    results = []
    for kind in BACKENDS:
        async with make_store(kind, tmp_path, request) as store:  # type: ignore[attr-defined]
            results.append(await workload(store))
    assert results[0] == results[1] == results[2]
    assert len(results[0]) >= 3


# --- what only the databases do -----------------------------------------------------------------


@contextlib.contextmanager
def raw_sqlite(path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


async def raw_sql(store: Any, sql: str, *args: Any) -> None:
    """Run SQL behind the store's back (to damage it); table names are the SQLite ones."""
    if isinstance(store, SqliteConversationStore):
        with raw_sqlite(Path(store.path)) as conn:
            conn.execute(sql.replace('%s', '?'), args)
        return
    import psycopg

    sql = sql.replace('conversation_entries', 'pydantic_ai_conversation_entries').replace(
        'UPDATE conversations', 'UPDATE pydantic_ai_conversations'
    )
    async with await psycopg.AsyncConnection.connect(store.url, autocommit=True) as conn:
        await conn.execute(sql.encode(), args)


async def test_a_corrupt_row_names_its_conversation_and_entry(sql_store: Any) -> None:
    await turn(sql_store, 'chat', 'one')
    entries = await sql_store.load_entries('chat')
    await turn(sql_store, 'other', 'fine')
    await raw_sql(
        sql_store,
        'UPDATE conversation_entries SET message = %s WHERE entry_id = %s',
        '{"kind": "nope"}',
        entries[1].id,
    )
    with pytest.raises(StoreError) as caught:
        await sql_store.load('chat')
    assert (caught.value.conversation_id, caught.value.entry_id) == ('chat', entries[1].id)
    assert f"conversation 'chat': entry '{entries[1].id}' is not a valid pydantic-ai message" in str(
        caught.value
    )
    assert await stored_texts(sql_store, 'other') == ['fine', 'ack fine after 0']  # others stay readable

    await raw_sql(
        sql_store, "UPDATE conversations SET record = %s WHERE conversation_id = 'other'", '{"usage": 1}'
    )
    with pytest.raises(StoreError, match=r"conversation 'other': its record is not a valid") as caught:
        await sql_store.load('other')
    assert caught.value.conversation_id == 'other'

    await raw_sql(sql_store, 'DELETE FROM conversation_entries WHERE entry_id = %s', entries[0].id)
    with pytest.raises(
        StoreEntryMissing, match=f"entry '{entries[0].id}', the parent of entry '{entries[1].id}'"
    ):
        await sql_store.read_history(entries[1].id)


async def test_ids_that_cannot_be_stored_are_refused_alike(store: Any) -> None:
    for bad in ('\udc80lone', 'nul\x00'):
        with pytest.raises(StoreError, match='conversation id'):
            await turn(store, bad, 'hi')
    assert await store.list_conversations() == []


async def test_deeply_nested_tool_arguments_round_trip(store: Any) -> None:
    # pydantic-core writes ~255 levels of JSON but reads only 200: the store must read back what it wrote.
    nested: dict[str, Any] = {}
    for _ in range(240):
        nested = {'a': nested}
    message = ModelResponse(parts=[ToolCallPart('t', nested, tool_call_id='deep')])
    await store.save(
        Conversation(messages=[ModelRequest(parts=[UserPromptPart('go')]), message], conversation_id='c')
    )
    loaded = await store.load('c')
    assert loaded.messages[1] == message
    too_deep: dict[str, Any] = {}
    for _ in range(400):
        too_deep = {'a': too_deep}
    with pytest.raises(StoreError, match=r"conversation 'c': new message 0 .* cannot be serialized"):
        await store.save(
            Conversation(
                messages=[*loaded.messages, ModelResponse(parts=[ToolCallPart('t', too_deep)])],
                conversation_id='c',
                revision=loaded.revision,
            )
        )


async def test_read_history_is_one_query(tmp_path: Path) -> None:
    async with SqliteConversationStore(tmp_path / 'c.db') as store:
        for i in range(5):
            await turn(store, 'c', f't{i}')
        head = (await store.load_entries('c'))[-1].id
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        history = await store.read_history(head)
        assert len(history) == 10
        assert len(statements) == 1
        assert 'WITH RECURSIVE' in statements[0]
        assert len(await store.read_history(head, limit=3)) == 3


async def test_sqlite_file_is_private_wal_and_fully_synced(tmp_path: Path) -> None:
    path = tmp_path / 'c.db'
    store = SqliteConversationStore(path)
    assert not path.exists()  # lazy: nothing opened by the constructor
    async with store:
        await turn(store, 'c', 'hi')
        assert store._conn.execute('PRAGMA journal_mode').fetchone()[0] == 'wal'
        assert store._conn.execute('PRAGMA synchronous').fetchone()[0] == 2  # FULL
        assert oct(stat.S_IMODE(path.stat().st_mode)) == '0o600'


async def test_a_session_store_file_migrates_to_hold_conversations(tmp_path: Path) -> None:
    path = tmp_path / 'old.db'
    async with SqliteStore(path, migrations=MIGRATIONS[:1]) as old:  # a file from before conversations
        await old.append('s', [ModelRequest(parts=[UserPromptPart('kept')])])
    async with SqliteConversationStore(path) as store:
        await turn(store, 'c', 'new')
        assert await stored_texts(store, 'c') == ['new', 'ack new after 0']
    async with SqliteStore(path) as sessions:  # one file serves both
        assert texts(await sessions.load('s')) == ['kept']
    with raw_sqlite(path) as conn:
        assert conn.execute('PRAGMA user_version').fetchone()[0] == SCHEMA_VERSION == 2


async def test_a_newer_schema_is_refused(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    path = tmp_path / 'future.db'
    async with SqliteConversationStore(path) as store:
        await store.list_conversations()
    with raw_sqlite(path) as conn:
        conn.execute(f'PRAGMA user_version = {SCHEMA_VERSION + 1}')
    async with SqliteConversationStore(path) as store:
        with pytest.raises(
            StoreError, match=f'schema version {SCHEMA_VERSION + 1}, newer than version {SCHEMA_VERSION}'
        ):
            await store.load('c')

    url = request.getfixturevalue('postgres_url')
    async with PostgresConversationStore(url) as store:
        await turn(store, 'c', 'hi')
    upgraded = (*POSTGRES_MIGRATIONS, 'ALTER TABLE pydantic_ai_conversations ADD COLUMN title text')
    async with PostgresConversationStore(url, migrations=upgraded) as store:
        assert await stored_texts(store, 'c') == ['hi', 'ack hi after 0']
    async with PostgresConversationStore(url) as store:
        with pytest.raises(StoreError, match='schema version 2, newer than version 1') as caught:
            await store.load('c')
        assert 'postgres@' in str(caught.value)


async def test_open_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(open_store('memory://'), MemoryConversationStore)
    sqlite = open_store(f'sqlite:///{tmp_path}/x.db?synchronous=normal&timeout=2')
    assert isinstance(sqlite, SqliteConversationStore)
    assert (sqlite.path, sqlite.synchronous, sqlite.timeout) == (f'{tmp_path}/x.db', 'normal', 2.0)
    assert open_store('sqlite:///relative.db').path == 'relative.db'
    pg = open_store('postgresql://app:s3cret@db.internal:5433/chat', max_size=3)
    assert isinstance(pg, PostgresConversationStore)
    assert pg.max_size == 3
    assert pg.where == 'PostgreSQL app@db.internal:5433/chat'
    assert 's3cret' not in repr(pg.where)
    for bad in (
        'mysql://u:s3cret@h/db',
        'sqlite://host/x.db',
        'sqlite:///',
        'memory://x',
        'sqlite:///x.db?mode=ro',
    ):
        with pytest.raises(StoreError) as caught:
            open_store(bad)
        assert 's3cret' not in str(caught.value)
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_STORE_URL', f'sqlite:///{tmp_path}/env.db')
    assert open_store().path == f'{tmp_path}/env.db'
    monkeypatch.delenv('PYDANTIC_AI_CONTEXT_STORE_URL')
    assert open_store().path == 'conversations.db'


def test_open_store_urls_as_users_write_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('HOME', str(tmp_path))
    assert open_store('sqlite:///~/chat.db').path == f'{tmp_path}/chat.db'  # not ./~/chat.db
    assert open_store('sqlite:///chat%231.db').path == 'chat#1.db'
    with pytest.raises(StoreError, match='%23'):  # not silently chat.db
        open_store('sqlite:///chat#1.db')
    for bad in ('nan', '-1', 'inf'):
        with pytest.raises(StoreError, match='timeout'):
            open_store(f'sqlite:///chat.db?timeout={bad}')
    with pytest.raises(StoreError, match=r"'postgresql\+asyncpg://\*\*\*@db.internal/chat'") as caught:
        open_store('postgresql+asyncpg://app:s3cret@db.internal/chat')  # the scheme shown, the password not
    assert 's3cret' not in str(caught.value)


async def test_postgres_unreachable_is_a_clear_store_error(tmp_path: Path) -> None:
    url = f'postgresql://app:s3cret@/nowhere?host={tmp_path}&port=1'
    async with PostgresConversationStore(url, timeout=1) as store:
        with pytest.raises(StoreError, match=r'PostgreSQL app@.*/nowhere: cannot connect') as caught:
            await store.load('c')
        assert 's3cret' not in str(caught.value)
    with pytest.raises(StoreError, match='closed'):
        await store.load('c')


async def test_postgres_closed_while_connecting_keeps_no_connection(postgres_url: str) -> None:
    """`aclose` while the first call opens the pool: the call fails as closed and no connection stays open."""
    import psycopg

    store = open_store(postgres_url, timeout=5)
    loading = asyncio.create_task(store.load('c'))
    await asyncio.sleep(0)  # the load is now opening the pool
    await store.aclose()
    with pytest.raises(StoreError, match='closed'):
        await loading
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for _ in range(100):  # a closed connection's server process takes a moment to exit
            row = conn.execute(
                'SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()'
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            await asyncio.sleep(0.05)
        assert row is not None
        assert row[0] == 0


# --- docs ----------------------------------------------------------------------------------------


def docstring_examples() -> list[Any]:
    if not HAS_CONVERSATION_STORE:
        return []
    from pydantic_ai_context.store.urls import open_store as open_store_function

    return [SqliteConversationStore, PostgresConversationStore, MemoryConversationStore, open_store_function]


@pytest.mark.parametrize('obj', docstring_examples(), ids=lambda o: o.__name__)
def test_docstring_example_runs(obj: Any) -> None:
    import inspect
    import re
    import textwrap

    doc = inspect.getdoc(obj) or ''
    assert doc.split('\n')[0].endswith('.'), 'the docstring opens with one sentence'
    [block] = re.findall(r'```python[^\n]*\n(.*?)```', doc, flags=re.DOTALL)
    exec(compile(textwrap.dedent(block), f'<{obj.__name__} example>', 'exec'), {'__name__': 'example'})


@needs_conversation_store
async def test_a_conversation_store_that_cannot_open_says_what_it_is(tmp_path: Path) -> None:
    store = open_store(f'sqlite:///{tmp_path / "missing-dir" / "c.db"}')
    with pytest.raises(StoreError, match='cannot open conversation store') as raised:
        await store.load('c1')
    assert 'session store' not in str(raised.value)
    await store.close()
