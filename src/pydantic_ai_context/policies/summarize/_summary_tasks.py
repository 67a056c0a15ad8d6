"""The registry of summaries made ahead: the background tasks one profile runs, and what became of them.

`BackgroundSummaries` holds at most one summary in flight per conversation (`Pending`: the span it
covers, by log positions), the summaries made and not yet used (`Made`), and the counts and
`summary_discarded` events of what happened to them; it cancels its tasks when their run ends,
when the session closes, when the profile is garbage-collected and at interpreter exit. What to
summarise ahead, and when, is decided in `_summary_ahead.py`; the registry only runs the write
it is handed and keeps the books.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from pydantic_ai_context.events import CompactionEvent
from pydantic_ai_context.policies.summarize._summary_block import Zones, digest_text
from pydantic_ai_context.views import CompileContext

__all__ = ('BackgroundSummaries', 'Made', 'Pending', 'cancel', 'compile_running')

logger = logging.getLogger('pydantic_ai_context.summary_ahead')

_REGISTRIES: weakref.WeakSet[BackgroundSummaries] = weakref.WeakSet()

_COMPILE_DONE: ContextVar[asyncio.Event | None] = ContextVar('pydantic_ai_context_compile_done', default=None)
"""Set when the compile running in this task returns (see `compile_running`)."""


@contextlib.contextmanager
def compile_running() -> Iterator[None]:
    """A profile's compile runs inside: a summary it starts ahead begins writing once it returns.

    The compile's synchronous work may run in a worker thread, leaving the loop free; a summary
    started ahead would then build its prompt (and an in-process summariser answer) during the
    compile, and the request waiting for the view would wait for that work too. Written after
    the compile, it overlaps the model's answer instead, as it is meant to. Nothing in a compile
    waits for a summary in flight (it cancels one it cannot use), so this never deadlocks.
    """
    done = asyncio.Event()
    token = _COMPILE_DONE.set(done)
    try:
        yield
    finally:
        _COMPILE_DONE.reset(token)
        done.set()


@dataclass
class Pending:
    task: asyncio.Task[None] | None
    conversation: str
    run_id: str | None
    cache_key: str
    start_log: int
    end_log: int
    base_digest: str | None
    estimate: int
    """Input tokens of the call, estimated (reported if it is cancelled mid-call)."""
    policy: str
    log_digest: str | None = None
    """Digest of the canonical log's messages from `start_log` to `end_log` (the span's identity)."""
    context: CompileContext | None = None
    """The task's own compile context (the prompt's size is noted there before the call)."""
    interim: str = ''
    """The marker an interim view shows for this span until the summary lands (filed in the cache)."""
    abandoned: bool = False
    """Its task runs on another event loop than the compiles now do: given up (see `BackgroundSummaries`)."""


@dataclass
class Made:
    input_tokens: int
    output_tokens: int
    run_id: str | None
    covers: int
    policy: str
    span: Pending | None = None
    """What the summary covers, by log positions (see `adopt`)."""
    text: str = ''


@dataclass(eq=False)
class BackgroundSummaries:
    """The summaries one profile writes ahead, in the background: at most one in flight per conversation.

    A profile owns one (a `ContextSession` its copy's); policies reach it through
    `CompileContext.background`. `stats()` counts what happened.

    A task belongs to the event loop that started it. When the profile is next used on another
    loop (a sync wrapper keeping one loop per thread, a loop closed since), a summary still in
    flight on the first is given up: cancelled on its own loop (thread-safely, when that loop is
    still open), counted as cancelled and reported discarded, so the conversation starts it again
    on the running loop; `close()` and the others work from any loop.
    """

    _pending: dict[str, Pending] = field(default_factory=dict[str, Pending])
    _made: dict[str, Made] = field(default_factory=dict[str, Made])
    _events: list[CompactionEvent] = field(default_factory=list[CompactionEvent])
    _counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ('started', 'made', 'used', 'discarded', 'failed', 'cancelled', 'waited'), 0
        )
    )
    _abandoned: list[asyncio.Task[None]] = field(default_factory=list[asyncio.Task[None]])
    """Tasks given up on another loop, until they finish (cancelled with the rest at exit)."""
    _prompted: int = 0
    """Tokens of the prompts of the calls made ahead that answered (counted here) ..."""
    _reported: int = 0
    """... and the input tokens the summariser reported for them (its own unit)."""
    waited_seconds: float = 0.0
    """Seconds compiles spent waiting for a summary made in them (only a view over the limit waits)."""
    _made_now: bool = False

    def __post_init__(self) -> None:
        _REGISTRIES.add(self)

    def stats(self) -> dict[str, int]:
        """Summaries started, made, used, discarded, failed and cancelled; compiles that waited."""
        return dict(self._counts)

    def pending(self) -> int:
        """Summaries in flight."""
        self._claim()
        return sum(1 for p in self._pending.values() if p.task is not None and not p.task.done())

    def in_flight(self, conversation: str) -> Pending | None:
        """The summary started for `conversation` and not yet finished (its task may be done)."""
        self._claim()
        return self._pending.get(conversation)

    def spans(self) -> list[Pending]:
        """The summaries started and not yet finished, for every conversation."""
        self._claim()
        return list(self._pending.values())

    def made(self) -> list[Made]:
        """The summaries made ahead and not yet used."""
        return list(self._made.values())

    def _claim(self) -> None:
        """Give up the summaries in flight on another event loop than the running one (none runs:
        nothing to tell)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return
        for pending in list(self._pending.values()):
            task = pending.task
            if task is not None and task.get_loop() is not running:
                self._abandon(pending, task)
        self._abandoned = [task for task in self._abandoned if not task.done()]

    def _abandon(self, pending: Pending, task: asyncio.Task[None]) -> None:
        if self._pending.get(pending.conversation) is pending:
            del self._pending[pending.conversation]
        pending.abandoned = True
        if task.done():
            return  # it finished on its loop, whose done callbacks have not run yet: nothing was made
        loop = task.get_loop()
        with contextlib.suppress(RuntimeError):  # its loop is closed: nothing runs it any more
            loop.call_soon_threadsafe(task.cancel)
        self._abandoned.append(task)
        self._counts['cancelled'] += 1
        self._discard(
            pending.policy,
            pending.run_id,
            self._cancelled_input(pending),
            0,
            'cancelled: it was being written on another event loop than the compiles now run on',
        )

    def waited(self, seconds: float, *, filed: bool = True) -> None:
        """A compile waited `seconds` for a summary made in it (summaries made ahead: the view was
        over the limit with every summary already made); `filed`: the summary (or its rejection)
        is in the cache now."""
        self._counts['waited'] += 1
        self.waited_seconds += seconds
        self._made_now = self._made_now or filed

    def made_in_compile(self) -> bool:
        """Whether a compile filed a summary it waited for (`waited`) since the last call."""
        made, self._made_now = self._made_now, False
        return made

    def take_events(self) -> list[CompactionEvent]:
        """The `summary_discarded` events not yet delivered (the profile sends them to its handlers)."""
        events, self._events = self._events, []
        return events

    # --- starting and finishing ---------------------------------------------------------------

    def start(
        self,
        pending: Pending,
        write: Callable[[CompileContext], Awaitable[tuple[str, str]]],
        zones: Zones,
        context: CompileContext,
    ) -> None:
        """Run `write` (the summary of `pending`'s span) in a background task with a compile
        context of its own, the one in flight for its conversation."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - compiles always run in a loop
            return
        own = dataclasses.replace(context, originals=None, _notes=[], _details={})
        pending.context = own
        self._pending[pending.conversation] = pending
        self._counts['started'] += 1
        pending.task = loop.create_task(self._run(write, pending, zones, own, _COMPILE_DONE.get()))
        pending.task.add_done_callback(lambda task: self._finished(pending, task))

    def _finished(self, pending: Pending, task: asyncio.Task[None]) -> None:
        # A done callback, so that a task cancelled before it ever ran is accounted for too.
        if pending.abandoned:
            return  # accounted for when it was given up
        if self._pending.get(pending.conversation) is pending:
            del self._pending[pending.conversation]
        if task.cancelled():
            self._counts['cancelled'] += 1
            self._discard(
                pending.policy,
                pending.run_id,
                self._cancelled_input(pending),
                0,
                'cancelled while the summariser was writing it (input tokens estimated)',
            )

    def _cancelled_input(self, pending: Pending) -> int:
        """Input tokens of a call cancelled mid-way, in the unit the summariser reports: its prompt's
        tokens scaled by what it reported for the prompts of the calls that answered (the span's
        tokens when the prompt was not written yet)."""
        details = pending.context._details if pending.context is not None else {}
        prompted = details.get('summary_prompt_tokens')
        if not isinstance(prompted, int):
            return pending.estimate
        if self._prompted and self._reported:
            return round(prompted * self._reported / self._prompted)
        return prompted

    async def _run(
        self,
        write: Callable[[CompileContext], Awaitable[tuple[str, str]]],
        pending: Pending,
        zones: Zones,
        context: CompileContext,
        after: asyncio.Event | None = None,
    ) -> None:
        try:
            if after is not None:
                await after.wait()
            text, status = await write(context)
            if pending.abandoned:
                return  # given up while it was being written (its loop ran on in another thread)
            details = context._details
            calls = int(details.get('summary_calls') or 0)
            tokens_in = int(details.get('summary_input_tokens') or 0)
            tokens_out = int(details.get('summary_output_tokens') or 0)
            prompted = details.get('summary_prompt_tokens')
            if calls and tokens_in and isinstance(prompted, int) and prompted:
                self._prompted += prompted
                self._reported += tokens_in
            if status == 'summary' and calls:
                self._made[digest_text(text)] = Made(
                    tokens_in,
                    tokens_out,
                    pending.run_id,
                    pending.end_log - zones.head_log,
                    pending.policy,
                    span=pending,
                    text=text,
                )
                self._counts['made'] += 1
            elif status != 'summary':
                self._counts['failed'] += 1
                # While the summariser's breaker is open every attempt fails the same way: its
                # opening was logged once (see `SummaryCalls.write`).
                level = logging.DEBUG if details.get('breaker_open') else logging.WARNING
                logger.log(
                    level, 'a summary made ahead failed (%s); the trigger will summarise', context._notes
                )
                if calls or tokens_in:
                    self._discard(
                        pending.policy, pending.run_id, tokens_in, tokens_out, 'the summary was rejected'
                    )
        except Exception:
            self._counts['failed'] += 1
            logger.exception('a summary made ahead failed; the run goes on')

    def _discard(self, policy: str, run_id: str | None, tokens_in: int, tokens_out: int, why: str) -> None:
        self._counts['discarded'] += 1
        self._events.append(
            CompactionEvent(
                policy=policy,
                reason=f'summary_discarded: {why}',
                messages_before=0,
                messages_after=0,
                details={
                    'summary_discarded': 1,
                    'summary_calls': 1,
                    'summary_input_tokens': tokens_in,
                    'summary_output_tokens': tokens_out,
                },
                run_id=run_id,
            )
        )

    def _drop_made(self, run_id: str | None, *, every: bool, why: str) -> None:
        for digest, made in list(self._made.items()):
            if every or made.run_id == run_id:
                del self._made[digest]
                self._discard(made.policy, made.run_id, made.input_tokens, made.output_tokens, why)

    async def end_run(self, run_id: str | None) -> None:
        """The run ended: cancel its summary in flight, report its unused summaries as discarded."""
        self._claim()
        tasks = [p.task for p in self._pending.values() if p.run_id == run_id and p.task is not None]
        await cancel(tasks)
        self._drop_made(run_id, every=False, why='made ahead, unused when its run ended')

    async def settle(self) -> None:
        """Wait for every summary in flight to land or fail, cancelling none (a replay's model answer)."""
        self._claim()
        live = [p.task for p in self._pending.values() if p.task is not None and not p.task.done()]
        if live:
            await asyncio.gather(*live, return_exceptions=True)

    async def close(self) -> None:
        """Cancel every summary in flight and report every unused one as discarded (session close, replay end)."""
        self._claim()
        await cancel([p.task for p in self._pending.values() if p.task is not None])
        self._drop_made(None, every=True, why='made ahead, never used')

    def cancel_now(self) -> None:
        """Cancel every task without waiting (the profile was garbage-collected, the interpreter exits)."""
        for task in [p.task for p in self._pending.values() if p.task is not None]:
            if not task.done():
                with contextlib.suppress(RuntimeError):  # its loop is closed: nothing runs it any more
                    task.cancel()
        for task in self._abandoned:
            if not task.done():
                with contextlib.suppress(RuntimeError):
                    task.get_loop().call_soon_threadsafe(task.cancel)

    def used(self, text: str, context: CompileContext) -> None:
        """The summary `text` is in the view: if it was made ahead, note its usage on this compile."""
        made = self._made.pop(digest_text(text), None)
        if made is None:
            return
        self._counts['used'] += 1
        details = context._details
        context.note(
            f'used the summary of {made.covers} messages made ahead',
            summary_ahead=int(details.get('summary_ahead', 0)) + 1,
            summary_calls=int(details.get('summary_calls', 0)) + 1,
            summary_input_tokens=int(details.get('summary_input_tokens', 0)) + made.input_tokens,
            summary_output_tokens=int(details.get('summary_output_tokens', 0)) + made.output_tokens,
        )


async def cancel(tasks: Sequence[asyncio.Task[None]]) -> None:
    live = [t for t in tasks if not t.done()]
    for task in live:
        task.cancel()
    if live:
        await asyncio.gather(*live, return_exceptions=True)


@atexit.register
def _cancel_at_exit() -> None:
    """No summary task is left pending at interpreter exit: cancel them and let their loop finish them."""
    for registry in list(_REGISTRIES):
        tasks = [p.task for p in registry._pending.values() if p.task is not None and not p.task.done()]
        for task in [*tasks, *(t for t in registry._abandoned if not t.done())]:
            loop = task.get_loop()
            with contextlib.suppress(RuntimeError):
                task.cancel()
                if not loop.is_closed() and not loop.is_running():
                    loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
