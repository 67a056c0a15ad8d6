"""Run boundaries, the clean conversation view, and the pipeline that compiles a reasoning view.

The canonical log is every message of every run. A *run* is one `agent.run(...)`: it starts
with the request holding the user's prompt and ends with the final answer. pydantic-ai 2.x
stamps `run_id` on each message, and then only a change of run id ends a run; for histories
without it (pydantic-ai 1.x before stamping, hand-built or converted logs) a run starts at a
request that holds a user prompt and no tool results, unless that prompt continues the task
(a reminder, a nudge, a repeated prompt: the rule is in `_boundaries`).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, runtime_checkable

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)

from ._boundaries import group_texts, request_group, run_prompt, starts_at
from ._compaction import window
from ._markers import OriginalsSink
from ._parts import has_user_prompt
from ._prefix import begins_with, equal_prefix
from ._scope import resumed_fold
from .budget import ContextBudget
from .events import CompactionEvent
from .integrity import Repair, check_messages, normalize_with_repairs
from .tokens import TokenCounter

__all__ = (
    'CompileContext',
    'Policy',
    'RunSpan',
    'Step',
    'compile_view',
    'conversation_view',
    'current_prompt',
    'current_run',
    'run_spans',
)


@dataclass(frozen=True, kw_only=True)
class RunSpan:
    """The messages of one agent run: `messages[start:end]`.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context import run_spans

        log = [
            ModelRequest(parts=[UserPromptPart('hi')]),
            ModelResponse(parts=[TextPart('hello')]),
            ModelRequest(parts=[UserPromptPart('bye')]),
        ]
        assert [(s.start, s.end) for s in run_spans(log)] == [(0, 2), (2, 3)]
        ```
    """

    start: int
    end: int
    run_id: str | None = None

    def __len__(self) -> int:
        return self.end - self.start

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and self.start <= index < self.end


def run_spans(messages: Sequence[ModelMessage]) -> list[RunSpan]:
    """Split a log into runs, by `run_id` where every request carries one, else by user prompts.

    With run ids only a change of run id is a boundary. Without them a user prompt (in a request
    with no tool results) starts a run unless it continues the task: it follows a response that
    called tools, repeats an earlier prompt, is a short reminder about the agent's output format,
    or is a bare "continue" (`_boundaries`). Messages before the first boundary (e.g. a leading
    system-prompt-only request) belong to the first run. An empty log has no runs.
    """
    check_messages(messages)
    if not messages:
        return []
    # During a compile, the runs of the previous list are resumed from its first changed message.
    return resumed_fold('views.runs', messages, _Runs, _Runs.spans)


class _Runs:
    """What `run_spans` reads of each message, as a fold: running counts of requests and of
    requests without a run id, where runs start by user prompt, and by run id."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.requests = [0]
        self.unnamed = [0]
        self.starts: list[int] = []
        """Where a run starts by user prompt (0 included)."""
        self.current: list[str | None] = []
        """The run id in force after each message (the latest one seen)."""
        self.changes: list[int] = []
        """Where a run starts by run id (the id differs from the one in force before)."""
        self.earlier: dict[str, int] = {}
        """Each prompt text seen, with where it first appeared (`_boundaries` rule 2)."""
        self.added: list[tuple[int, str]] = []
        """The entries of `earlier`, in the order they were added."""
        self.closed: list[RunSpan] = []
        """The spans of the runs that end where the next one starts, made once (a log of many
        runs is read by several steps of every compile)."""
        self.closed_by_id: list[RunSpan] = []
        """The same, for runs told apart by run id (one per change of id)."""

    def spans(self) -> list[RunSpan]:
        if self.requests[-1] and not self.unnamed[-1]:
            return _spans_by_run_id(self.messages, self)
        starts, closed = self.starts, self.closed
        for i in range(len(closed), len(starts) - 1):
            closed.append(RunSpan(start=starts[i], end=starts[i + 1]))
        if not starts:
            return []
        return [*closed, RunSpan(start=starts[-1], end=len(self.messages))]

    def truncate(self, n: int) -> None:
        del self.messages[n:], self.requests[n + 1 :], self.unnamed[n + 1 :], self.current[n:]
        del self.starts[bisect.bisect_left(self.starts, n) :]
        del self.closed[max(len(self.starts) - 1, 0) :]
        del self.changes[bisect.bisect_left(self.changes, n) :]
        del self.closed_by_id[len(self.changes) :]
        # Texts were first seen in order: undoing those seen from `n` on pops them off the end.
        added = self.added
        while added and added[-1][0] >= n:
            del self.earlier[added.pop()[1]]

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        # Whether a run starts at a request depends on the requests right after it (`starts_at`),
        # so the trailing requests read so far are read again with what follows them now.
        group = len(self.messages)
        while group and isinstance(self.messages[group - 1], ModelRequest):
            group -= 1
        if group < len(self.messages):
            self.truncate(group)
        requests, unnamed = self.requests[-1], self.unnamed[-1]
        for i in range(len(self.messages), len(messages)):
            message = messages[i]
            rid = merged_run_id(messages, i)
            if isinstance(message, ModelRequest) and not (i and isinstance(messages[i - 1], ModelRequest)):
                requests += 1  # the requests sent: consecutive ones go as one
                if not rid:
                    unnamed += 1
            if starts_at(messages, i, self.earlier.keys()):
                self.starts.append(i)
            for text in group_texts(messages, i):
                if text not in self.earlier:
                    self.earlier[text] = i
                    self.added.append((i, text))
            current = self.current[-1] if self.current else rid
            if rid is not None and current is not None and rid != current:
                self.changes.append(i)
            self.current.append(rid if rid is not None else current)
            self.requests.append(requests)
            self.unnamed.append(unnamed)
            self.messages.append(message)


def merged_run_id(messages: Sequence[ModelMessage], i: int) -> str | None:
    """The run id `messages[i]` speaks for, as pydantic-ai and `normalize` merge consecutive
    messages of one kind: none for a message merged into the one before; for the first of
    consecutive requests, the merged request's (the first's, or a later one's that holds a prompt
    of another run: the request that closed a run, then the next run's prompt)."""
    message = messages[i]
    if i and type(message) is type(messages[i - 1]):
        return None
    rid = getattr(message, 'run_id', None)
    if isinstance(message, ModelRequest):
        for later in request_group(messages, i)[1:]:
            later_id = getattr(later, 'run_id', None)
            if later_id and later_id != rid and has_user_prompt(later):
                rid = later_id
    return rid


def prompt_texts_before(messages: Sequence[ModelMessage]) -> frozenset[str]:
    """The prompt texts of `messages` that a prompt after them repeats to continue the task
    (`_boundaries.group_texts`); read from the fold `run_spans` resumes during a compile."""
    if not messages:
        return frozenset()
    return resumed_fold('views.runs', messages, _Runs, lambda fold: frozenset(fold.earlier))


def _spans_by_run_id(messages: Sequence[ModelMessage], fold: _Runs) -> list[RunSpan]:
    # Responses without a run id (e.g. built by hand) stay with the run around them. The id of a
    # run is the one in force at its last message (before the next run's first).
    closed = fold.closed_by_id
    start = closed[-1].end if closed else 0
    for end in fold.changes[len(closed) :]:
        closed.append(RunSpan(start=start, end=end, run_id=fold.current[end - 1]))
        start = end
    return [*closed, RunSpan(start=start, end=len(messages), run_id=fold.current[-1])]


def current_run(messages: Sequence[ModelMessage], *, run_id: str | None = None) -> RunSpan | None:
    """The span of the run in progress: the one with `run_id` if given and present, else the last one."""
    spans = run_spans(messages)
    if not spans:
        return None
    if run_id is not None:
        for span in reversed(spans):
            if span.run_id == run_id:
                return span
    return spans[-1]


def current_prompt(messages: Sequence[ModelMessage], *, run_id: str | None = None) -> int | None:
    """The index of the request holding the current run's prompt (the task at hand, kept in every
    view like the first prompt): the prompt of the run in progress (`current_run`), or of the newest
    run before it that has one (a run resumed without a prompt carries on that task). None without one.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context.views import current_prompt

        log = [
            ModelRequest(parts=[UserPromptPart('hi')]),
            ModelResponse(parts=[TextPart('hello')]),
            ModelRequest(parts=[UserPromptPart('now write the report')]),
        ]
        assert current_prompt(log) == 2
        ```
    """
    spans = run_spans(messages)
    if not spans:
        return None
    # The current run (`current_run`), and the runs before it newest first, without a tuple per
    # run: a chat log holds thousands, and every compile asks.
    at = len(spans) - 1
    if run_id is not None:
        at = next((i for i in range(at, -1, -1) if spans[i].run_id == run_id), at)
    for span in reversed(spans[: at + 1]):
        found = run_prompt(messages, span.start, span.end)
        if found is not None:
            return found
    return None


def conversation_view(
    messages: Sequence[ModelMessage], *, include_system_prompt: bool = True
) -> list[ModelMessage]:
    """The clean user ↔ assistant thread: each run's user prompt and its final answer.

    No tool calls, tool results, retries or thinking. For chat UIs and storage. System prompt
    parts of the first request are kept unless `include_system_prompt=False`. A run with no text
    answer (interrupted, or ended by an output tool) contributes only its prompt.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart

        from pydantic_ai_context import conversation_view

        log = [
            ModelRequest(parts=[UserPromptPart('how many files?')]),
            ModelResponse(parts=[ToolCallPart('ls', {}, tool_call_id='a')]),
            ModelRequest(parts=[ToolReturnPart('ls', 'a.py b.py', tool_call_id='a')]),
            ModelResponse(parts=[TextPart('Two.')]),
        ]
        clean = conversation_view(log)
        assert [type(m).__name__ for m in clean] == ['ModelRequest', 'ModelResponse']
        assert clean[1].parts[0].content == 'Two.'
        ```
    """
    out: list[ModelMessage] = []
    for n, span in enumerate(run_spans(messages)):
        prompt_parts = []
        first_request: ModelRequest | None = None
        for message in messages[span.start : span.end]:
            if not isinstance(message, ModelRequest):
                continue
            for part in message.parts:
                if isinstance(part, UserPromptPart) or (
                    include_system_prompt and n == 0 and isinstance(part, SystemPromptPart)
                ):
                    prompt_parts.append(part)
                    first_request = first_request or message
            if any(isinstance(p, UserPromptPart) for p in prompt_parts):
                break
        if first_request is not None and prompt_parts:
            out.append(dataclasses.replace(first_request, parts=prompt_parts))
        answer = _final_answer(messages[span.start : span.end])
        if answer is not None:
            if out and isinstance(out[-1], ModelResponse):
                continue
            out.append(answer)
    return out


def _final_answer(run: Sequence[ModelMessage]) -> ModelResponse | None:
    for message in reversed(run):
        if isinstance(message, ModelResponse):
            texts = [p for p in message.parts if isinstance(p, TextPart) and p.content]
            if texts:
                return dataclasses.replace(message, parts=texts)
    return None


# --- the reasoning-view pipeline --------------------------------------------------------------


@dataclass(kw_only=True)
class CompileContext:
    """What a policy may know while compiling one view, beyond the messages themselves.

    The profile builds one per compile; a policy used on its own gets a default one. Policies
    read it and never keep it: the view must be a function of the log, the budget and cached
    summaries alone.

    Example:
        ```python
        from pydantic_ai_context import CompileContext, ContextBudget, HeuristicCounter

        context = CompileContext(counter=HeuristicCounter(), budget=ContextBudget(context_window=32_000))
        assert context.budget is not None and context.budget.limit < 32_000
        ```
    """

    counter: TokenCounter
    """Counts tokens of text and messages."""
    budget: ContextBudget | None = None
    """The budget of this request, if one is known."""
    run_id: str | None = None
    """The id of the run in progress (pydantic-ai 2.x), to tell the current run from finished ones."""
    run_context: Any = None
    """The pydantic-ai `RunContext` when compiling inside a run."""
    model: Any = None
    """The run's model, for policies that call one (the summariser)."""
    log: Sequence[ModelMessage] = ()
    """The canonical log this view is compiled from."""
    originals: OriginalsSink | None = None
    """Where policies keep what their markers replace, for `read_context` (set by a profile with read-back)."""
    background: Any = None
    """The profile's `BackgroundSummaries`, where a summarising policy writes summaries ahead (see
    `SummarizeWindow.ahead`); `None`: every summary is made in the compile that needs it."""
    _notes: list[str] = dataclasses.field(default_factory=list[str], repr=False)
    _details: dict[str, Any] = dataclasses.field(default_factory=dict[str, Any], repr=False)

    def note(self, reason: str, **details: Any) -> None:
        """Record why the current step acted; it becomes the reason of its `CompactionEvent`."""
        self._notes.append(reason)
        self._details.update(details)

    def _take_notes(self) -> tuple[str, dict[str, Any]]:
        reason = '; '.join(self._notes)
        details = dict(self._details)
        self._notes.clear()
        self._details.clear()
        return reason, details


@runtime_checkable
class Policy(Protocol):
    """A step of a profile: a named transform of the view that may read the compile context.

    Every policy in this package is also a plain pydantic-ai history processor
    (`policy(messages)`); inside a profile the profile calls `apply` with its context.

    Example:
        ```python
        import asyncio
        import dataclasses

        from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

        from pydantic_ai_context import CompileContext, ContextProfile


        @dataclasses.dataclass
        class DropEmptyPrompts:
            name: str = 'drop_empty_prompts'

            def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
                return [m for m in messages if not (isinstance(m, ModelRequest) and not m.parts)]


        mine = ContextProfile(name='mine', steps=(DropEmptyPrompts(),))
        view = asyncio.run(mine.compile([ModelRequest(parts=[UserPromptPart('hi')])]))
        assert len(view) == 1
        ```
    """

    name: str

    def apply(
        self, messages: list[ModelMessage], context: CompileContext
    ) -> list[ModelMessage] | Awaitable[list[ModelMessage]]: ...


Step: TypeAlias = Policy | Callable[..., Any]
"""A profile step: a `Policy`, or any pydantic-ai history processor (sync or async, with or without `ctx`)."""


def step_name(step: Step) -> str:
    name = getattr(step, 'name', None)
    if isinstance(name, str):
        return name
    return getattr(step, '__name__', type(step).__name__)


async def run_step(step: Step, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
    """Run one step on a copy of the view list, whatever its shape."""
    if isinstance(step, Policy):
        result = step.apply(list(messages), context)
    elif _takes_run_context(step):
        result = step(context.run_context, list(messages))
    else:
        result = step(list(messages))
    if inspect.isawaitable(result):
        result = await result
    return list(result)


def _takes_run_context(step: Callable[..., Any]) -> bool:
    """Whether a history processor takes `(ctx, messages)`: by the first parameter's annotation
    (`RunContext`, as pydantic-ai decides it), else, unannotated or `Any`, by its name (`ctx`)."""
    try:
        params = [
            p
            for p in inspect.signature(step).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return False
    if len(params) < 2:
        return False
    first = params[0]
    annotation = first.annotation
    text = annotation if isinstance(annotation, str) else repr(annotation)
    if 'RunContext' in text:
        return True
    if annotation is inspect.Parameter.empty or text in {'Any', 'typing.Any'}:
        return first.name in {'ctx', 'context', 'run_context'}
    return False


class SyncWork(Protocol):
    """Where a compile runs its synchronous work (`ContextProfile` passes a `_offload.StepRunner`):
    which steps it may take, and a call that runs a function there and returns its result."""

    def takes(self, step: Step) -> bool:
        """Whether `step`'s `apply` may run there (a synchronous policy of this package)."""
        ...

    async def call(self, work: Callable[[], Any]) -> Any:
        """Run `work()` (on the loop or in a worker thread) and return its result."""
        ...


async def compile_view(
    messages: Sequence[ModelMessage],
    steps: Sequence[Step],
    context: CompileContext,
    *,
    on_event: Callable[[CompactionEvent], Awaitable[None]] | None = None,
    count_tokens: bool = False,
    work: SyncWork | None = None,
) -> list[ModelMessage]:
    """Compile the reasoning view: normalize, then each step, normalizing after every step.

    A log holding a provider's compaction part (`CompactionPart` in a response) is compiled from
    what the provider is sent after its own trim: the standing prompt (the first request's opening
    system prompt parts) and the messages from the latest such part on.

    The input is never mutated; messages a step leaves alone are the same objects in the view.
    `on_event` receives a `CompactionEvent` for every step that changed the view (and for the
    initial normalize when it repaired anything, and for a summarising step that fired and wrote
    no summary: its `no_summary` says why); tokens are counted for events only when
    `count_tokens` is set. `work`: where the opening normalize and the steps it `takes` run, each
    run of consecutive such steps (with the normalize after each, and the opening normalize with
    the first) in one call; the view and the events are the same wherever they run.
    """
    events = on_event is not None

    def opening() -> tuple[list[ModelMessage], list[CompactionEvent]]:
        check_messages(messages)
        # After a provider's own compaction the chain works on what the provider is sent: the standing
        # prompt and the messages from its latest compaction part on (see `_compaction`).
        original = list(window(messages))
        view, repairs = normalize_with_repairs(original)
        if not events or not repairs:
            return view, []
        return view, [
            _event('normalize', 'repaired the input', original, view, repairs, {}, context, count_tokens)
        ]

    def run(
        group: Sequence[Step], view: list[ModelMessage] | None
    ) -> tuple[list[ModelMessage], list[CompactionEvent]]:
        happened: list[CompactionEvent] = []
        if view is None:
            view, happened = opening()
        for step in group:
            out = step.apply(list(view), context)  # type: ignore[union-attr]
            assert isinstance(out, list)
            view, event = _after_step(step, view, out, context, events, count_tokens)
            if event is not None:
                happened.append(event)
        return view, happened

    view: list[ModelMessage] | None = None
    at = 0
    while True:
        group: list[Step] = []
        while work is not None and at < len(steps) and work.takes(steps[at]):
            group.append(steps[at])
            at += 1
        if group or view is None:
            if work is not None:
                view, happened = await work.call(functools.partial(run, group, view))
            else:
                view, happened = run(group, view)
            if on_event is not None:
                for event in happened:
                    await on_event(event)
        if at >= len(steps):
            return view
        step = steps[at]
        at += 1
        out = await run_step(step, view, context)
        view, event = _after_step(step, view, out, context, events, count_tokens)
        if on_event is not None and event is not None:
            await on_event(event)


def _after_step(
    step: Step,
    before: list[ModelMessage],
    out: list[ModelMessage],
    context: CompileContext,
    events: bool,
    count_tokens: bool,
) -> tuple[list[ModelMessage], CompactionEvent | None]:
    """The view after a step (normalized when it changed anything), and the event to report."""
    reason, details = context._take_notes()
    if not _changed(before, out):
        # The same messages: still valid, nothing to report, unless the step says why it fired
        # and did nothing (a summarising step that wrote no summary, DESIGN invariant 14).
        if events and details.get('no_summary'):
            return before, _event(step_name(step), reason, before, out, (), details, context, count_tokens)
        return before, None
    out, repairs = normalize_with_repairs(out)
    if events and _changed(before, out):
        return out, _event(step_name(step), reason, before, out, repairs, details, context, count_tokens)
    return out, None


def _changed(before: Sequence[ModelMessage], after: Sequence[ModelMessage]) -> bool:
    # Unequal lists (the common case for a step that compacts) are told apart in C, at the first
    # message that differs; equal ones are the same only if they hold the same objects (a step
    # that returns an equal copy has still done something: its notes are reported).
    return len(before) != len(after) or not equal_prefix(after, before) or not begins_with(after, before)


def _event(
    policy: str,
    reason: str,
    before: Sequence[ModelMessage],
    after: Sequence[ModelMessage],
    repairs: Sequence[Repair],
    details: dict[str, Any],
    context: CompileContext,
    count_tokens: bool,
) -> CompactionEvent:
    return CompactionEvent(
        policy=policy,
        reason=reason,
        messages_before=len(before),
        messages_after=len(after),
        tokens_before=context.counter.count_messages(before) if count_tokens else None,
        tokens_after=context.counter.count_messages(after) if count_tokens else None,
        repairs=tuple(repairs),
        details=details,
        run_id=context.run_id,
    )
