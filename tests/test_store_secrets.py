"""No store URL's secret is ever printed (issue 23, item 3; issue 24, item 4).

A table of hostile URLs: the secret must never appear in a store's `repr`, in a `StoreError`'s
text, in its `__cause__` / `__context__` chain, or in any log record at any level. A URL that
cannot be read fails at once with a clear `StoreError`; a PostgreSQL server that refuses (a role or
database that does not exist) fails at once naming why, not after the pool's timeout.
"""

from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from pydantic_ai_context.errors import StoreError
from pydantic_ai_context.settings import ContextSettings
from pydantic_ai_context.store._compat import HAS_CONVERSATION_STORE
from pydantic_ai_context.store._redact import conninfo_pairs, redact_url, scrub

from ._postgres import PostgresServer

if HAS_CONVERSATION_STORE:
    from pydantic_ai_context import open_store

needs_conversation_store = pytest.mark.skipif(
    not HAS_CONVERSATION_STORE, reason='ConversationStore needs pydantic-ai 2.66+'
)

SECRET = 'Zq9SeCrEt'

# (url, what happens: 'store' = a store is built (connects lazily), 'error' = StoreError at once)
HOSTILE: list[tuple[str, str]] = [
    (f'postgresql://app:{SECRET}@db.internal/chat', 'store'),
    (f'POSTGRESQL://app:{SECRET}@db.internal/chat', 'store'),  # libpq cannot parse it as given
    (f'Postgres://app:{SECRET}@db.internal:5433/chat?sslmode=require', 'store'),
    (f'postgresql:app:{SECRET}', 'error'),
    (f'postgresql://app:pa/{SECRET}@db/chat', 'error'),
    (f'postgresql://app:pa?{SECRET}@db/chat', 'error'),
    (f'postgresql://app:pa#{SECRET}@db/chat', 'error'),
    (f'postgresql://app:pa@{SECRET}@db/chat', 'error'),  # an unencoded '@': libpq would take it for the host
    (f'postgresql://app:{SECRET}%2Fx@db/chat', 'store'),
    (f'postgresql://db/chat?password={SECRET}', 'store'),
    (f'postgresql://db/chat?sslpassword={SECRET}&sslmode=require', 'store'),
    (f'postgresql://app:{SECRET}@db:notaport/chat', 'error'),
    (f'postgresql://app:{SECRET}@[::1/chat', 'error'),
    (f'host=db password={SECRET} dbname=chat', 'pg-store'),
    (f"host=db password='{SECRET} with spaces' dbname=chat", 'pg-store'),
    (f'host=db password={SECRET} port=notanumber', 'pg-error'),
    (f"host=db password='{SECRET}", 'pg-error'),  # an unterminated quote
    (f'host=db password={SECRET} dbname=chat', 'error'),  # open_store takes URLs only
    (f'postgresql+asyncpg://app:{SECRET}@db.internal/chat', 'error'),
    (f'mysql://app:{SECRET}@h/db', 'error'),
    (f'sqlite://app:{SECRET}@host/x.db', 'error'),
    (f'sqlite:///x.db?timeout={SECRET}', 'error'),
    (f'sqlite:///x.db?synchronous={SECRET}', 'error'),
    (f'sqlite:///x.db?{SECRET}=1', 'error'),
    (f'sqlite:///x.db#{SECRET}', 'error'),
    (f'sqlite://[{SECRET}/x.db', 'error'),
    (f'memory://app:{SECRET}@', 'error'),
    (f'memory://{SECRET}', 'error'),
    (SECRET, 'error'),
    (f'postgresql://app:{SECRET}@db/chat?{SECRET}', 'error'),  # a bare query word: libpq refuses it
]


def texts_of(exc: BaseException | None) -> list[str]:
    """The text of an exception, its chain (`__cause__`, `__context__`) and its formatted traceback."""
    out: list[str] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out += [str(exc), repr(exc), ''.join(traceback.format_exception_only(exc))]
        out += [str(getattr(exc, 'path', '') or '')]
        exc = exc.__cause__ or exc.__context__
    return out


def assert_secret_hidden(texts: list[str], caplog: pytest.LogCaptureFixture, secret: str = SECRET) -> None:
    for text in texts:
        assert secret not in text
    for record in caplog.records:
        assert secret not in record.getMessage()
        if record.exc_info:
            assert secret not in ''.join(traceback.format_exception(*record.exc_info))


def test_the_table_has_twenty_plus_hostile_urls() -> None:
    assert len(HOSTILE) >= 20


