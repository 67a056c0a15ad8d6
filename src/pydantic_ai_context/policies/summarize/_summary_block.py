"""How a summary sits in a view: the block it forms, read back from a compiled view and built anew.

A summary replaces the middle of the view with a *block*: the summary request (merged into the
task framing's last request when the framing ends with one), then what the summarised span had
to keep verbatim (pinned parts, system prompts, unknown framework parts, unresolved failures),
answered by an acknowledgement so that requests and responses keep alternating. Each message of
the block carries a marker (`summary`, `summary_kept`, `summary_ack`), so a view of the view
finds the block again (`find_zones`) and extends it rather than summarising a summary.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)

from pydantic_ai_context import _markers, _parts
from pydantic_ai_context._boundaries import first_prompt_at, prompt_parts
from pydantic_ai_context._compaction import holds_provider_part
from pydantic_ai_context._prefix import first_difference
from pydantic_ai_context._scope import active_generation
from pydantic_ai_context.integrity import safe_cut_points
from pydantic_ai_context.tokens import TokenCounter, message_tokens
from pydantic_ai_context.views import RunSpan, run_spans

MARKER_KIND: Final = 'summary'
KEPT_KIND: Final = 'summary_kept'
ACK_KIND: Final = 'summary_ack'

SUMMARY_PREFIX: Final = (
    'The earlier part of this conversation was condensed into the summary below by a separate '
    'summarisation step. It is background for continuing the work, not a new request:\n\n'
    '<conversation_summary>\n'
)
SUMMARY_SUFFIX: Final = '\n</conversation_summary>'
ACK_TEXT: Final = 'Understood. I will continue from the summary of the earlier conversation.'
# --- zones -------------------------------------------------------------------------------------


_SUMMARISABLE_REQUEST: Final = frozenset({'user-prompt', 'tool-return', 'retry-prompt', 'retry-feedback'})
_SUMMARISABLE_RESPONSE: Final = frozenset(
    {'text', 'thinking', 'tool-call', 'builtin-tool-call', 'builtin-tool-return', 'file'}
)


@dataclass
class Zones:
    """Where the head ends and the new middle starts, in the input, and their positions in the log."""

    head: list[ModelMessage]
    start: int
    """Input index where the span still to summarise starts (after the head or an existing summary)."""
    start_log: int
    """`start` as a position in the canonical log."""
    head_log: int
    """Log position where the head ends (where the first summary starts)."""
    previous: str | None = None
    previous_digest: str | None = None
    previous_observations: int = 0
    old_request_parts: list[Any] = field(default_factory=list[Any])
    old_response_parts: list[Any] = field(default_factory=list[Any])
    old_result_parts: list[Any] = field(default_factory=list[Any])

    def log_index(self, i: int) -> int:
        return self.start_log + (i - self.start)

    def input_index(self, log_i: int) -> int:
        return self.start + (log_i - self.start_log)


def without_marker(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    if not meta:
        return None
    rest = {k: v for k, v in meta.items() if k != _parts.META_KEY}
    return rest or None


def summary_text(part: Any) -> str:
    content = getattr(part, 'content', '') or ''
    text = _markers.without_ref(content if isinstance(content, str) else _parts.user_content_text(content))
    if text.startswith(SUMMARY_PREFIX) and text.endswith(SUMMARY_SUFFIX):
        return text[len(SUMMARY_PREFIX) : len(text) - len(SUMMARY_SUFFIX)]
    return text


def is_drop_note(part: Any, record: dict[str, Any]) -> bool:
    """`fit_to_budget`'s note in the summary's request (its record nested in the summary's): it
    belongs to the drop, not to what the summary kept."""
    nested = record.get('dropped')
    note = nested.get('note') if isinstance(nested, dict) else None
    return note is not None and isinstance(part, UserPromptPart) and part.content == note


def find_zones(
    messages: Sequence[ModelMessage],
    *,
    summaries: Sequence[int] | None = None,
    cuts: Callable[[], list[int]] | None = None,
    spans: Callable[[], list[RunSpan]] | None = None,
) -> Zones | None:
    """The head, or the head and existing summary block of an already-compiled view.

    `summaries`: the positions of the messages that may carry a summary's marker, when known
    (else every message is looked at); `cuts`: gives `safe_cut_points(messages)`, and `spans`
    `run_spans(messages)`, when known.
    """
    for s in reversed(summaries) if summaries is not None else range(len(messages) - 1, -1, -1):
        record = _parts.marker(messages[s])
        if record is not None and record.get('kind') == MARKER_KIND:
            return zones_after_summary(messages, s, record)
    first = first_prompt_at(messages)
    if first is None:
        # After a provider's compaction inside a run, what is sent holds no user prompt: the
        # response holding the provider's part is the task framing.
        first = next((i for i, m in enumerate(messages) if holds_provider_part(m)), None)
    if first is None:
        return None
    head_end = first + 1
    runs = spans() if spans is not None else run_spans(messages)
    first_run = next(s for s in runs if first in s)
    if first_run is not runs[-1]:
        # The first run has finished: its first text answer belongs to the task framing.
        for i in range(head_end, first_run.end):
            m = messages[i]
            if isinstance(m, ModelResponse) and _parts.final_text(m) and not _parts.tool_calls(m):
                head_end = i + 1
                break
    points = cuts() if cuts is not None else safe_cut_points(messages)
    head_end = next((c for c in points if c >= head_end), len(messages))
    return Zones(head=list(messages[:head_end]), start=head_end, start_log=head_end, head_log=head_end)


def zones_after_summary(messages: Sequence[ModelMessage], s: int, record: dict[str, Any]) -> Zones:
    summary_message: Any = messages[s]
    part_at = int(record.get('part', 0))
    head = list(messages[:s])
    if record.get('merged'):
        head.append(
            dataclasses.replace(
                summary_message,
                parts=list(summary_message.parts[:part_at]),
                metadata=without_marker(summary_message.metadata),
            )
        )
    end = s + 1
    response_parts: list[Any] = []
    result_parts: list[Any] = []
    while end < len(messages):
        kept = _parts.marker(messages[end])
        if kept is None or kept.get('kind') not in {KEPT_KIND, ACK_KIND}:
            break
        parts = list(messages[end].parts)
        if isinstance(messages[end], ModelResponse):
            response_parts += parts[1:] if kept.get('ack') or kept.get('kind') == ACK_KIND else parts
        else:
            result_parts += parts
        end += 1
    covers = record.get('covers') or [s, s]
    return Zones(
        head=head,
        start=end,
        start_log=int(covers[1]),
        head_log=int(covers[0]),
        previous=summary_text(summary_message.parts[part_at]),
        previous_digest=str(record.get('digest') or ''),
        previous_observations=int(record.get('observations') or 0),
        old_request_parts=[p for p in summary_message.parts[part_at + 1 :] if not is_drop_note(p, record)],
        old_response_parts=response_parts,
        old_result_parts=result_parts,
    )


@dataclass
class Kept:
    """What the middle holds that must stay verbatim after the summary."""

    request_parts: list[Any] = field(default_factory=list[Any])
    response_parts: list[Any] = field(default_factory=list[Any])
    result_parts: list[Any] = field(default_factory=list[Any])
    loose_response_at: int | None = None
    """Input index of the first response whose kept parts are not tool calls."""


def kept_in(
    messages: Sequence[ModelMessage],
    start: int,
    end: int,
    unresolved: set[str],
    *,
    candidates: Sequence[int] | None = None,
    prompt_at: int | None = None,
) -> Kept:
    """What `messages[start:end]` must keep verbatim. `candidates`: the only indices in that range,
    in order, that can keep anything (when known; see `may_keep`); `prompt_at`: where the current
    run's prompt is (the task at hand stays verbatim, DESIGN.md invariant 1)."""
    kept = Kept()
    indices = candidates if candidates is not None else range(start, end)
    if prompt_at is not None and start <= prompt_at < end and prompt_at not in indices:
        indices = sorted([*indices, prompt_at])
    for i in indices:
        message = messages[i]
        pinned = _parts.is_pinned(message)
        part: Any
        if isinstance(message, ModelRequest):
            prompt = prompt_parts(message, run_start=True) if i == prompt_at else []
            for part in message.parts:
                if _parts.is_tool_result(part):
                    continue  # kept with its call, below
                kind = getattr(part, 'part_kind', '')
                if (
                    isinstance(part, SystemPromptPart)
                    or pinned
                    or _parts.is_pinned(part)
                    or any(part is p for p in prompt)  # the task at hand
                ):
                    kept.request_parts.append(part)
                elif kind not in _SUMMARISABLE_REQUEST:
                    kept.request_parts.append(part)  # framework state we do not understand
            continue
        results: dict[Any, Any] = {}
        if i + 1 < len(messages) and isinstance(messages[i + 1], ModelRequest):
            nxt = messages[i + 1]
            results = {r.tool_call_id: r for r in _parts.tool_results(nxt)}
            next_pinned = _parts.is_pinned(nxt)
        else:
            next_pinned = False
        for part in message.parts:
            if _parts.is_tool_call(part):
                result = results.get(part.tool_call_id)
                keep = (
                    pinned
                    or next_pinned
                    or _parts.is_pinned(part)
                    or (result is not None and _parts.is_pinned(result))
                    or part.tool_call_id in unresolved
                )
                if keep and result is not None:
                    kept.response_parts.append(part)
                    kept.result_parts.append(result)
            elif (
                pinned
                or _parts.is_pinned(part)
                or getattr(part, 'part_kind', '') not in _SUMMARISABLE_RESPONSE
            ):
                kept.response_parts.append(part)
                if kept.loose_response_at is None:
                    kept.loose_response_at = i
    return kept


@dataclass
class KeptTokens:
    """The tokens `kept_in(messages, start, end, ...)` keeps, as a function of `end`: what stays
    verbatim beside a summary (the task's prompt, pinned parts, unresolved failures, parts that
    must go back whole, such as a provider's web search) is part of the view a plan sizes.

    Kept from one call to the next: the function per reading, start and run (the plan and the
    summaries made ahead ask several times a compile), and each message's count while it, the
    request after it and the calls of it left unresolved are the same. Only the messages that can
    keep something are read (`Reading.keeps`: unresolved failures by position, not every failure).
    Two conversations compiled in turn through one policy only miss these memos, never share them:
    each entry is checked against the very messages it was counted from.
    """

    last: tuple[Any, int, Hashable, Hashable, Callable[[int], int]] | None = None
    counts: dict[int, tuple[tuple[Any, ...], int]] = field(
        default_factory=dict[int, tuple[tuple[Any, ...], int]]
    )

    def of(
        self,
        messages: Sequence[ModelMessage],
        start: int,
        reading: Any,
        prompt: Callable[[], int | None],
        counter: TokenCounter,
        *,
        run_id: Hashable = None,
    ) -> Callable[[int], int]:
        """`reading`: the policy's `Reading` of `messages` (its `keeps` and unresolved failures);
        `prompt()`: where the current run's prompt is (asked only when `reading`, `start` or
        `run_id` changed: finding it walks the runs)."""
        counter_key = (type(counter).__qualname__, counter.name)
        last = self.last
        if last is not None and last[0] is reading and last[1:4] == (start, run_id, counter_key):
            return last[4]
        prompt_at = prompt()
        unresolved: set[str] = reading.unresolved_failures()
        candidates = reading.keeps(start, len(messages))
        if prompt_at is not None and prompt_at >= start:
            candidates = sorted({*candidates, prompt_at})
        positions: list[int] = []
        totals: list[int] = [0]
        counts: dict[int, tuple[tuple[Any, ...], int]] = {}
        empty = message_tokens(counter, ModelRequest(parts=[]))
        for i in candidates:
            message = messages[i]
            following = messages[i + 1] if i + 1 < len(messages) else None
            calls = frozenset(
                part.tool_call_id
                for part in message.parts
                if _parts.is_tool_call(part) and part.tool_call_id in unresolved
            )
            state = (
                message,
                tuple(message.parts),
                following,
                tuple(following.parts) if following is not None else (),
                i == prompt_at,
                calls,
                reading.generation,
                counter_key,
            )
            found = self.counts.get(i)
            if found is not None and _same_identity(found[0], state):
                tokens = found[1]
            else:
                kept = kept_in(messages, i, i + 1, unresolved, candidates=[i], prompt_at=prompt_at)
                requests = [*kept.request_parts, *kept.result_parts]
                tokens = (
                    message_tokens(counter, ModelRequest(parts=requests)) - empty if requests else 0
                ) + (
                    message_tokens(counter, ModelResponse(parts=kept.response_parts)) - empty
                    if kept.response_parts
                    else 0
                )
            counts[i] = (state, tokens)
            if tokens > 0:
                positions.append(i)
                totals.append(totals[-1] + tokens)
        self.counts = counts

        def before(end: int) -> int:
            return totals[bisect.bisect_left(positions, end)]

        self.last = (reading, start, run_id, counter_key, before)
        return before


def _same_identity(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same messages and parts (by identity), and the same flags."""
    return (
        a[0] is b[0]
        and a[2] is b[2]
        and len(a[1]) == len(b[1])
        and all(x is y for x, y in zip(a[1], b[1], strict=True))
        and len(a[3]) == len(b[3])
        and all(x is y for x, y in zip(a[3], b[3], strict=True))
        and a[4:] == b[4:]
    )


def may_keep(message: ModelMessage) -> bool:
    """Whether `kept_in` can keep anything of `message` whatever its neighbours: a pinned message
    or part, a system prompt, a part it does not summarise. (A response can also keep calls whose
    results are pinned or unresolved: those depend on the next request.)"""
    if _parts.is_pinned(message):
        return True
    if isinstance(message, ModelRequest):
        return any(
            not _parts.is_tool_result(part)
            and (
                isinstance(part, SystemPromptPart)
                or _parts.is_pinned(part)
                or getattr(part, 'part_kind', '') not in _SUMMARISABLE_REQUEST
            )
            for part in message.parts
        )
    return any(
        _parts.is_pinned(part)
        or (not _parts.is_tool_call(part) and getattr(part, 'part_kind', '') not in _SUMMARISABLE_RESPONSE)
        for part in message.parts
    )


def earlier_ref(messages: Sequence[ModelMessage], start: int) -> str | None:
    """The ref of the summary before `start` (in the head), which the next summary's span names first."""
    return next(
        (_markers.ref_of(m) for m in messages[:start] if (_parts.marker(m) or {}).get('kind') == MARKER_KIND),
        None,
    )


def digest_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def assemble_block(
    messages: Sequence[ModelMessage],
    zones: Zones,
    end: int,
    kept: Kept,
    text: str,
    status: str,
    role: Literal['user', 'system'],
    *,
    originals: _markers.OriginalsSink | None = None,
    ref: str | None = None,
    observations: int | None = None,
    reuse: BlockMemo | None = None,
    reading: Numbered | None = None,
) -> list[ModelMessage]:
    """The view with `messages[zones.start:end]` replaced by the summary block: the summary request
    (merged into the head's last request when the head ends with one), then what the span kept
    (an acknowledgement response with the kept calls, their results), then an acknowledgement
    when the tail starts with a request, so requests and responses keep alternating.

    The summary names the span it stands for by a ref (`read_context`), kept in `originals`: the
    span after what an earlier summary of this view stood for. `ref` and `observations` (the
    tool-result requests in the span) are computed here unless the caller knows them; `reuse`
    gives the previous call's block objects back when the block is the same; `reading` (the
    policy's reading of `messages`) tells whether the span is what the block was last read from."""
    middle = messages[zones.start : end]
    stamp, ids = _stamp_and_ids(middle, zones, reuse, reading)
    earlier = earlier_ref(messages, zones.start)
    span: list[ModelMessage | str] = [*([earlier] if earlier is not None else []), *middle]
    if ref is None:
        ref = _markers.span_ref(span)
    _markers.keep_span(originals, ref, span)
    summary_part = summary_request_part(text, role=role, timestamp=stamp, ref=ref)
    request_parts = [summary_part, *zones.old_request_parts, *kept.request_parts]
    response_parts = [*zones.old_response_parts, *kept.response_parts]
    result_parts = [*zones.old_result_parts, *kept.result_parts]
    # Observations (tool-result requests) the summary now stands for: the compaction frontier
    # still counts them, so a view of this view compacts the same messages. The results the
    # block keeps go back in one request of the view, an observation the frontier counts there:
    # it stands for one of the span's (or for the earlier block's, rebuilt here).
    if observations is None:
        observations = sum(1 for m in middle if isinstance(m, ModelRequest) and _parts.tool_results(m))
    observations += zones.previous_observations + bool(zones.old_result_parts) - bool(result_parts)
    record: dict[str, Any] = {
        'kind': MARKER_KIND,
        'scope': 'historical',
        'covers': [zones.head_log, zones.log_index(end)],
        'messages': zones.log_index(end) - zones.head_log,
        'observations': observations,
        'status': status,
        'digest': digest_text(text),
        'role': role,
        'ref': ref,
    }
    head = list(zones.head)
    last = head[-1] if head else None
    tail = list(messages[end:])
    ending = isinstance(tail[0], ModelRequest)
    # A copy of the record: the one below gains `merged` and `part`, and the next compile's would
    # never equal it (the block was rebuilt every compile, and every fold re-read the view after it).
    key = (request_parts, response_parts, result_parts, dict(record), ids, stamp, ending)
    state = _head_state(last)
    if (
        reuse is not None
        and reuse.block
        and reuse.last is last
        and reuse.key == key
        and _same_state(reuse.last_state, state)
    ):
        # The same block after the same head as the previous compile: the same objects, so what is
        # remembered of the view's prefix (totals, validity) stays valid.
        return (
            [*head[:-1], *reuse.block, *tail]
            if isinstance(last, ModelRequest)
            else [*head, *reuse.block, *tail]
        )
    if isinstance(last, ModelRequest):
        head.pop()
        record.update(merged=True, part=len(last.parts))
        block: list[ModelMessage] = [
            dataclasses.replace(
                last,
                parts=[*last.parts, *request_parts],
                metadata=_parts.with_marker(last.metadata, record),
            )
        ]
    else:
        record.update(merged=False, part=0)
        block = [ModelRequest(parts=request_parts, metadata=_parts.with_marker(None, record), **ids)]
    ack = TextPart(ACK_TEXT)
    if response_parts:
        block.append(
            ModelResponse(
                parts=[ack, *response_parts],
                timestamp=stamp,
                metadata=_parts.with_marker(None, {'kind': KEPT_KIND, 'ack': True}),
                **ids,
            )
        )
        if result_parts:
            block.append(
                ModelRequest(
                    parts=result_parts, metadata=_parts.with_marker(None, {'kind': KEPT_KIND}), **ids
                )
            )
    if isinstance(block[-1], ModelRequest) and ending:
        block.append(
            ModelResponse(
                parts=[ack], timestamp=stamp, metadata=_parts.with_marker(None, {'kind': ACK_KIND}), **ids
            )
        )
    if reuse is not None:
        reuse.last, reuse.key, reuse.block, reuse.last_state = last, key, block, state
    return [*head, *block, *tail]


def _head_state(last: ModelMessage | None) -> tuple[Any, ...] | None:
    """What a block merged into `last` copies of it: pydantic-ai edits a request in place (a system
    prompt re-rendered with the same text and a new timestamp is a new part in the same message),
    so the same message object is not enough to give the same block again."""
    if last is None:
        return None
    return (tuple(last.parts), {f.name: getattr(last, f.name) for f in dataclasses.fields(last)})


def _same_state(a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> bool:
    if a is None or b is None:
        return a is b
    parts_a, fields_a = a
    parts_b, fields_b = b
    return (
        len(parts_a) == len(parts_b)
        and all(x is y for x, y in zip(parts_a, parts_b, strict=True))
        and fields_a.keys() == fields_b.keys()
        and all(fields_a[k] is fields_b[k] or (k != 'parts' and fields_a[k] == fields_b[k]) for k in fields_a)
    )


@dataclass(eq=False)
class BlockMemo:
    """The block `assemble_block` built last, and what it was built from, to give the same objects
    when it would build the same block again."""

    last: ModelMessage | None = None
    last_state: tuple[Any, ...] | None = None
    """`last`'s parts and fields when the block was built (`_head_state`)."""
    key: tuple[Any, ...] | None = None
    block: list[ModelMessage] = field(default_factory=list[ModelMessage])
    read: tuple[int | None, list[ModelMessage], list[ModelMessage], datetime, dict[str, Any]] | None = None
    """The span and head the stamp and run ids were last read from (generation, middle, head, ...)."""
    numbered: tuple[int, int, int, list[ModelMessage], datetime, dict[str, Any]] | None = None
    """The same, by the policy's reading: (its serial, the span's start and end, head, ...)."""


class Numbered(Protocol):
    """A reading of the messages that tells how many of them an earlier reading read (`Reading`)."""

    @property
    def serial(self) -> int: ...
    def unchanged_since(self, serial: int) -> int: ...


def _stamp_and_ids(
    middle: Sequence[ModelMessage], zones: Zones, reuse: BlockMemo | None, reading: Numbered | None = None
) -> tuple[datetime, dict[str, Any]]:
    """`stamp_of` and `run_ids_of` of the span, from `reuse` when the span and the head are the
    very objects they were last read from in this generation (both walk the whole span, and the
    span is most of a long log). With the policy's `reading`, the span is known to be the same
    with no pass over it: the messages up to its end are the ones the earlier reading read."""
    head = zones.head
    if reuse is not None and reading is not None:
        end = zones.start + len(middle)
        found = reuse.numbered
        if found is not None:
            serial, start, stop, read_head, stamp, ids = found
            if (
                (start, stop) == (zones.start, end)
                and reading.unchanged_since(serial) >= end
                and len(read_head) == len(head)
                and first_difference(read_head, head) == len(head)
            ):
                return stamp, ids
        stamp, ids = stamp_of(middle, zones), run_ids_of(middle, head)
        reuse.numbered = (reading.serial, zones.start, end, list(head), stamp, ids)
        return stamp, ids
    generation = active_generation()
    if reuse is not None and reuse.read is not None and generation is not None:
        read_generation, read_middle, read_head, stamp, ids = reuse.read
        if (
            read_generation == generation
            and len(read_middle) == len(middle)
            and len(read_head) == len(head)
            and first_difference(read_middle, middle) == len(middle)
            and first_difference(read_head, head) == len(head)
        ):
            return stamp, ids
    stamp, ids = stamp_of(middle, zones), run_ids_of(middle, head)
    if reuse is not None:
        reuse.read = (generation, list(middle), list(head), stamp, ids)
    return stamp, ids


def summary_request_part(
    text: str, *, role: Literal['user', 'system'] = 'user', timestamp: datetime, ref: str | None = None
) -> Any:
    """The part a summary takes in a request.

    Where pydantic-ai takes a `CompactionPart` in a request (2.x), a user-role summary is one:
    core frames it for every provider in `<pyai:conversation_summary>` after a line saying a
    separate model wrote it, and labels the prompt-cache change as compaction. Elsewhere (1.x), and
    for `role='system'`, the summary is prompt text between our own delimiters.
    """
    if role == 'user' and _parts.REQUEST_COMPACTION:
        from pydantic_ai.messages import CompactionPart

        return CompactionPart(_markers.with_ref(text, ref) if ref else text)
    content = SUMMARY_PREFIX + text + SUMMARY_SUFFIX
    if ref:
        content = _markers.with_ref(content, ref)
    if role == 'user':
        return UserPromptPart(content, timestamp=timestamp)
    return SystemPromptPart(content, timestamp=timestamp)


def stamp_of(middle: Sequence[ModelMessage], zones: Zones) -> datetime:
    # A timestamp from the covered messages, never "now": the view must be the same byte for byte.
    for message in reversed(middle):
        stamp = getattr(message, 'timestamp', None)
        if isinstance(stamp, datetime):
            return stamp
    return datetime(1970, 1, 1, tzinfo=UTC)


def run_ids_of(middle: Sequence[ModelMessage], head: Sequence[ModelMessage]) -> dict[str, Any]:
    ids: dict[str, Any] = {}
    for name in ('run_id', 'conversation_id'):
        for message in [*reversed(middle), *reversed(head)]:
            value = getattr(message, name, None)
            if value:
                ids[name] = value
                break
    return ids
