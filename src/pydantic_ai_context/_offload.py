"""Heavy work off the event loop: new content measured in a worker thread first, and a long log's
synchronous work run in the worker thread (`StepRunner`).

A compile is `async`, but its steps are synchronous Python. Most of a steady compile is small (the
folds resume from the previous one), but measuring *new* content is not: tokenising a 30 MB tool
result, or every message of a long log read for the first time, holds the loop for seconds, and
every other conversation on it waits (DESIGN invariant 13). Nor is a steady compile of tens of
thousands of messages (tens to hundreds of milliseconds).

`warm_off_loop` runs before the steps. It finds the newest messages the token counter has not
counted (walking back from the end to the first it has: at a steady compile, the one or two a run
just added) and, when their text is at least `OFFLOAD_CHARS` characters, counts them in a worker
thread (`asyncio.to_thread`; tiktoken releases the GIL while it encodes), per message and per
part (what the compaction frontier weighs), together with the read-back archive's fingerprints.
All are memoised per object, so the steps that follow find them and measure nothing again: the
view is the same either way, only where the work ran differs. Smaller new content is measured on
the loop as before (a thread hop costs more than it saves).

`StepRunner` then runs the compile's own synchronous work (normalizing, this package's synchronous
policies, the archive and the gauge) in the worker thread when the log is long, much of it is
unread, or its new content is large; on the loop otherwise.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from pydantic_ai.messages import ModelMessage

from . import _parts
from .policies._base import SyncPolicy
from .policies._frontier import part_text_tokens
from .tokens import TokenCounter, _MessageCounter

__all__ = ('OFFLOAD_CHARS', 'OFFLOAD_MESSAGES', 'StepRunner', 'new_messages', 'warm_off_loop')

T = TypeVar('T')

OFFLOAD_CHARS: Final = 200_000
"""New text (characters) from which a compile measures it in a worker thread: about 50 ms of
tokenising on one core, the most a compile holds its loop for at a time by design."""
OFFLOAD_MESSAGES: Final = 2_000
"""Log length (messages) from which a compile runs its synchronous work in a worker thread: a
steady compile of a longer log costs more than a few milliseconds (it grows with the log's
finished runs and its view), and a first read of one costs seconds."""


def new_messages(counter: _MessageCounter, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The newest messages `counter` has not counted, oldest first (the tail after the last it has)."""
    memo = counter._memo
    found: list[ModelMessage] = []
    for message in reversed(messages):
        if memo.get(message) is not None:
            break
        found.append(message)
    found.reverse()
    return found


def _large(messages: Sequence[ModelMessage], threshold: int) -> bool:
    """Whether the text of `messages` has at least `threshold` characters (newest first, stopping there)."""
    total = 0
    for message in reversed(messages):
        for part in message.parts:
            total += len(_parts.part_text(part))
        instructions = getattr(message, 'instructions', None)
        if instructions:
            total += len(instructions)
        if total >= threshold:
            return True
    return False


def _measure(
    counter: _MessageCounter, messages: Sequence[ModelMessage], also: Callable[[ModelMessage], Any] | None
) -> None:
    for message in messages:
        counter._entry(message)
        for part in message.parts:  # what `compaction_frontier` weighs, counted per part
            part_text_tokens(part, counter)
        if also is not None:
            also(message)


async def warm_off_loop(
    counter: TokenCounter,
    messages: Sequence[ModelMessage],
    *,
    also: Callable[[ModelMessage], Any] | None = None,
    threshold: int | None = None,
    fresh: Sequence[ModelMessage] | None = None,
) -> bool:
    """Count the new messages of `messages` in a worker thread when their text is large; `also` is
    called on each there too (the archive's fingerprint). `fresh`: `new_messages(counter,
    messages)`, when the caller has it. Whether it ran off the loop."""
    if not isinstance(counter, _MessageCounter) or not messages:
        return False
    if fresh is None:
        fresh = new_messages(counter, messages)
    if not fresh or not _large(fresh, OFFLOAD_CHARS if threshold is None else threshold):
        return False
    await asyncio.to_thread(_measure, counter, fresh, also)
    return True


_WORKER: Final = ThreadPoolExecutor(max_workers=1, thread_name_prefix='pydantic-ai-context')
"""The thread compiles run their work in: one for the process, so the state a compile reads (memos,
folds) stays in one core's caches from one call to the next, as it does on the loop. Python runs
one thread at a time anyway, and a profile's work runs one call at a time under its lock."""


@dataclass(eq=False)
class StepRunner:
    """Where one compile runs its synchronous work: on the loop, or, `off_loop`, in a worker thread.

    The work of one profile runs one call at a time, under the profile's `lock`: its policies keep
    state between calls (the previous call to extend, folds, plans), and while a compile's work is
    in a worker thread, another compile on the loop must not run the same policies. A call that
    finds the lock held waits for it in the worker thread (`_WORKER`), never on the loop. The calls
    of one compile are the points where other compiles may run, as before: between steps.
    """

    lock: threading.Lock
    off_loop: bool

    def takes(self, step: Any) -> bool:
        # This package's synchronous policies only: pure functions of their input and context,
        # safe in a worker thread; a user's processor runs where pydantic-ai would run it.
        return isinstance(step, SyncPolicy)

    async def call(self, work: Callable[[], T]) -> T:
        if not self.off_loop and self.lock.acquire(blocking=False):
            try:
                return work()
            finally:
                self.lock.release()
        context = contextvars.copy_context()  # the compile's scope, as `asyncio.to_thread` passes it
        return await asyncio.get_running_loop().run_in_executor(_WORKER, context.run, self._locked, work)

    def _locked(self, work: Callable[[], T]) -> T:
        with self.lock:
            return work()
