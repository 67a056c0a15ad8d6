"""Save and load throughput of the stores, on conversations (sessions) of 10k messages.

Usage: `python bench/store_throughput.py [--messages 10000] [--batch 100] [--postgres-url URL]`

The session stores (`MemoryStore`, `SqliteStore`) append; the pydantic-ai conversation stores
(`MemoryConversationStore`, `SqliteConversationStore`, `PostgresConversationStore`, pydantic-ai
2.66+) `save` a `Conversation` grown by one message, or by a batch, at a time (each save checks the
revision and appends only the new messages), and `load` reads the whole history (one recursive
query). Messages are taken, in order and repeated, from the recorded trajectories in
`tests/data/trajectories` (about 2.5 kB of JSON each), or built synthetically when those are
absent. Every SQLite store writes to a fresh file in a temporary directory. PostgreSQL: the
database at `--postgres-url`, else a throwaway server started from the PostgreSQL binaries on the
machine (as `tests/_postgres.py` does), with `fsync=off`: the numbers measure this package and the
round trips, not the disk.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import itertools
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_ai import __version__ as pydantic_ai_version
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from rich.console import Console
from rich.table import Table

from pydantic_ai_context.store import MemoryStore, SessionStore, SqliteStore
from pydantic_ai_context.store._compat import HAS_CONVERSATION_STORE

TRAJECTORIES = Path(__file__).resolve().parents[1] / 'tests' / 'data' / 'trajectories'


def sample_messages(n: int) -> tuple[list[ModelMessage], str]:
    files = sorted(TRAJECTORIES.glob('*.json')) if TRAJECTORIES.is_dir() else []
    pool: list[ModelMessage] = []
    for path in files:
        pool.extend(ModelMessagesTypeAdapter.validate_json(path.read_bytes()))
    source = f'{len(files)} recorded trajectories'
    if not pool:
        source = 'synthetic messages'
        for i in range(40):
            pool += [
                ModelResponse(
                    parts=[
                        TextPart(f'step {i}'),
                        ToolCallPart('read', {'path': f'f{i}.py'}, tool_call_id=f'c{i}'),
                    ]
                ),
                ModelRequest(parts=[ToolReturnPart('read', 'x = 1\n' * 300, tool_call_id=f'c{i}')]),
            ]
        pool.insert(0, ModelRequest(parts=[UserPromptPart('fix the bug')]))
    return list(itertools.islice(itertools.cycle(pool), n)), source


@dataclass
class Row:
    store: str
    single: float
    batched: float
    load: float
    load_ms: float
    file_mb: float | None


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def measure(
    name: str, make: Callable[[], SessionStore], messages: list[ModelMessage], batch: int
) -> Row:
    async with make() as store:

        async def one_per_transaction() -> None:
            for message in messages:
                await store.append('single', [message])

        async def batched() -> None:
            for start in range(0, len(messages), batch):
                await store.append('batched', messages[start : start + batch])

        n = len(messages)
        single = await timed(one_per_transaction)
        batched_s = await timed(batched)
        # best of three: the first load also warms the OS page cache
        loads = [await timed(lambda: store.load('batched')) for _ in range(3)]
        assert len(await store.load('single')) == n
        path = getattr(store, 'path', None)
    # measured after close: the WAL has been checkpointed into the main file (both sessions, 2 x n)
    size = Path(path).stat().st_size / 1e6 if path else None
    return Row(name, n / single, n / batched_s, n / min(loads), min(loads) * 1e3, size)


async def measure_conversations(
    name: str, make: Callable[[], Any], messages: list[ModelMessage], batch: int
) -> Row:
    from pydantic_ai.conversation import Conversation

    async with make() as store:

        async def save_every(step: int, cid: str) -> None:
            conversation = Conversation(conversation_id=cid)
            for start in range(0, len(messages), step):
                conversation.messages.extend(messages[start : start + step])
                await store.save(conversation)

        n = len(messages)
        single = await timed(lambda: save_every(1, 'single'))
        batched_s = await timed(lambda: save_every(batch, 'batched'))
        loads = [await timed(lambda: store.load('batched')) for _ in range(3)]
        loaded = await store.load('single')
        assert loaded is not None
        assert len(loaded.messages) == n
        path = getattr(store, 'path', None)
    size = Path(path).stat().st_size / 1e6 if path else None
    return Row(name, n / single, n / batched_s, n / min(loads), min(loads) * 1e3, size)


@contextlib.contextmanager
def postgres_url(given: str | None) -> Iterator[str]:
    if given:
        yield given
        return
    spec = importlib.util.spec_from_file_location('_postgres', TRAJECTORIES.parents[1] / '_postgres.py')
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.PostgresServer()
    server.start()
    try:
        yield server.url()
    finally:
        server.destroy()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument('--messages', type=int, default=10_000, help='messages per session (default 10000)')
    parser.add_argument('--batch', type=int, default=100, help='messages per batched append (default 100)')
    parser.add_argument(
        '--postgres-url', help='a PostgreSQL database to use (default: start a throwaway server)'
    )
    args = parser.parse_args()

    messages, source = sample_messages(args.messages)
    json_kb = len(ModelMessagesTypeAdapter.dump_json(messages)) / len(messages) / 1e3
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(await measure('MemoryStore', MemoryStore, messages, args.batch))
        for synchronous in ('full', 'normal'):
            make = functools.partial(SqliteStore, Path(tmp) / f'{synchronous}.db', synchronous=synchronous)
            rows.append(
                await measure(f"SqliteStore(synchronous='{synchronous}')", make, messages, args.batch)
            )
        if HAS_CONVERSATION_STORE:
            from pydantic_ai_context import open_store

            rows.append(
                await measure_conversations(
                    'MemoryConversationStore', lambda: open_store('memory://'), messages, args.batch
                )
            )
            for synchronous in ('full', 'normal'):
                url = f'sqlite:///{tmp}/conversations-{synchronous}.db?synchronous={synchronous}'
                rows.append(
                    await measure_conversations(
                        f"SqliteConversationStore(synchronous='{synchronous}')",
                        functools.partial(open_store, url),
                        messages,
                        args.batch,
                    )
                )
            with postgres_url(args.postgres_url) as url:
                rows.append(
                    await measure_conversations(
                        'PostgresConversationStore', functools.partial(open_store, url), messages, args.batch
                    )
                )

    table = Table(
        title=f'Store throughput: {len(messages):,} messages ({source}, {json_kb:.1f} kB JSON each), '
        f'pydantic-ai {pydantic_ai_version}'
    )
    table.add_column('store', no_wrap=True)
    table.add_column('save, 1 msg/txn\nmsg/s', justify='right')
    table.add_column(f'save, {args.batch} msg/txn\nmsg/s', justify='right')
    table.add_column('load\nmsg/s', justify='right')
    table.add_column(f'load {len(messages):,}\nms', justify='right')
    table.add_column('file\nMB', justify='right')
    for row in rows:
        table.add_row(
            row.store,
            f'{row.single:,.0f}',
            f'{row.batched:,.0f}',
            f'{row.load:,.0f}',
            f'{row.load_ms:,.0f}',
            '-' if row.file_mb is None else f'{row.file_mb:,.1f}',
        )
    Console(width=120).print(table)


if __name__ == '__main__':
    asyncio.run(main())
