"""Durability of the SQL conversation stores: concurrent worker processes, writers killed mid-save, a database restart."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import __version__ as pydantic_ai_version

from pydantic_ai_context.errors import StoreError
from pydantic_ai_context.store._compat import HAS_CONVERSATION_STORE

from ._conversation_worker import NO_LIMITS, echo_agent, prompt_of
from ._postgres import PostgresServer

if HAS_CONVERSATION_STORE:
    from pydantic_ai.conversation import Conversation

    from pydantic_ai_context import open_store
    from pydantic_ai_context.store import PostgresConversationStore

pytestmark = pytest.mark.skipif(
    not HAS_CONVERSATION_STORE, reason=f'pydantic-ai {pydantic_ai_version} has no ConversationStore (2.66+)'
)

WORKER = Path(__file__).with_name('_conversation_worker.py')
ENV = {**os.environ, 'PYTHONPATH': os.pathsep.join(sys.path)}
TURN = re.compile(r'ack (?P<prompt>.+) after (?P<seen>\d+)')


@pytest.fixture(params=['sqlite', 'postgres'])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == 'sqlite':
        return f'sqlite:///{tmp_path / "conversations.db"}'
    return str(request.getfixturevalue('postgres_url'))


def stored_turns(url: str, cid: str) -> list[str]:
    return asyncio.run(load_turns(url, cid))


async def load_turns(url: str, cid: str) -> list[str]:
    """The prompts of `cid`'s turns, checking each answer saw exactly the history before it."""
    async with open_store(url) as store:
        conversation = await store.load(cid)
    messages = [] if conversation is None else conversation.messages
    assert len(messages) % 2 == 0, f'{cid}: a turn was stored in part'
    prompts: list[str] = []
    for index in range(0, len(messages), 2):
        prompt = prompt_of(messages[index])
        answer = TURN.fullmatch(str(messages[index + 1].parts[0].content))  # type: ignore[union-attr]
        assert prompt is not None, f'{cid}: message {index} is not a user turn'
        assert answer is not None, f'{cid}: message {index + 1} is not an answer'
        assert answer['prompt'] == prompt, f'{cid}: turn {index // 2} answers another prompt'
        # The run saw every message stored before it: no save was lost or overwritten.
        assert int(answer['seen']) == index, f'{cid}: turn {index // 2} ran on a stale history'
        prompts.append(prompt)
    return prompts


def test_four_worker_processes_own_and_share_conversations(url: str, tmp_path: Path) -> None:
    """4 processes x 20 runs on their own conversation, plus 20 each on one shared conversation.

    The shared saves retry on `ConversationConflict` (load again, run again): every acknowledged
    run must be stored exactly once, each on the whole history before it, in each writer's order.
    """
    runs = 20
    outdir = tmp_path / 'acks'
    outdir.mkdir()
    subprocess.run(
        [sys.executable, str(WORKER), 'share', url, '4', str(runs), str(outdir)],
        check=True,
        timeout=120,
        env=ENV,
    )
    acked: dict[str, list[str]] = {}
    conflicts = 0
    for w in range(4):
        for line in (outdir / f'{w}.jsonl').read_text().splitlines():
            ack = json.loads(line)
            acked.setdefault(ack['conversation'], []).append(ack['label'])
            conflicts += ack['conflicts']

    for w in range(4):
        assert stored_turns(url, f'own-{w}') == [f'w{w}-own-{w}-{i}' for i in range(runs)]
    shared = stored_turns(url, 'shared')
    assert sorted(shared) == sorted(acked['shared'])
    assert len(shared) == 4 * runs
    for w in range(4):
        mine = [label for label in shared if label.startswith(f'w{w}-')]
        assert mine == [f'w{w}-shared-{i}' for i in range(runs)]  # each writer's order kept
    print(f'{conflicts} conflicts retried')


def test_writers_killed_mid_save_lose_no_returned_save(url: str, tmp_path: Path) -> None:
    """SIGKILL a looping writer again and again; every turn whose save returned stays stored.

    The worker process imports once and forks a fresh writer per round, so the rounds spend their
    time saving. After each kill the conversation must load whole (every turn on the history
    before it) and hold every acknowledged turn, plus at most the one in flight.
    """
    rng = random.Random(7)
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), 'crash', url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert worker.stdin is not None
    assert worker.stdout is not None
    stored = 0
    acked_total = 0
    try:
        assert worker.stdout.readline() == 'ready\n'
        for round_ in range(8):
            out = tmp_path / f'writer-{round_}.out'
            worker.stdin.write(f'go {out}\n')
            worker.stdin.flush()
            pid = int(worker.stdout.readline().removeprefix('pid '))
            # Kill at a random point of the loop, once the writer is saving (opening takes a while
            # on a loaded machine, and a writer killed before its first save proves little).
            deadline = time.monotonic() + 30
            while not (out.exists() and '\n' in out.read_text()) and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.25))
            os.kill(pid, signal.SIGKILL)
            assert worker.stdout.readline() == 'reaped\n'

            *lines, _unterminated = out.read_text().split('\n') if out.exists() else ['']
            acked = [int(line) for line in lines]
            acked_total += len(acked)
            turns = stored_turns(url, 'crash')
            assert turns == [f'turn {i}' for i in range(len(turns))]
            floor = acked[-1] + 1 if acked else stored
            assert floor <= len(turns) <= floor + 1, (round_, acked[-3:], len(turns))
            stored = len(turns)
    finally:
        worker.kill()
        worker.wait()
        worker.stdin.close()
        worker.stdout.close()
    assert acked_total >= 8, 'every writer saved at least once before it was killed'


async def test_postgres_restart_mid_run(postgres: PostgresServer, postgres_url: str) -> None:
    """While the server is down a call raises a clear `StoreError`; once it is back the next save works."""
    agent = echo_agent()
    acked: list[int] = []

    async def save_turn(store: Any, i: int) -> None:
        conversation = await store.load('r') or Conversation(conversation_id='r')
        result = await agent.run(f'turn {i}', conversation=conversation, usage_limits=NO_LIMITS)
        await store.save(result)
        acked.append(i)

    async with PostgresConversationStore(postgres_url, timeout=2) as store:
        for i in range(3):
            await save_turn(store, i)

        postgres.stop()
        with pytest.raises(StoreError) as caught:
            await save_turn(store, 3)
        message = str(caught.value)
        assert message.startswith('PostgreSQL postgres@')
        assert "conversation 'r'" in message
        postgres.start()
        await save_turn(store, 3)  # the pool noticed the dead connections and made new ones

        # Now restart while saving: calls in flight may fail, only ever with StoreError.
        restarter = threading.Thread(target=postgres.restart)
        restarter.start()
        errors: list[StoreError] = []
        i = 4
        while restarter.is_alive() or len(acked) < 8:
            try:
                await save_turn(store, i)
            except StoreError as e:
                errors.append(e)
            i += 1
        restarter.join()
        assert all(str(e).startswith('PostgreSQL postgres@') for e in errors)

    turns = await load_turns(postgres_url, 'r')
    assert [f'turn {n}' for n in acked] == [t for t in turns if int(t.split()[1]) in acked]
    assert set(acked) <= {int(t.split()[1]) for t in turns}
