"""How long a compile holds its event loop: the longest gap a 10 ms heartbeat sees while compiling.

Usage: `python bench/loop_stall.py [--profile coding ...] [--window 128000] [--big-mb 30] [--messages 50000]`

A heartbeat coroutine on the same loop sleeps 10 ms at a time and records how late each tick is.
While it runs, one profile compiles, on that loop:

- `big output`: a short tool loop whose newest tool result is `--big-mb` MB of shell output (first
  compile, then the next request);
- `long log`: a `--messages`-message tool loop (`bench/overhead.py`'s history, with outputs of
  1,300 characters: a tenth of that benchmark's), its first compile, then one steady compile with
  two more messages;
- `many runs`: a 5,000-message chat with a tool-using assistant (a user turn every 8 rounds), first
  compile, then one steady compile.

- `long log, collector held`: the long log's first compile again, with the collector held by the
  application around it (`--held`, below).

The table reports the longest stall (the latest tick past its 10 ms), the compile's wall time and
its CPU time, and the objects the garbage collector tracks besides the (frozen) log, per message of
the log: what a full collection walks, holding the GIL, whichever thread it runs in. Work the
library runs in a worker thread (`_offload`) does not hold the loop; a thread holding the GIL still
delays the loop by up to Python's switch interval (5 ms) at a time.

`--held` adds what an application can do that a library must not (see docs/architecture.md): hold
the collector while the first compile of a long log runs (`gc.disable()`), then move what is alive
into the permanent generation (`gc.freeze()`) and let it run again (`gc.enable()`). No full
collection walks the first read's objects, then or later; the cost is that nothing alive at the
freeze is ever collected as a cycle.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from overhead import chat_with_tools_history, stub_summariser, synthetic_history
from pydantic_ai_context import TiktokenCounter, profile

TICK = 0.010


async def _heartbeat(stop: asyncio.Event, lateness: list[float]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(TICK)
        lateness.append(time.perf_counter() - started - TICK)


async def stall_of(compile_once: object) -> tuple[float, float, float]:
    """(longest stall ms, wall ms, CPU ms) of awaiting `compile_once()` beside a heartbeat."""
    stop = asyncio.Event()
    lateness: list[float] = []
    beat = asyncio.create_task(_heartbeat(stop, lateness))
    await asyncio.sleep(TICK * 2)  # the heartbeat is ticking
    lateness.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    await compile_once()  # type: ignore[operator]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await asyncio.sleep(TICK * 2)  # the tick that was due during the compile lands
    stop.set()
    await beat
    return max(lateness, default=0.0) * 1000, wall * 1000, cpu * 1000


def big_output_log(megabytes: int) -> list[ModelMessage]:
    log = synthetic_history(41)
    line = 'tests/test_core.py::test_case PASSED [ 42%] src/pkg/core.py:120: value checked\n'
    output = line * (megabytes * 1_000_000 // len(line))
    log.append(
        ModelResponse(parts=[ToolCallPart('execute_bash', {'command': 'pytest -v'}, tool_call_id='big')])
    )
    log.append(ModelRequest(parts=[ToolReturnPart('execute_bash', output, tool_call_id='big')]))
    return log


async def _held_compile(compiled: Any, log: list[ModelMessage]) -> None:
    """The application's side of `--held`: no collection while the first read runs, and none
    that walks what it built afterwards."""
    gc.disable()
    try:
        await compiled.compile(log)
    finally:
        gc.freeze()
        gc.enable()


async def cases(
    name: str, window: int, big_mb: int, n_messages: int, *, held: bool = False
) -> list[tuple[str, str, float, float, float, float]]:
    rows: list[tuple[str, str, float, float, float, float]] = []
    shapes: Sequence[tuple[str, list[ModelMessage]]] = (
        (f'big output ({big_mb} MB)', big_output_log(big_mb)),
        (f'long log ({n_messages:,} messages)', synthetic_history(n_messages, output_chars=1_300)),
        ('many runs (5,000 messages)', chat_with_tools_history(5_000)),
    )
    if held:  # new objects: the process-wide memos know the first long log's by identity
        log = synthetic_history(n_messages, output_chars=1_300)
        shapes = (*shapes, (f'long log ({n_messages:,}), collector held', log))
    for label, log in shapes:
        gc.collect()
        gc.freeze()
        compiled = profile(
            name, context_window=window, counter=TiktokenCounter(), summary_model=stub_summariser()
        )
        first, then = log[:-2], log
        for when, part in (('first compile', first), ('next request', then)):
            hold = label.endswith('collector held') and when == 'first compile'
            run = (
                functools.partial(_held_compile, compiled, part)
                if hold
                else functools.partial(compiled.compile, part)
            )
            stall, wall, cpu = await stall_of(run)
            # What the collector walks in a full collection besides the (frozen) log: the profile's
            # state and the view, per message.
            tracked = len(gc.get_objects()) / len(log)
            rows.append((label, when, stall, wall, cpu, tracked))
        await compiled.close_background()
        gc.unfreeze()
    return rows


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--profile', action='append', help='preset(s) (default: coding)')
    parser.add_argument('--window', type=int, default=128_000)
    parser.add_argument('--big-mb', type=int, default=30)
    parser.add_argument('--messages', type=int, default=50_000)
    parser.add_argument(
        '--held', action='store_true', help='also the long log with the collector held by the application'
    )
    args = parser.parse_args(argv)
    table = Table(title=f'Longest event-loop stall while compiling (heartbeat every {TICK * 1000:.0f} ms)')
    columns = ('profile', 'history', 'compile', 'longest stall ms', 'wall ms', 'CPU ms', 'tracked / message')
    for column in columns:
        table.add_column(column, justify='left' if column in columns[:3] else 'right')
    for name in args.profile or ['coding']:
        for label, when, stall, wall, cpu, tracked in await cases(
            name, args.window, args.big_mb, args.messages, held=args.held
        ):
            table.add_row(
                name, label, when, f'{stall:,.0f}', f'{wall:,.0f}', f'{cpu:,.0f}', f'{tracked:,.0f}'
            )
    Console(width=160).print(table)
    return 0


if __name__ == '__main__':
    raise SystemExit(asyncio.run(main()))
