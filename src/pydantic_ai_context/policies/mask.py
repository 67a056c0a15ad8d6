"""`mask_observations`: old tool results become one-line digests of their execution facts."""

from __future__ import annotations

import bisect
import dataclasses
import operator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

from pydantic_ai_context import _facts, _markers, _native_tools, _parts
from pydantic_ai_context._boundaries import is_tool_content
from pydantic_ai_context._memo import ObjectMemo, remembered_copy
from pydantic_ai_context.views import CompileContext, run_spans

from ._base import LastCall, SyncPolicy, context_key, extend_or_resume, positions_before, resumable
from ._frontier import (
    Frontier,
    counter_key,
    frontier_from,
    nominal_part_tokens,
    unresolved_failures,
)
from ._native import removable, without_native_pairs
from .summarize._summary_block import MARKER_KIND as SUMMARY_KIND

__all__ = ('DEFAULT_EXCLUDED_TOOLS', 'MaskObservations', 'mask_observations')

MASKED: Final = 'masked'
NAMED_AGAIN: Final = 'named_again'
PATH_KEYS: Final = 'path_keys'

DEFAULT_EXCLUDED_TOOLS: Final = frozenset({'think', 'task_tracker', 'todo_write', 'update_plan'})
"""Tools whose results stay: they echo the agent's own plan or thoughts, which masking must not hide."""

_UPGRADABLE: Final = frozenset({'trimmed', 'clamped'})
_NO_PATHS: Final = (_facts.NO_FACTS, _facts.NO_FACTS)
"""Marker kinds whose (shortened) results may still be masked."""


def _default_frontier() -> Frontier:
    return Frontier()


