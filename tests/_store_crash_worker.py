"""Appends batches to a `SqliteStore` until it is killed: the subject of the crash-safety test.

Usage: `python tests/_store_crash_worker.py DBPATH`.

Importing pydantic-ai costs most of a second, far longer than the test wants between kills, so
this process imports once, prints `ready`, and then forks one appender per stdin line
`go full|normal OUTFILE`. It prints `pid N` for the appender (the test SIGKILLs it) and `reaped`
once it is gone. The appender opens the store, writes `open N` (the log's length) to OUTFILE,
then appends batches of 1-4 messages forever, writing the new count after each append returns.
Message `i` of a batch starting at `start` is `crash_message(i, start, size)`, so the test can
check every stored message exactly and see that no batch was stored in part.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import threading
from datetime import UTC, datetime
from typing import Literal, TextIO

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)

SESSION = 'crash-test'
_STAMP = datetime(2025, 1, 1, tzinfo=UTC)


def crash_message(i: int, start: int, size: int) -> ModelMessage:
    """Message `i` of the batch `[start, start + size)`; its length varies so rows span pages."""
    label = f'{i}:{start}:{size}'
    padding = chr(ord('a') + i % 26) * ((i * 7919) % 3000)
    if i % 2 == 0:
        return ModelRequest(parts=[UserPromptPart(f'{label} {padding}', timestamp=_STAMP)])
    return ModelResponse(
        parts=[
            TextPart(label),
            ToolCallPart('write', {'i': i, 'padding': padding}, tool_call_id=f'call-{i}'),
        ],
        timestamp=_STAMP,
    )


def batch_of(message: ModelMessage) -> tuple[int, int, int]:
    """The `(i, start, size)` a `crash_message` was built from."""
    part = message.parts[0]
    text = part.content if isinstance(part, UserPromptPart | TextPart) else ''
    assert isinstance(text, str)
    i, start, size = (int(x) for x in text.split(' ', 1)[0].split(':'))
    return i, start, size


async def _append_forever(path: str, synchronous: Literal['full', 'normal'], out: TextIO) -> None:
    from pydantic_ai_context.store import SqliteStore

    store = SqliteStore(path, synchronous=synchronous)
    # the count, not a full load: opening stays quick however long the log has grown
    count = next((s.message_count for s in await store.sessions() if s.session_id == SESSION), 0)
    print(f'open {count}', file=out, flush=True)
    rng = random.Random()
    while True:
        size = rng.randint(1, 4)
        batch = [crash_message(count + k, count, size) for k in range(size)]
        count = await store.append(SESSION, batch)
        # flush = one write(2): once it returns, the line survives this process being killed
        print(count, file=out, flush=True)


def main() -> None:
    path = sys.argv[1]
    import pydantic_ai_context.store  # noqa: F401  (imported once, before forking)

    # fork is only safe while this process has no other threads
    assert threading.active_count() == 1
    print('ready', flush=True)
    for line in sys.stdin:
        _, synchronous, outfile = line.split()
        pid = os.fork()
        if pid == 0:
            with open(outfile, 'w') as out:
                asyncio.run(_append_forever(path, 'normal' if synchronous == 'normal' else 'full', out))
            os._exit(0)
        print(f'pid {pid}', flush=True)
        os.waitpid(pid, 0)
        print('reaped', flush=True)


if __name__ == '__main__':
    main()
