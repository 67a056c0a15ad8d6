"""`trim_tool_outputs`: old, large tool results keep head and tail; old calls' long arguments are clipped."""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

from pydantic_ai_context import _facts, _markers, _native_tools, _parts
from pydantic_ai_context._memo import PART_FIELDS, ObjectMemo, remembered_copy
from pydantic_ai_context.tokens import TokenCounter, message_tokens
from pydantic_ai_context.views import CompileContext

from ._base import LastCall, SyncPolicy, context_key, extend_or_resume, positions_before, resumable
from ._frontier import (
    Frontier,
    counter_key,
    frontier_from,
    nominal_part_tokens,
    part_text_tokens,
    unresolved_failures,
)
from ._native import shortened_native

__all__ = (
    'TrimToolOutputs',
    'clip_arguments',
    'shorten_native_results',
    'shorten_results',
    'trim_tool_outputs',
)

TRIMMED: Final = 'trimmed'
CLAMPED: Final = 'clamped'
ARGS_CLIPPED: Final = 'args_clipped'

_KEPT_ARGS: Final = frozenset(_facts.IDENTIFYING_ARGS) - {'command', 'cmd'}
"""Arguments never clipped: they say which resource a call touched (a command keeps its first line)."""


_HEAD_TAIL: ObjectMemo[str] = ObjectMemo(max_bytes=32 * 1024 * 1024, fields=PART_FIELDS)
"""Trimmed texts of the tool results seen, per part and settings, while each part lives unchanged."""


def _default_frontier() -> Frontier:
    return Frontier()