@dataclass(kw_only=True)
class MaskObservations(SyncPolicy):
    """Replace tool results older than the recency window by a digest of what the execution established.

    Each masked result keeps its `tool_call_id`, tool name and outcome; its content becomes one
    line such as `[output masked] execute_bash(command='pytest -q') → error, exit 1, 214 lines,
    ~2,100 tokens; errors: FAILED tests/test_io.py::test_vla - AssertionError; paths: src/io.py`:
    at most `max_errors` error lines, then at most `max_paths` paths (those the call's arguments
    name first), each with a count of the rest.
    The agent's own reasoning and actions (every response) stay as they are, like SWE-agent's
    observation masking.

    Left alone: results of `exclude_tools`; results whose digest would not be shorter; pinned
    content; results already masked; and failed results that are not yet *resolved*. A failure of
    tool `T` is resolved by a later successful result of `T` that has itself left the recency
    window, so whether a failure is masked changes only when the frontier moves. Results trimmed
    by `trim_tool_outputs` are masked too (their digest reports the original size).

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
        from pydantic_ai.messages import UserPromptPart as U

        from pydantic_ai_context.policies.mask import mask_observations

        log = [ModelRequest(parts=[U('fix the failing test')])]
        for i in range(4):
            call = ToolCallPart('bash', {'command': f'pytest tests/test_{i}.py'}, tool_call_id=f'c{i}')
            log.append(ModelResponse(parts=[call]))
            output = f'FAILED tests/test_{i}.py::test_x - AssertionError\\n' + 'collected 1 item\\n' * 40
            log.append(ModelRequest(parts=[ToolReturnPart('bash', output, tool_call_id=f'c{i}')]))
        view = mask_observations(keep_recent=2, step=2)(log)
        masked = view[2].parts[0].content
        assert masked.startswith('[output masked] ok, 42 lines')  # the call is in the response before it
        assert 'FAILED tests/test_0.py::test_x - AssertionError' in masked
        assert view[-1] is log[-1]
        ```
    """

    name: str = 'mask_observations'
    """The step's name in a profile's chain."""
    frontier: Frontier = field(default_factory=_default_frontier)
    """Where the recency window starts; share one `Frontier` between policies to move them together."""
    exclude_tools: frozenset[str] = DEFAULT_EXCLUDED_TOOLS
    """Tool names whose results are never masked."""
    prefix: str = '[output masked] '
    """Text before each digest, telling the model the output was removed (it can run the call again)."""
    repeat_call: bool = False
    """Repeat the call's summary in the digest. Off by default: the call is in the response right
    before, so repeating it only costs tokens."""
    max_paths: int = _facts.DIGEST_PATHS
    """File paths listed in a digest: those named in the call's arguments first, then the first
    others; a count stands for the rest."""
    max_errors: int = _facts.DIGEST_ERRORS
    """Error lines listed in a digest (before any path); a count stands for the rest."""
    skip_seen_facts: bool = True
    """Leave out of a digest the paths and error lines the view already shows in an earlier message."""
    named_again_within: int = 20
    """A path of a result that one of the next this many messages (before the frontier) names
    again, spelt the same or one ending with the other, is listed in its digest right after those
    the call names: the agent is still working with it (0: off). Bounded, so that a digest stops
    changing once the frontier is this far past it: older digests, and the cached prompt prefix
    holding them, stay as they are."""
    _memo: ObjectMemo[Any] = field(default_factory=ObjectMemo[Any], init=False, repr=False, compare=False)

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        frontier = self.frontier.locate(messages, context, slot=(self.name, id(self)))
        if frontier == 0:
            return messages
        # Nothing at or after the frontier is touched: while it stays put, the output for a
        # longer log is the previous output plus the new messages.
        key = (context_key(context), frontier)
        return extend_or_resume(
            self, messages, key, context, lambda: self._apply(messages, frontier, context)
        )

    def _apply(
        self,
        messages: list[ModelMessage],
        frontier: int,
        context: CompileContext,
    ) -> tuple[list[ModelMessage], _MaskState]:
        # Only what has left the window can resolve a failure: the decision then moves with the frontier.
        failures = unresolved_failures(messages[:frontier])
        out = list(messages)
        # Facts the view already shows before the current message (a digest need not list them
        # again), each with the first message showing it; masked requests; where each result is.
        first_seen: dict[str, int] = {}
        masked_at: list[int] = []
        result_at: dict[str, int] = {}
        start = 0
        resumed = self._resume(messages, frontier, failures, context)
        if resumed is not None:
            # When the frontier moves, what lies well before its previous place is as it was.
            start, previous, before = resumed
            out[:start] = before.output[:start]
            first_seen = positions_before(previous.first_seen, start)
            masked_at = previous.masked_at[: bisect.bisect_left(previous.masked_at, start)]
            result_at = positions_before(previous.result_at, start)
        seen = set(first_seen)
        # A run's first request may carry the results of calls an earlier run deferred beside the
        # run's prompt: that prompt is no tool's content, and stays when its results are masked.
        # Where runs start is read only for a request holding a prompt beside results (rare).
        run_starts: set[int] | None = None
        for i in range(start, frontier):
            message = messages[i]
            if (
                isinstance(message, ModelRequest)
                and not _parts.message_pinned(message)
                and _parts.tool_results(message)
            ):
                previous_message = messages[i - 1] if i > 0 else None
                results = _parts.tool_results(message)
                for p in results:
                    result_at.setdefault(p.tool_call_id, i)
                kept = frozenset(p.tool_call_id for p in results if p.tool_call_id in failures)
                shown = frozenset().union(*(_facts.facts_in_part(p) & seen for p in results))
                again = self._named_again(messages, i, frontier, results)
                opens_run = False
                if _parts.has_user_prompt(message):
                    if run_starts is None:
                        run_starts = {span.start for span in run_spans(messages)}
                    opens_run = i in run_starts
                new_message = self._masked(
                    message, previous_message, kept, shown, again, context, opens_run=opens_run
                )
                if new_message is not message:
                    out[i] = new_message
                    masked_at.append(i)
            elif (
                isinstance(message, ModelResponse)
                and not _parts.message_pinned(message)
                and _native_tools.native_returns(message)
            ):
                new_response = remembered_copy(
                    self._memo,
                    message,
                    ('native', counter_key(context.counter)),
                    self._mask_native,
                    message,
                    context,
                    size=_masked_size,
                )
                if new_response is not message:
                    out[i] = new_response
                    masked_at.append(i)
            if self.skip_seen_facts:
                for fact in self._visible_facts(out[i]) - seen:
                    first_seen[fact] = i
                    seen.add(fact)
        if masked_at:
            masked = len(masked_at)
            context.note(
                f'{masked} tool results before message {frontier} masked', masked=masked, frontier=frontier
            )
        return out, _MaskState(frontier, frozenset(failures), first_seen, masked_at, result_at)

    def _resume(
        self,
        messages: list[ModelMessage],
        frontier: int,
        failures: set[str],
        context: CompileContext,
    ) -> tuple[int, _MaskState, LastCall] | None:
        """Where the previous output of this policy stops being valid for `messages`, if it is of use.

        A masked request depends on itself, the response before it, which of its results are
        unresolved failures, the facts shown before it, and the `named_again_within` messages
        after it (before the frontier): everything before that many messages ahead of the first
        message that changed (or of the previous frontier) stays as it was.
        """
        found = resumable(self._last, _MaskState, messages, frontier, context)
        if found is None:
            return None
        last, previous, same = found
        start = same - self.named_again_within - 1
        for cid in previous.failures.symmetric_difference(failures):
            start = min(start, previous.result_at.get(cid, start))
        return (start, previous, last) if start > 0 else None

    def _masked(
        self,
        message: ModelRequest,
        previous: ModelMessage | None,
        kept: frozenset[str],
        shown: frozenset[str],
        again: frozenset[str],
        context: CompileContext,
        *,
        opens_run: bool = False,
    ) -> ModelRequest:
        """`message` with its results masked, remembered per message (the masked copy then keeps the
        counter's memo warm). Neither the message nor the response before it is held strongly."""
        return remembered_copy(  # type: ignore[no-any-return]
            self._memo,
            message,
            (kept, shown, again, counter_key(context.counter), opens_run),
            self._mask_request,
            message,
            previous,
            kept,
            shown,
            again,
            context,
            opens_run,
            depends_on=previous,
            size=_masked_size,
        )

    def _mask_request(
        self,
        message: ModelRequest,
        previous: ModelMessage | None,
        kept: frozenset[str],
        shown: frozenset[str],
        again: frozenset[str],
        context: CompileContext,
        opens_run: bool = False,
    ) -> ModelRequest:
        # A valid view holds each result's call in the response right before it.
        calls = {c.tool_call_id: c for c in _parts.tool_calls(previous)} if previous is not None else {}
        parts: list[Any] = list(message.parts)
        changed = False
        for j, part in enumerate(parts):
            if self._may_mask(part, kept):
                new_part = self._mask(part, calls.get(part.tool_call_id), shown, again, context)
                if new_part is not None:
                    parts[j] = new_part
                    changed = True
        if changed and all(_parts.marker(p) is not None for p in parts if isinstance(p, ToolReturnPart)):
            # What the tools returned beside their results (`ToolReturn` content: images, files)
            # goes with them; `read_context` on a result's ref reads it back.
            parts = [p for p in parts if not is_tool_content(p, message, run_start=opens_run)]
        return dataclasses.replace(message, parts=parts) if changed else message

    def _mask_native(self, message: ModelResponse, context: CompileContext) -> ModelResponse:
        """`message` with its old native tool results masked: an editable one's output becomes its
        digest (in the shape its provider gave it); one that must go back unmodified leaves the view
        with its call, a line saying what it was in their place (see `_native_tools`)."""
        parts: list[Any] = list(message.parts)
        changed = False
        removed: set[str] = set()
        for j, part in enumerate(parts):
            if removable(part, self.exclude_tools):
                removed.add(part.tool_call_id)
                continue
            if (
                not _native_tools.is_native_return(part)
                or _parts.is_pinned(part)
                or part.tool_name in self.exclude_tools
                or _parts.is_failed_result(part)
                or _native_tools.editable_fields(part) is None
            ):
                continue
            record = _parts.marker(part)
            if record is not None and record.get('kind') not in _UPGRADABLE:
                continue
            new_part = self._mask(part, None, frozenset(), frozenset(), context)
            if new_part is not None:
                parts[j] = new_part
                changed = True
        out = dataclasses.replace(message, parts=parts) if changed else message
        return without_native_pairs(out, removed, context)

    def _may_mask(self, part: Any, failures: AbstractSet[str]) -> bool:
        # RetryPromptPart (pydantic-ai 1.x retries) has no metadata to carry a marker: it stays.
        if not isinstance(part, ToolReturnPart) or _parts.is_pinned(part):
            return False
        if (
            part.tool_name in self.exclude_tools
            or part.tool_call_id in failures
            or _markers.is_readback(part)
        ):
            return False
        record = _parts.marker(part)
        return record is None or record.get('kind') in _UPGRADABLE

    def _visible_facts(self, message: ModelMessage) -> frozenset[str]:
        """The facts `message` shows that a later digest need not repeat. A summary's are left out:
        it is written after masking, from messages masking read, so on the first compile a digest
        after it was made beside those messages, whose facts a summary may list differently (a view
        of the view then masked results the view left whole)."""
        found = self._memo.get(message, 'facts')
        if found is None:
            keys: set[str] = set()
            summary = _parts.marker(message) or {}
            summary_at = summary.get('part') if summary.get('kind') == SUMMARY_KIND else None
            for j, part in enumerate(message.parts):
                if j == summary_at:
                    continue
                record = _parts.marker(part)
                content = getattr(part, 'content', None)
                if record is not None and record.get('kind') == MASKED and isinstance(content, str):
                    keys |= _facts.facts_in_digest(_markers.without_ref(content))
                else:
                    keys |= _facts.facts_in_part(part)
            found = self._memo.put(
                message, frozenset(keys) if keys else _facts.NO_FACTS, 'facts', size=sum(map(len, keys))
            )
        return found  # type: ignore[no-any-return]

    def _named_again(
        self, messages: list[ModelMessage], i: int, frontier: int, results: list[Any]
    ) -> frozenset[str]:
        """The paths of message `i`'s results that one of the next `named_again_within` messages names.

        Only messages before the frontier are read: they stay the same while the frontier does, so
        the view of a longer log is still the previous view plus the new messages.
        """
        if self.named_again_within <= 0:
            return frozenset()
        following = tuple(messages[i + 1 : min(i + 1 + self.named_again_within, frontier)])
        # The same following messages (the same objects: the memo holds them) name the same paths.
        found = self._memo.get(messages[i], NAMED_AGAIN)
        if (
            found is not None
            and len(found[0]) == len(following)
            and all(map(operator.is_, found[0], following))
        ):
            return found[1]  # type: ignore[no-any-return]
        # Each result's facts are remembered per part: no rescan of its text.
        paths = {path for p in results for path in _facts.part_facts(p).paths}
        if not paths:
            self._memo.put(messages[i], (following, _facts.NO_FACTS), NAMED_AGAIN)
            return _facts.NO_FACTS
        keys: set[str] = set()
        tails: set[str] = set()
        for message in following:
            named, endings = self._path_keys(message)
            keys |= named
            tails |= endings
        again = frozenset(
            path
            for path in paths
            if _facts.file_key(path) in tails or not keys.isdisjoint(_facts.path_tails(_facts.file_key(path)))
        )
        self._memo.put(messages[i], (following, again), NAMED_AGAIN)
        return again

    def _path_keys(self, message: ModelMessage) -> tuple[frozenset[str], frozenset[str]]:
        """The `file_key`s of the paths a message names, and all their `path_tails`."""
        found = self._memo.get(message, PATH_KEYS)
        if found is None:
            keys = frozenset(
                _facts.file_key(path)
                for part in message.parts
                for path in _facts.remembered_facts(_parts.part_text(part)).paths
            )
            if keys:
                tails = frozenset(t for key in keys for t in _facts.path_tails(key))
                found = self._memo.put(message, (keys, tails), PATH_KEYS)
            else:
                found = self._memo.put(message, _NO_PATHS, PATH_KEYS)
        return found  # type: ignore[no-any-return]

    def _mask(
        self,
        part: ToolReturnPart,
        call: ToolCallPart | None,
        shown: frozenset[str],
        again: frozenset[str],
        context: CompileContext,
    ) -> ToolReturnPart | None:
        line = _facts.digest(
            call,
            part,
            max_paths=self.max_paths,
            max_errors=self.max_errors,
            prefix=self.prefix,
            known=shown,
            prefer=again,
            with_call=self.repeat_call,
        )
        text = _native_tools.result_text(part)
        if len(_markers.with_ref(line, part.tool_call_id)) >= len(text):
            return None
        record = _parts.marker(part) or {}
        lines = record.get('lines', text.count('\n') + 1 if text else 0)
        chars = record.get('chars', len(text))
        new_record = {
            'kind': MASKED,
            'policy': self.name,
            'tokens': nominal_part_tokens(part, context.counter),
        }
        new_record |= {'lines': lines, 'chars': chars}
        marked: ToolReturnPart = _markers.mark_result(part, line, new_record, context.originals)
        return marked


