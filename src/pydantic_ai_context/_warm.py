"""The first read of a long log, in pieces that yield: the chain's synchronous steps run on growing
prefixes of the log before the compile, so the compile itself resumes from them.

A compile's steps are synchronous Python. Read for the first time (a resumed session, a process
restart, a conversation this profile has not seen), a log of tens of thousands of messages takes
seconds; the compile runs that work in the worker thread (`_offload.StepRunner`), one call per
piece, so other conversations on the same profile are compiled between pieces rather than after
the whole read.
Every step is made to resume from its previous call when the log only grew (folds, `LastCall`,
memos per message), and what it then returns is what a fresh pass returns. So `warm_prefixes` runs
the leading synchronous steps (up to the first step that is not a synchronous `Policy`: a
summariser, a user's processor) on prefixes of the log that end on a request, each about
`PIECE_SECONDS` of work, one `work.call` each; the compile that follows finds each
step's previous call one piece behind and only reads the last piece. The view is the same either way.

The pieces run inside the compile's scope (the same generation) with the compile's context, the
read-back sink included: what a step kept for read-back while reading a prefix is kept as the
compile itself would (a step that extends its previous output does not keep it again). Notes are
dropped: the compile's own steps note what they did.

A prefix is not a request anyone sends: a step may refuse it (a prefix whose newest steps the whole
log would isolate into a finished run's record may not fit the budget, and `fit_to_budget` raises).
Then the reading stops there and the compile reads the rest itself, so what it returns or raises is
what a compile that read the log at once returns or raises.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest

from ._compaction import window
from .integrity import normalize
from .policies._base import SyncPolicy
from .views import CompileContext, Policy, SyncWork

__all__ = ('PIECE_SECONDS', 'WARM_MESSAGES', 'warm_prefixes')

logger = logging.getLogger('pydantic_ai_context.profiles')

WARM_MESSAGES: Final = 1_000
"""New messages (not yet counted by the compile's counter) from which a compile reads the log in pieces."""
PIECE_SECONDS: Final = 0.05
"""About how long each piece holds the loop: the piece grows or shrinks to stay near it."""
MAX_PIECES: Final = 100
"""The most pieces a log is read in: reading a prefix costs about what a steady compile of it costs
before its new messages (tens of milliseconds at thousands of messages), so more, shorter pieces
would multiply that cost without holding the loop for much less."""


def warmable(steps: Sequence[Any]) -> list[Policy]:
    """The leading steps that are synchronous policies of this package (safe to run ahead: pure
    functions of their input and context)."""
    out: list[Policy] = []
    for step in steps:
        if not (isinstance(step, SyncPolicy) and isinstance(step, Policy)):
            break
        out.append(step)
    return out


async def warm_prefixes(
    messages: Sequence[ModelMessage],
    steps: Sequence[Any],
    context: CompileContext,
    *,
    unread: int,
    work: SyncWork | None = None,
) -> int:
    """Run the leading synchronous `steps` on growing prefixes of `messages` that end among its
    `unread` newest messages (call inside the compile's scope), yielding to the loop after each;
    returns how many prefixes were read. `work`: where each piece runs (one call each, so other
    compiles of the profile may run between pieces); by default on the loop."""
    policies = warmable(steps)
    if not policies:
        return 0
    # Prefixes past what was read before and short of the whole log (the compile reads that),
    # each ending on a request.
    first = max(0, len(messages) - unread)
    cuts = [i + 1 for i in range(first, len(messages) - 1) if isinstance(messages[i], ModelRequest)]
    piece_seconds = PIECE_SECONDS
    floor = max(1, unread // MAX_PIECES)
    piece = floor
    done = first
    at = 0
    read = 0
    while at < len(cuts):
        # The furthest cut within a piece of the last prefix read, or at least the next one.
        nxt = max(bisect.bisect_right(cuts, done + piece) - 1, at)
        prefix = messages[: cuts[nxt]]
        try:
            if work is None:
                spent = _timed(prefix, policies, context)
            else:
                spent = await work.call(functools.partial(_timed, prefix, policies, context))
        except Exception as exc:  # reading ahead never decides what the compile returns or raises
            logger.debug('stopped reading the log in pieces at %d messages: %r', cuts[nxt], exc)
            return read
        added = cuts[nxt] - done
        done, at, read = cuts[nxt], nxt + 1, read + 1
        # The next piece takes about `piece_seconds` at this piece's cost per message (the work per
        # message varies along a log), and never fewer messages than the floor.
        piece = max(floor, int(added * piece_seconds / max(spent, 1e-6)))
        await asyncio.sleep(0)
    return read


def _timed(prefix: Sequence[ModelMessage], policies: Sequence[Policy], context: CompileContext) -> float:
    started = time.perf_counter()
    _run(prefix, policies, context)
    return time.perf_counter() - started


def _run(prefix: Sequence[ModelMessage], policies: Sequence[Policy], context: CompileContext) -> None:
    piece_context = CompileContext(
        counter=context.counter,
        budget=context.budget,
        run_id=context.run_id,
        run_context=context.run_context,
        model=context.model,
        log=prefix,
        originals=context.originals,
        background=None,
    )
    view = normalize(list(window(prefix)))
    for policy in policies:
        out = policy.apply(list(view), piece_context)
        assert isinstance(out, list)  # a synchronous policy (`warmable`)
        piece_context._take_notes()
        view = normalize(out)
