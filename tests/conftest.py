"""Shared fixtures: a real PostgreSQL server for the conversation-store tests (see `_postgres.py`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from ._postgres import PostgresServer


@pytest.fixture(scope='session')
def postgres() -> Iterator[PostgresServer]:
    """One throwaway server for the whole run; a server that cannot start fails the tests that need it."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.destroy()


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> Iterator[str]:
    """A fresh, empty database on the test server."""
    import psycopg

    name = f'test_{uuid.uuid4().hex[:12]}'
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE {name}')
    yield postgres.url(name)
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-xdist workers run with COLUMNS=80, which the command line honours for piped output:
    every test sees the same 160 columns unless it sets COLUMNS itself."""
    monkeypatch.delenv('COLUMNS', raising=False)