@dataclass(frozen=True)
class _MaskState:
    """What a full pass of `MaskObservations` leaves for the next one to resume from."""

    frontier: int
    failures: frozenset[str]
    first_seen: dict[str, int]
    """Each fact the output shows before the frontier, with the first message showing it."""
    masked_at: list[int]
    """The requests masked, in order."""
    result_at: dict[str, int]
    """The request each tool result before the frontier is in, by `tool_call_id`."""


def _masked_size(message: ModelMessage) -> int:
    """What a masked copy holds beyond the original: its digests."""
    return sum(len(_parts.part_text(p)) for p in message.parts if _parts.marker(p))


def mask_observations(
    *,
    frontier: Frontier | None = None,
    keep_recent: int | None = None,
    keep_recent_tokens: int | None = None,
    step: int | None = None,
    **settings: Any,
) -> MaskObservations:
    """Mask tool results older than the recency window with digests of their execution facts.

    `keep_recent` (observations), `keep_recent_tokens` (tokens of tool output) and `step` build
    the `Frontier` when none is given. See `MaskObservations` for the settings.
    """
    chosen = frontier_from(frontier, keep_recent, keep_recent_tokens, step, default=_default_frontier())
    if 'exclude_tools' in settings:
        if isinstance(settings['exclude_tools'], str):  # would exclude its letters, not the tool
            raise TypeError(
                f'exclude_tools takes a collection of tool names, not a string: '
                f'exclude_tools=[{settings["exclude_tools"]!r}]'
            )
        settings['exclude_tools'] = frozenset(settings['exclude_tools'])
    return MaskObservations(frontier=chosen, **settings)
