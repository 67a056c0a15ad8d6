"""The first compile of a resumed `ContextSession`, with and without the token counts it stored.

A session over a SQLite store is written once per shape (its log added, one view compiled, the
session closed, which stores its counts). Each measurement is then a new process, as a restarted
service is: it opens the session and compiles its first view (the log read for the first time,
tokenising included), then `--requests` more, each after the model's answer and the next tool
result are added. "without" deletes the stored counts first, in a copy of the database.

    python bench/resume.py                    # every shape of bench/overhead.py but interleaved, 5,000 messages
    python bench/resume.py --shape chat-tools --size 20000

CPU is `time.process_time` (every thread of the process: the compile's own worker threads too);
the table gives the median of `--repeat` runs, with and without alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead
from pydantic_ai_context import SqliteStore, TiktokenCounter, profile
from pydantic_ai_context.session import ContextSession
from pydantic_ai_context.session._counts import TOKEN_COUNTS_NAMESPACE

SHAPES = ('tool-loop', 'chat-tools', 'long-notes', 'observations')
SESSION = 'bench'


def _profile(preset: str, window: int, counter: TiktokenCounter | None = None) -> object:
    counter = counter if counter is not None else TiktokenCounter()
    return profile(preset, context_window=window, counter=counter, summary_model=overhead.stub_summariser())


def _view_digest(view: list[ModelMessage]) -> str:
    """The view's digest, timestamps left out (messages the chain makes are stamped when made)."""
    dumped = ModelMessagesTypeAdapter.dump_python(view, mode='json')

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != 'timestamp'}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return hashlib.blake2b(json.dumps(strip(dumped)).encode(), digest_size=8).hexdigest()


async def _write(db: Path, shape: str, size: int, requests: int, preset: str, window: int) -> None:
    log = overhead.shape_logs(shape, size)
    async with SqliteStore(db) as store:
        session = ContextSession(_profile(preset, window), store=store, session_id=SESSION)  # type: ignore[arg-type]
        await session.add_messages(log[: len(log) - 2 * requests])  # type: ignore[arg-type]
        await session.messages_for_request()
        await session.close()


async def _resume(
    db: Path, shape: str, size: int, requests: int, preset: str, window: int
) -> dict[str, object]:
    log = overhead.shape_logs(shape, size)
    counter = TiktokenCounter()
    encoded = [0]
    count = counter._count

    def counting(text: str) -> int:
        encoded[0] += len(text)
        return count(text)

    counter._count = counting
    async with SqliteStore(db) as store:
        session = await ContextSession.open(store, SESSION, profile=_profile(preset, window, counter))  # type: ignore[arg-type]
        started, cpu = time.perf_counter(), time.process_time()
        view = await session.messages_for_request()
        first = {
            'wall': time.perf_counter() - started,
            'cpu': time.process_time() - cpu,
            'encoded': encoded[0],
        }
        steady: list[float] = []
        start = len(log) - 2 * requests
        for k in range(requests):
            await session.add_messages(log[start + 2 * k : start + 2 * k + 2])  # type: ignore[arg-type]
            cpu = time.process_time()
            await session.messages_for_request()
            steady.append((time.process_time() - cpu) * 1000)
        await session.close()
    return {**first, 'steady': steady, 'view': _view_digest(view)}


def _child(argv: Sequence[str]) -> None:
    kind, db, shape, size, requests, preset, window = argv
    args = (Path(db), shape, int(size), int(requests), preset, int(window))
    if kind == 'write':
        asyncio.run(_write(*args))
    else:
        print(json.dumps(asyncio.run(_resume(*args))))


def _run(
    kind: str, db: Path, shape: str, size: int, requests: int, preset: str, window: int
) -> dict[str, object]:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            '--child',
            kind,
            str(db),
            shape,
            str(size),
            str(requests),
            preset,
            str(window),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out) if out.strip() else {}


async def _without_counts(source: Path, target: Path) -> None:
    shutil.copyfile(source, target)
    async with SqliteStore(target) as store:
        await store.delete_artifacts(TOKEN_COUNTS_NAMESPACE)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--child', nargs=7, help=argparse.SUPPRESS)
    parser.add_argument('--shape', action='append', choices=SHAPES, help='shape(s) (default: all four)')
    parser.add_argument('--size', type=int, default=5000, help='messages in the log')
    parser.add_argument('--requests', type=int, default=15, help='steady requests after the first compile')
    parser.add_argument('--repeat', type=int, default=3, help='runs per cell (median)')
    parser.add_argument('--profile', default='coding')
    parser.add_argument('--window', type=int, default=128_000)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0
    table = Table(
        title=f'Resumed session, {args.profile} at {args.window // 1000}k: first compile and steady requests'
    )
    for column in (
        'shape',
        'messages',
        'first CPU s (stored counts)',
        'first CPU s (without)',
        'first wall s (stored / without)',
        'MB encoded (stored / without)',
        'steady CPU ms p50 / p95',
        'same view',
    ):
        table.add_column(column, justify='right')
    # The session is written and closed first (its counts stored), with SQLite's WAL checkpointed on
    # close, so a copy of the file is the whole database.
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shape or SHAPES:
            db, bare = Path(tmp) / f'{shape}.db', Path(tmp) / f'{shape}-bare.db'
            common = (shape, args.size, args.requests, args.profile, args.window)
            _run('write', db, *common)
            pristine = Path(tmp) / f'{shape}-pristine.db'
            shutil.copyfile(db, pristine)
            runs: dict[str, list[dict[str, object]]] = {'stored': [], 'without': []}
            for _ in range(args.repeat):
                # Each run starts from the database as written: a resumed session stores what it counted.
                shutil.copyfile(pristine, db)
                runs['stored'].append(_run('resume', db, *common))
                asyncio.run(_without_counts(pristine, bare))
                runs['without'].append(_run('resume', bare, *common))

            def median(kind: str, key: str, runs: dict[str, list[dict[str, object]]] = runs) -> float:
                return statistics.median(float(r[key]) for r in runs[kind])  # type: ignore[arg-type]

            steady = sorted(ms for r in runs['stored'] for ms in r['steady'])  # type: ignore[attr-defined]
            p95 = steady[min(len(steady) - 1, round(0.95 * (len(steady) - 1)))]
            views = {r['view'] for kind in runs for r in runs[kind]}
            table.add_row(
                shape,
                f'{args.size:,}',
                f'{median("stored", "cpu"):.2f}',
                f'{median("without", "cpu"):.2f}',
                f'{median("stored", "wall"):.2f} / {median("without", "wall"):.2f}',
                f'{median("stored", "encoded") / 1e6:.1f} / {median("without", "encoded") / 1e6:.1f}',
                f'{statistics.median(steady):.1f} / {p95:.1f}',
                'yes' if len(views) == 1 else f'no ({len(views)})',
            )
            print(
                shape,
                {kind: [(round(float(r['cpu']), 2)) for r in rs] for kind, rs in runs.items()},
                flush=True,
            )  # type: ignore[arg-type]
    Console(width=160).print(table)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