@dataclass(kw_only=True)
class TrimToolOutputs(SyncPolicy):
    """Cut old, large tool results down to their head and tail, with a marker stating what was cut.

    Tool results before the frontier (older than the recency window) and longer than
    `max_tokens` keep about `keep_tokens` tokens: the first lines and the last ones, around a
    line such as `[... 1,234 lines / ~9,800 tokens trimmed by pydantic-ai-context ...]` followed
    by the file paths and error lines the cut part mentioned (so those facts stay visible).
    Non-string content (dicts, lists) is serialised to JSON text and trimmed as text: the model
    received it as that text anyway, and a string is always valid tool content. Results holding
    images or documents are left alone.

    Old tool calls are trimmed too: string arguments longer than `max_arg_chars` (file contents
    passed to an editor, long scripts) are clipped, while identifying arguments (paths, URLs,
    patterns) stay whole and a command keeps at least its first line. String arguments stay a
    JSON string, dict arguments a dict.

    With a budget, a single result larger than `clamp_share` of the whole budget is clamped to
    that size even inside the recency window, so one huge output cannot overflow the context.
    Failed results that no later step has resolved, pinned content and results already compacted
    are left alone.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
        from pydantic_ai.messages import UserPromptPart as U

        from pydantic_ai_context.policies.trim import trim_tool_outputs

        big = '\\n'.join(f'line {i}: ' + 'x' * 60 for i in range(500))
        log = [ModelRequest(parts=[U('go')])]
        for i in range(3):
            call = ToolCallPart('bash', {'command': 'cat log.txt'}, tool_call_id=f'c{i}')
            log.append(ModelResponse(parts=[call]))
            log.append(ModelRequest(parts=[ToolReturnPart('bash', big, tool_call_id=f'c{i}')]))
        trim = trim_tool_outputs(keep_recent=1, step=1, max_tokens=500)
        view = trim(log)
        assert 'trimmed by pydantic-ai-context' in view[2].parts[0].content
        assert view[-1] is log[-1]  # the newest observation is in the recency window
        ```
    """

    name: str = 'trim_tool_outputs'
    """The step's name in a profile's chain."""
    frontier: Frontier = field(default_factory=_default_frontier)
    """Where the recency window starts; share one `Frontier` between policies to move them together."""
    max_tokens: int = 400
    """Results longer than this (tokens) before the frontier are trimmed."""
    keep_tokens: int = 200
    """About how many tokens a trimmed result keeps, head and tail together."""
    head_share: float = 0.6
    """Share of `keep_tokens` taken from the start of the output (the rest from its end)."""
    max_arg_chars: int = 200
    """String arguments of old calls longer than this (characters) are clipped; 0 disables clipping."""
    clamp_share: float | None = 0.5
    """With a budget: a single result over this share of `budget.limit` is clamped to it, even if recent."""
    max_paths: int = 128
    """File paths of the cut part listed after the marker."""
    max_errors: int = 8
    """Error lines of the cut part listed after the marker."""
    _memo: ObjectMemo[Any] = field(default_factory=ObjectMemo[Any], init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.keep_tokens < 1 or self.max_tokens < self.keep_tokens:
            raise ValueError('need 1 <= keep_tokens <= max_tokens')
        if not 0 < self.head_share <= 1:
            raise ValueError(f'head_share must be in (0, 1], got {self.head_share}')
        if self.clamp_share is not None and not 0 < self.clamp_share <= 1:
            raise ValueError(f'clamp_share must be in (0, 1], got {self.clamp_share}')

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        counter = context.counter
        frontier = self.frontier.locate(messages, context, slot=(self.name, id(self)))
        clamp_at = (
            int(context.budget.limit * self.clamp_share)
            if context.budget is not None and self.clamp_share is not None
            else None
        )
        # Behind the frontier nothing changes while it stays put; new messages pass through unless
        # one needs the clamp (then everything is recomputed, to report it).
        key = (context_key(context), frontier)
        return extend_or_resume(
            self,
            messages,
            key,
            context,
            lambda: self._apply(messages, frontier, clamp_at, context),
            accept=lambda _, tail: not any(self._needs_clamp(m, clamp_at, counter) for m in tail),
        )

    @staticmethod
    def _needs_clamp(message: ModelMessage, clamp_at: int | None, counter: TokenCounter) -> bool:
        return (
            clamp_at is not None
            and bool(_parts.tool_results(message) or _native_tools.native_returns(message))
            and not _parts.message_pinned(message)
            and message_tokens(counter, message) > clamp_at
        )

    def _resume(
        self, messages: list[ModelMessage], frontier: int, context: CompileContext
    ) -> tuple[int, _TrimState, LastCall, set[str]] | None:
        """How much of the previous output holds for `messages`: each message before the previous
        frontier and the first changed message depends only on itself and on which of its results
        are unresolved failures (returned, to recompute those whose status changed)."""
        found = resumable(self._last, _TrimState, messages, frontier, context)
        if found is None:
            return None
        last, previous, start = found
        if start <= 0:
            return None
        return start, previous, last, unresolved_failures(messages[:frontier]) if frontier else set()

    def _apply(
        self,
        messages: list[ModelMessage],
        frontier: int,
        clamp_at: int | None,
        context: CompileContext,
    ) -> tuple[list[ModelMessage], _TrimState]:
        failures: set[str] | None = None
        out = list(messages)
        trimmed_at: list[int] = []
        clipped_at: list[int] = []
        result_at: dict[str, int] = {}
        clamped = 0
        start = 0
        redo: list[int] = []
        resumed = self._resume(messages, frontier, context)
        if resumed is not None:
            start, previous, last, failures = resumed
            out[:start] = last.output[:start]
            trimmed_at = previous.trimmed_at[: bisect.bisect_left(previous.trimmed_at, start)]
            clipped_at = previous.clipped_at[: bisect.bisect_left(previous.clipped_at, start)]
            result_at = positions_before(previous.result_at, start)
            # Requests whose results changed failure status are recomputed (all trimmed ones when
            # the previous pass needed no failures: then nothing before `start` was over its limit).
            redo = (
                list(trimmed_at)
                if previous.failures is None
                else sorted({result_at[c] for c in previous.failures ^ failures if c in result_at})
            )
            redone = set(redo)
            trimmed_at = [i for i in trimmed_at if i not in redone]
        for i in [*redo, *range(start, len(messages))]:
            kind, failures = self._one(i, messages, out, frontier, clamp_at, failures, result_at, context)
            if kind == TRIMMED:
                bisect.insort(trimmed_at, i)
            elif kind == 'clipped':
                clipped_at.append(i)
            elif kind == CLAMPED:
                clamped += 1
        trimmed, clipped = len(trimmed_at), len(clipped_at)
        if trimmed or clamped or clipped:
            bits = []
            if trimmed:
                bits.append(f'old tool results trimmed in {trimmed} requests')
            if clamped:
                bits.append(
                    f'results over {self.clamp_share:.0%} of the budget clamped in {clamped} requests'
                )
            if clipped:
                bits.append(f'long arguments clipped in {clipped} old responses')
            context.note(', '.join(bits), trimmed=trimmed, clamped=clamped, clipped_responses=clipped)
        failed = frozenset(failures) if failures is not None else None
        return out, _TrimState(frontier, failed, trimmed_at, clipped_at, result_at)

    def _one(
        self,
        i: int,
        messages: list[ModelMessage],
        out: list[ModelMessage],
        frontier: int,
        clamp_at: int | None,
        failures: set[str] | None,
        result_at: dict[str, int],
        context: CompileContext,
    ) -> tuple[str | None, set[str] | None]:
        """Message `i` trimmed, clamped or clipped into `out[i]`: what was done, and the failures
        (computed on first need)."""
        counter = context.counter
        message = messages[i]
        out[i] = message
        if _parts.message_pinned(message):
            return None, failures
        old = i < frontier
        if isinstance(message, ModelResponse):
            # Native tool results live in the response: shortened like a request's results.
            limit = self.max_tokens if old else clamp_at
            kind: str | None = None
            new_response = message
            if (
                limit is not None
                and _native_tools.native_returns(message)
                and message_tokens(counter, message) > limit
            ):
                new_response = remembered_copy(
                    self._memo,
                    message,
                    ('native', old, limit, counter_key(counter)),
                    _trimmed_native,
                    self,
                    message,
                    old,
                    limit,
                    clamp_at,
                    context,
                    size=_text_size,
                )
                if new_response is not message:
                    kind = TRIMMED if old else CLAMPED
            if old and self.max_arg_chars > 0:
                clipped = remembered_copy(
                    self._memo,
                    new_response,
                    ('clip', counter_key(counter)),
                    self._clip_calls,
                    new_response,
                    counter,
                    size=_text_size,
                )
                if clipped is not new_response:
                    new_response = clipped
                    kind = kind or 'clipped'
            out[i] = new_response
            return kind, failures
        if not isinstance(message, ModelRequest) or not _parts.tool_results(message):
            return None, failures
        if old:
            for part in _parts.tool_results(message):
                result_at.setdefault(part.tool_call_id, i)
        limit = self.max_tokens if old else clamp_at
        # The counter memoises whole messages: a request that fits the limit needs no part counted.
        if limit is None or message_tokens(counter, message) <= limit:
            return None, failures
        if failures is None:
            # Only what has left the window can resolve a failure, so the set moves with the frontier.
            failures = unresolved_failures(messages[:frontier]) if frontier else set()
        # The clamp protects the budget, so it applies to failures too (they stay visible, shortened).
        kept = frozenset(
            p.tool_call_id for p in _parts.tool_results(message) if old and p.tool_call_id in failures
        )
        found = remembered_copy(
            self._memo,
            message,
            (old, limit, kept, counter_key(counter)),
            self._trim_request,
            message,
            old,
            limit,
            clamp_at,
            kept,
            context,
            size=_text_size,
        )
        if found is message:
            return None, failures
        out[i] = found
        return (TRIMMED if old else CLAMPED), failures

    def _trim_request(
        self,
        message: ModelRequest,
        old: bool,
        limit: int,
        clamp_at: int | None,
        kept: frozenset[str],
        context: CompileContext,
        *,
        reclamp: bool = False,
    ) -> ModelRequest:
        counter = context.counter
        parts: list[Any] = list(message.parts)
        changed = False
        keep = self.keep_tokens if old else clamp_at
        for j, part in enumerate(parts):
            if keep is None or not self._may_trim(part, kept, old=old):
                continue
            record = _parts.marker(part) or {}
            # A clamped result stays as it is on a view of a view (its marker may take it a little
            # over the limit), unless the caller asks for a smaller size than it was clamped to.
            if record.get('kind') == CLAMPED and not old and not reclamp:
                continue
            text = _parts.tool_content_text(part.content)
            tokens = part_text_tokens(part, counter)
            if tokens <= limit:
                continue
            # A clamped result keeps the sizes of the original when it is trimmed further.
            nominal = nominal_part_tokens(part, counter)
            lines = record.get('lines', text.count('\n') + 1)
            chars = record.get('chars', len(text))
            new_text = self._head_tail(part, text, tokens, keep, nominal, lines)
            new_record = {'kind': TRIMMED if old else CLAMPED, 'policy': self.name, 'tokens': nominal}
            new_record |= {'lines': lines, 'chars': chars}
            parts[j] = _markers.mark_result(part, new_text, new_record, context.originals, ref_in_text=True)
            changed = True
        return dataclasses.replace(message, parts=parts) if changed else message

    def _may_trim(self, part: Any, failures: AbstractSet[str], *, old: bool) -> bool:
        # A read-back page is never trimmed, but one too large for the budget is clamped like any
        # newest result (a page holds up to 20,000 characters; a user's tool may share the name).
        if (
            not isinstance(part, ToolReturnPart)
            or part.tool_call_id in failures
            or _parts.is_pinned(part)
            or (old and _markers.is_readback(part))
        ):
            return False
        record = _parts.marker(part)
        if record is not None and record.get('kind') not in (None, CLAMPED):
            return False
        content = part.content
        return not (isinstance(content, list | tuple) and any(_parts.is_binary_item(c) for c in content))

    def _head_tail(self, part: Any, text: str, tokens: int, keep: int, nominal: int, lines: int) -> str:
        # Per part (never per text, which would keep tool outputs alive): a part trimmed again for
        # another message (a clamp, then a trim) reuses the scan of its middle.
        ref = part.tool_call_id
        key = (tokens, keep, nominal, lines, ref, self.head_share, self.max_paths, self.max_errors)
        found: str | None = _HEAD_TAIL.get(part, key)
        if found is not None:
            return found
        chars_per_token = len(text) / max(tokens, 1)
        keep_chars = int(keep * chars_per_token * 0.9)
        head_chars = int(keep_chars * self.head_share)
        tail_chars = keep_chars - head_chars
        head = text[:head_chars]
        cut = head.rfind('\n')
        if cut > head_chars // 2:
            head = head[:cut]
        tail = text[len(text) - tail_chars :] if tail_chars > 0 else ''
        cut = tail.find('\n')
        if 0 <= cut < tail_chars // 2:
            tail = tail[cut + 1 :]
        middle = text[len(head) : len(text) - len(tail)]
        # Sizes of what is cut, relative to the original output (a clamped text is already shorter).
        cut_lines = max(lines - head.count('\n') - tail.count('\n') - 2, 0)
        cut_tokens = max(nominal - round(tokens * (len(head) + len(tail)) / max(len(text), 1)), 0)
        note = (
            f'[... {cut_lines:,} lines / ~{cut_tokens:,} tokens trimmed by pydantic-ai-context '
            f'(output was {lines:,} lines / ~{nominal:,} tokens) ...]\n{_markers.ref_line(ref)}'
        )
        facts = _facts.remembered_facts(middle)
        shown = head + tail
        paths = [p for p in facts.paths if p not in shown][: self.max_paths]
        errors = [e for e in facts.error_lines if e not in shown][: self.max_errors]
        if paths:
            note += '\n[trimmed part mentioned: ' + ', '.join(paths) + ']'
        if errors:
            note += '\n[trimmed part errors: ' + ' | '.join(errors) + ']'
        return _HEAD_TAIL.put(part, f'{head}\n{note}\n{tail}', key, size=len(head) + len(note) + len(tail))

    def _clip_calls(self, message: ModelResponse, counter: TokenCounter) -> ModelResponse:
        if _parts.message_pinned(message):
            return message
        parts = list(message.parts)
        originals: dict[str, int] = {}
        done = (_parts.marker(message) or {}).get('args_tokens')
        clipped_before = done if isinstance(done, dict) else {}
        for j, part in enumerate(parts):
            if not isinstance(part, ToolCallPart) or _parts.is_pinned(part):
                continue
            if part.tool_call_id in clipped_before:
                continue  # clipped by an earlier compile: clipping its clipped text again would not be idempotent
            new_args = _clip_args(part.args, self.max_arg_chars)
            if new_args is not None:
                originals[part.tool_call_id] = nominal_part_tokens(part, counter)
                parts[j] = dataclasses.replace(part, args=new_args)
        if not originals:
            return message
        record = dict(_parts.marker(message) or {})
        previous = record.get('args_tokens')
        record.update(
            kind=record.get('kind', ARGS_CLIPPED),
            args_tokens={**(previous if isinstance(previous, dict) else {}), **originals},
        )
        metadata = _parts.with_marker(message.metadata, record)
        return dataclasses.replace(message, parts=parts, metadata=metadata)


def _trimmed_native(
    policy: TrimToolOutputs,
    message: ModelResponse,
    old: bool,
    limit: int,
    clamp_at: int | None,
    context: CompileContext,
    *,
    reclamp: bool = False,
) -> ModelResponse:
    """`message` with its native tool results over `limit` cut to head + tail (see `_native`)."""
    keep = policy.keep_tokens if old else clamp_at
    if keep is None:
        return message
    return shortened_native(
        message,
        old=old,
        limit=limit,
        keep=keep,
        reclamp=reclamp,
        context=context,
        head_tail=policy._head_tail,
        policy=policy.name,
    )


def _text_size(message: ModelMessage) -> int:
    """What a trimmed or clipped copy holds beyond the original: its new text (an upper bound)."""
    return sum(len(_parts.part_text(p)) for p in message.parts if _parts.marker(p)) + (
        256 if _parts.marker(message) else 0
    )


_CLIP_NOTE: Final = re.compile(r'\[\.\.\. [\d,]{1,32}+ more chars clipped by pydantic-ai-context\]$')


def _clip_value(key: str, value: str, max_chars: int) -> str | None:
    """The clipped string, or None when it stays as it is."""
    if len(value) <= max_chars or key in _KEPT_ARGS or _CLIP_NOTE.search(value):
        return None
    cut = len(value) - max_chars
    note = f'[... {cut:,} more chars clipped by pydantic-ai-context]'
    head = value[: max(max_chars - len(note) - 1, 0)]
    if key in {'command', 'cmd'}:
        # A command's first line says what ran: it stays whole however long.
        first = value.split('\n', 1)[0]
        if len(first) >= len(head):
            if len(first) == len(value):
                return None
            head = first
    return f'{head}\n{note}'


def _clip_args(args: Any, max_chars: int) -> Any:
    """New arguments with long string values clipped, in the same form (dict or JSON string), or None."""
    loaded: Any
    if isinstance(args, dict):
        loaded = args
    elif isinstance(args, str):
        if len(args) <= max_chars:
            return None
        try:
            loaded = json.loads(args)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse: left as it is
            return None
        if not isinstance(loaded, dict):
            return None
    else:
        return None
    changed = False
    new: dict[str, Any] = {}
    for key, value in loaded.items():
        clipped = _clip_value(str(key), value, max_chars) if isinstance(value, str) else None
        if clipped is not None and len(clipped) < len(value):
            new[key] = clipped
            changed = True
        else:
            new[key] = value
    if not changed:
        return None
    return new if isinstance(args, dict) else _parts.json_text(new)


@dataclass(frozen=True)
class _TrimState:
    """What a full pass of `TrimToolOutputs` leaves for the next one to resume from."""

    frontier: int
    failures: frozenset[str] | None
    """The unresolved failures before the frontier (`None`: the pass needed none)."""
    trimmed_at: list[int]
    """The old requests trimmed, in order."""
    clipped_at: list[int]
    """The old responses whose arguments were clipped, in order."""
    result_at: dict[str, int]
    """The request each old tool result is in, by `tool_call_id`."""


def shorten_results(
    message: ModelRequest,
    *,
    max_tokens: int,
    counter: TokenCounter,
    recent: bool = False,
    originals: _markers.OriginalsSink | None = None,
) -> ModelRequest:
    """`message` with every tool result over `max_tokens` cut to head + tail of about that size.

    The marker records the original size; its kind is `'clamped'` when `recent` (a result of the
    recency window, shortened only because nothing else fits) and `'trimmed'` otherwise. Pinned
    messages, images, documents and results already compacted stay as they are. `fit_to_budget`
    uses it to degrade the recency window before it gives up. Each marker names its original by
    `tool_call_id`; `originals` keeps them where the log the read-back tools read is not whole.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ToolReturnPart

        from pydantic_ai_context import HeuristicCounter
        from pydantic_ai_context.policies.trim import shorten_results

        big = ModelRequest(parts=[ToolReturnPart('cat', 'word ' * 5_000, tool_call_id='c1')])
        small = shorten_results(big, max_tokens=300, counter=HeuristicCounter(), recent=True)
        assert HeuristicCounter().count_message(small) < 600
        assert small.parts[0].metadata['pydantic_ai_context']['kind'] == 'clamped'
        ```
    """
    if _parts.message_pinned(message) or max_tokens < 1:
        return message
    trim = TrimToolOutputs(max_tokens=max_tokens, keep_tokens=max_tokens)
    context = CompileContext(counter=counter, originals=originals)
    if recent:
        # Parallel results, each clamped to the trim policy's share of the budget, may still not
        # fit together: the room left is what counts here, so a clamped result is clamped again.
        return trim._trim_request(message, False, max_tokens, max_tokens, frozenset(), context, reclamp=True)
    return trim._trim_request(message, True, max_tokens, None, frozenset(), context)


def shorten_native_results(
    message: ModelResponse,
    *,
    max_tokens: int,
    counter: TokenCounter,
    recent: bool = False,
    originals: _markers.OriginalsSink | None = None,
) -> ModelResponse:
    """`message` with every editable native tool result over `max_tokens` cut to head + tail of
    about that size, in the shape its provider gave it (`shorten_results` for the results a
    response carries; results that must go back unmodified stay as they are).

    Example:
        ```python
        from pydantic_ai.messages import ModelResponse, NativeToolCallPart, NativeToolReturnPart

        from pydantic_ai_context import HeuristicCounter
        from pydantic_ai_context.policies.trim import shorten_native_results

        output = {'type': 'code_execution_result', 'stdout': 'row ' * 5_000, 'stderr': '', 'return_code': 0}
        response = ModelResponse(
            parts=[
                NativeToolCallPart('code_execution', {'code': 'print(rows)'}, tool_call_id='s1'),
                NativeToolReturnPart('code_execution', output, tool_call_id='s1'),
            ]
        )
        small = shorten_native_results(response, max_tokens=300, counter=HeuristicCounter(), recent=True)
        assert small.parts[1].content['return_code'] == 0  # the shape stays
        assert len(small.parts[1].content['stdout']) < 3_000
        ```
    """
    if _parts.message_pinned(message) or max_tokens < 1:
        return message
    trim = TrimToolOutputs(max_tokens=max_tokens, keep_tokens=max_tokens)
    context = CompileContext(counter=counter, originals=originals)
    if recent:
        return _trimmed_native(trim, message, False, max_tokens, max_tokens, context, reclamp=True)
    return _trimmed_native(trim, message, True, max_tokens, None, context)


def clip_arguments(message: ModelResponse, *, max_chars: int, counter: TokenCounter) -> ModelResponse:
    """`message` with its tool calls' long string arguments clipped to `max_chars` (paths and a
    command's first line stay whole); the message marker keeps their original sizes.

    Example:
        ```python
        from pydantic_ai.messages import ModelResponse, ToolCallPart

        from pydantic_ai_context import HeuristicCounter
        from pydantic_ai_context.policies.trim import clip_arguments

        call = ToolCallPart('write_file', {'path': 'a.py', 'content': 'x = 1\\n' * 500}, tool_call_id='c1')
        clipped = clip_arguments(ModelResponse(parts=[call]), max_chars=80, counter=HeuristicCounter())
        assert clipped.parts[0].args['path'] == 'a.py'
        assert len(clipped.parts[0].args['content']) < 200
        ```
    """
    if max_chars < 1:
        return message
    return TrimToolOutputs(max_arg_chars=max_chars)._clip_calls(message, counter)


def trim_tool_outputs(
    *,
    frontier: Frontier | None = None,
    keep_recent: int | None = None,
    keep_recent_tokens: int | None = None,
    step: int | None = None,
    **settings: Any,
) -> TrimToolOutputs:
    """Trim old, large tool results to head + tail and clip old calls' long arguments.

    `keep_recent`, `keep_recent_tokens` and `step` build the `Frontier` when none is given.
    See `TrimToolOutputs` for the settings.
    """
    chosen = frontier_from(frontier, keep_recent, keep_recent_tokens, step, default=_default_frontier())
    return TrimToolOutputs(frontier=chosen, **settings)