@needs_conversation_store
@pytest.mark.parametrize(('url', 'outcome'), HOSTILE, ids=range(len(HOSTILE)))
async def test_a_hostile_url_never_shows_its_secret(
    url: str, outcome: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    build: Any = open_store
    if outcome.startswith('pg-'):
        from pydantic_ai_context.store import PostgresConversationStore as build

    if outcome.endswith('error'):
        with pytest.raises(StoreError) as caught:
            build(url)
        assert time.monotonic() - started < 1, 'a URL that cannot be read fails at once'
        assert_secret_hidden(texts_of(caught.value), caplog)
        return
    store = build(url, timeout=1)
    assert_secret_hidden([repr(store), str(store), getattr(store, 'where', '')], caplog)
    await store.aclose()
    assert_secret_hidden([], caplog)


def test_the_reproducer_repr_shows_no_password() -> None:
    if not HAS_CONVERSATION_STORE:
        pytest.skip('ConversationStore needs pydantic-ai 2.66+')
    store = open_store('postgresql://app:PW@host/db')
    assert 'PW' not in repr(store)
    assert repr(store) == (
        "PostgresConversationStore(where='PostgreSQL app@host/db', min_size=1, max_size=10, timeout=10.0)"
    )


@pytest.mark.parametrize(
    ('url', 'shown'),
    [
        (
            'postgresql://app:pa/ss@db:5432/chat?sslmode=require&password=x',
            'postgresql://***@db:5432/chat?sslmode=require&password=***',
        ),
        ('host=db password=PW dbname=chat', 'host=db password=*** dbname=chat'),
        ("host=db password='P W' dbname=chat", 'host=db password=*** dbname=chat'),
        ('postgresql:app:PW', 'postgresql:*** (unparsable)'),
        ('sqlite:///x.db?timeout=PW', 'sqlite:///x.db?timeout=***'),
        ('sqlite:///x.db?PW', 'sqlite:///x.db?***'),
        ('memory://', 'memory://'),
        ('postgresql://[::1/db', 'postgresql://*** (unparsable)'),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_conninfo_is_read_by_libpq_rules() -> None:
    assert list(conninfo_pairs(r"host = db  password='a \'b c' port=5432")) == [
        ('host', 'db'),
        ('password', "a 'b c"),
        ('port', '5432'),
    ]
    with pytest.raises(ValueError):
        list(conninfo_pairs('host'))
    assert (
        scrub('failed for "pa%2Fss" and pa/ss', 'postgresql://app:pa%2Fss@db/chat')
        == 'failed for "***" and ***'
    )


def test_settings_never_show_the_store_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('PYDANTIC_AI_CONTEXT_STORE_URL', f'postgresql://app:{SECRET}@db/chat')
    settings = ContextSettings.load()
    assert settings.store_url is not None
    assert settings.store_url.get_secret_value() == f'postgresql://app:{SECRET}@db/chat'
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings.model_dump())
    assert SECRET not in settings.model_dump_json()


# --- a real server --------------------------------------------------------------------------------


def server_url(postgres: PostgresServer, *, user: str, db: str, password: str = SECRET) -> str:
    return f'postgresql://{user}:{password}@/{db}?host={postgres.dir}&port={postgres.port}'


@needs_conversation_store
@pytest.mark.parametrize(
    ('user', 'db', 'cause'),
    [
        ('nobody', 'postgres', 'role "nobody" does not exist'),
        ('postgres', 'no_such_db', 'database "no_such_db" does not exist'),
    ],
)
async def test_a_server_that_refuses_fails_fast_naming_why(
    postgres: PostgresServer, user: str, db: str, cause: str, caplog: pytest.LogCaptureFixture
) -> None:
    # It waited out the pool's 10 s and said "pool initialization incomplete after 10.0 sec".
    caplog.set_level(logging.DEBUG)
    store = open_store(server_url(postgres, user=user, db=db), timeout=10)
    started = time.process_time(), time.monotonic()
    with pytest.raises(StoreError) as caught:
        await store.load('c')
    assert time.monotonic() - started[1] < 5
    assert cause in str(caught.value)
    assert 'pool initialization incomplete' not in str(caught.value)
    assert_secret_hidden(texts_of(caught.value), caplog)
    await store.aclose()


@needs_conversation_store
async def test_an_unreachable_server_waits_its_timeout_and_shows_no_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = f'postgresql://app:{SECRET}@/chat?host={tmp_path}&port=1&sslpassword={SECRET}'
    async with open_store(url, timeout=1) as store:
        with pytest.raises(StoreError, match='cannot connect') as caught:
            await store.load('c')
    assert_secret_hidden(texts_of(caught.value), caplog)


@needs_conversation_store
async def test_a_good_url_with_a_password_still_works(
    postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Trust authentication: the password is sent and ignored; every call works, nothing shows it.
    caplog.set_level(logging.DEBUG)
    password = 'p%40ss%2Fw%3Frd%23'  # p@ss/w?rd#, percent-encoded as a URL needs it
    url = server_url(postgres, user='postgres', db='postgres', password=password)
    async with open_store('POSTGRESQL' + url.removeprefix('postgresql'), timeout=5) as store:
        assert await store.load('nothing-here') is None
        assert 'p%40ss' not in repr(store)
    assert_secret_hidden([], caplog, secret='p%40ss')
    assert_secret_hidden([], caplog, secret='p@ss/w?rd#')
