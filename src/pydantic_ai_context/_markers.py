"""How a marker names what it stands for, so the model can read the original back.

Every policy that puts a marker in place of content (a trimmed, clamped, masked or superseded tool
result, a finished run's digest, a dropped span, a summary) builds it here: one short line names
the ref that `read_context` reads back, and the marker's metadata record carries it as `ref`. A
tool result is named by its `tool_call_id`; a span of messages by `span_ref`, a short id derived
from the messages it covers (the same messages give the same id, in any process).

Policies hand what they replace to `CompileContext.originals` (a profile with read-back sets it):
a span always, a tool result only where the log the tools will read is not whole.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence
from typing import Any, Final, Protocol

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, UserPromptPart

from . import _boundaries, _native_tools, _parts, _scope
from ._compaction import holds_provider_part
from ._memo import ObjectMemo

READ_CONTEXT: Final = 'read_context'
SEARCH_CONTEXT: Final = 'search_context'
READBACK_TOOLS: Final = frozenset({READ_CONTEXT, SEARCH_CONTEXT})
"""The read-back tools: their results are never compacted, searched or read back themselves."""

_REF_LINE: Final = "[original: read_context('{ref}')]"
_REF_LINE_RE: Final = re.compile(r"\n?\[original: read_context\('([^'\n]{1,200})'\)\]$")


class OriginalsSink(Protocol):
    """Where a profile keeps what its markers replaced, for `read_context` (see `readback.ContextArchive`)."""

    def keep_result(self, ref: str, part: Any) -> None:
        """The original tool result `part`, named by its `tool_call_id`."""
        ...

    def keep_span(self, ref: str, items: Sequence[ModelMessage | str], *, replace: bool = False) -> None:
        """The messages a span marker stands for, in order; a `str` item is the ref of an earlier span.

        A span is kept once per ref, unless `replace` (a span that grows under a stable ref)."""
        ...


def ref_line(ref: str) -> str:
    """The line a marker carries to say that `read_context(ref)` returns what it replaced."""
    return _REF_LINE.format(ref=ref)


def with_ref(text: str, ref: str) -> str:
    """`text` followed by the read-back line for `ref` (once: a text that already ends with it is kept)."""
    line = ref_line(ref)
    return text if text.endswith(line) else f'{text}\n{line}'


def without_ref(text: str) -> str:
    """`text` without a trailing read-back line."""
    return _REF_LINE_RE.sub('', text)


def is_readback(part: Any) -> bool:
    """A call to, or result of, one of the read-back tools."""
    return getattr(part, 'tool_name', None) in READBACK_TOOLS


def ref_of(obj: Any) -> str | None:
    """The ref a marker (a part or a message) records, if it is one of ours and has one."""
    record = _parts.marker(obj)
    ref = record.get('ref') if record is not None else None
    return ref if isinstance(ref, str) else None


def has_ref(message: ModelMessage) -> bool:
    """The message, or one of its parts, is a marker that names a ref."""
    return ref_of(message) is not None or any(ref_of(p) is not None for p in message.parts)


def mark_result(
    part: Any,
    text: str,
    record: dict[str, Any],
    originals: OriginalsSink | None,
    *,
    ref_in_text: bool = False,
) -> Any:
    """`part` as a marker: `text` as its content plus the read-back line (unless `ref_in_text`: the
    caller placed it), `record` with the ref in its metadata. The original goes to `originals`
    unless `part` is already a marker (its original was kept when that marker was made)."""
    ref = part.tool_call_id
    if originals is not None and _parts.marker(part) is None:
        originals.keep_result(ref, part)
    content = text if ref_in_text else with_ref(text, ref)
    metadata = _parts.with_marker(part.metadata, {**record, 'ref': ref})
    if _native_tools.is_native_return(part):
        # A native result keeps the shape its provider gave it: only its output text changes.
        return _native_tools.with_output(part, content, metadata)
    return dataclasses.replace(part, content=content, metadata=metadata)


def keep_span(
    originals: OriginalsSink | None, ref: str, items: Sequence[ModelMessage | str], *, replace: bool = False
) -> None:
    if originals is not None:
        originals.keep_span(ref, items, replace=replace)


def _first_request(messages: Sequence[ModelMessage]) -> ModelRequest | None:
    """The request holding the first user prompt (kept verbatim in every view, DESIGN.md invariant 1);
    content a tool returned beside its results is no prompt (a view may mask it with the results)."""
    first: ModelRequest | None = None
    for i, message in enumerate(messages):
        if not isinstance(message, ModelRequest):
            continue
        if first is None:
            first = message
        if _opens(messages, i):
            return message
    return first


def _opens(messages: Sequence[ModelMessage], i: int) -> bool:
    """Whether request `messages[i]` holds a user prompt as every view has it: not content a tool
    returned beside its results (a view may mask it with them), unless `normalize` drops those
    results (their call is not in the response before, or that response leads the log and is
    dropped with it), which leaves the prompt a prompt."""
    message = messages[i]
    if not _parts.has_user_prompt(message):
        return False
    if _boundaries.has_prompt(message):
        return True
    before = messages[i - 1] if i else None
    calls = {c.tool_call_id for c in _parts.tool_calls(before)} if before is not None else set()
    if not any(r.tool_call_id in calls for r in _parts.tool_results(message)):
        return True
    assert before is not None
    leading = not any(isinstance(m, ModelRequest) for m in messages[: i - 1])
    return leading and not holds_provider_part(before)


def conversation_key(messages: Sequence[ModelMessage]) -> str:
    """A digest of the log's first user prompt and that prompt's timestamp: a content key, which every
    view of the log shares, but two conversations that open alike share too (see `conversation_identity`).
    Content a tool returned beside its results is no prompt: a view may mask it with the results.
    """
    for i, message in enumerate(messages):
        if not _opens(messages, i):
            continue
        assert isinstance(message, ModelRequest)
        written = _written_here(message)
        for k, part in enumerate(message.parts):
            if isinstance(part, UserPromptPart) and k not in written:
                stamp = part.timestamp.isoformat() if part.timestamp is not None else ''
                text = f'{stamp}\x00{_parts.user_content_text(part.content)}'
                return 'v' + hashlib.blake2b(text.encode('utf-8', 'surrogatepass'), digest_size=6).hexdigest()
    return ''


def _written_here(message: ModelRequest) -> set[int]:
    """The indexes of the user prompt parts this package wrote into a view's request (a summary's
    text, a drop note): a view opening with one (a log whose window holds no prompt of its own, after
    a provider's compaction) still has the key of its log."""
    record = _parts.marker(message)
    if record is None:
        return set()
    written: set[int] = set()
    if record.get('kind') == 'summary' and isinstance(record.get('part'), int):
        written.add(record['part'])
    notes = [r.get('note') for r in (record, record.get('dropped')) if isinstance(r, dict)]
    for k, part in enumerate(message.parts):
        if isinstance(part, UserPromptPart) and part.content in notes:
            written.add(k)
    return written


def conversation_identity(messages: Sequence[ModelMessage], run_context: Any = None) -> str | None:
    """Which conversation a log (or any view of it) belongs to, by an id that cannot collide by
    content, or `None` when the log carries none.

    In order: the conversation id pydantic-ai gives the request that opens the log (kept with it:
    every view keeps that request verbatim), else the first conversation id a message carries (a
    converted chat continued by a run: every run of one conversation carries the same), else the
    opening request's run id, else the conversation id of the run in progress (`run_context`). A
    log converted from another format (`from_openai`) and never run carries none of them:
    `ContextArchive` then tells conversations apart by lineage.
    """
    first = _first_request(messages)
    found: Any = getattr(first, 'conversation_id', None)
    if not found:
        found = first_conversation_id(messages)
    if not found:
        found = _opening_run_id(messages, first)
    if not found and run_context is not None:
        found = getattr(run_context, 'conversation_id', None)
    if not isinstance(found, str) or not found:
        return None
    return 'c' + hashlib.blake2b(found.encode('utf-8', 'surrogatepass'), digest_size=8).hexdigest()


def _opening_run_id(messages: Sequence[ModelMessage], first: ModelRequest | None) -> str | None:
    """The run id of the opening request `first` as every view has it: merged with the requests
    right before and after it as `normalize` merges them (a log that opens with a follow-up and then
    a run's prompt is sent as one request, with the run's id)."""
    if first is None:
        return None
    at = next(i for i, m in enumerate(messages) if m is first)
    start = at
    while start > 0 and _merges(messages[start - 1]):
        start -= 1
    run_id: str | None = None
    merged = False
    for i, message in enumerate(messages[start:], start):
        if i > at and not _merges(message):
            break
        if isinstance(message, ModelRequest):
            run_id = _parts.merged_run_id(run_id, message) if merged else getattr(message, 'run_id', None)
            merged = True
    return run_id


def _merges(message: ModelMessage) -> bool:
    """Whether `normalize` merges `message` with a request next to it: a request, or an empty
    message (dropped, which leaves the requests around it adjacent)."""
    return isinstance(message, ModelRequest) or not message.parts


def first_conversation_id(messages: Sequence[ModelMessage]) -> Any:
    """The conversation id of the first message that carries one (as it is), or `None`."""
    # Most logs carry none, which a plain scan learns by reading every message: during a compile the
    # fold of the previous list is resumed from its first changed message. It reads only messages a
    # response follows; the requests after the last response (pydantic-ai may still fill them in)
    # are read as they are now.
    end = len(messages)
    while end and not isinstance(messages[end - 1], ModelResponse):
        end -= 1
    found = _scope.resumed_fold(
        'markers.conversation_ids', messages[:end], _ConversationIds, _ConversationIds.first
    )
    if found is None:
        found = next((m.conversation_id for m in messages[end:] if getattr(m, 'conversation_id', None)), None)
    return found


class _ConversationIds:
    """`first_conversation_id` as a fold: where the first message carrying a conversation id is."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.at: int | None = None

    def first(self) -> Any:
        return getattr(self.messages[self.at], 'conversation_id', None) if self.at is not None else None

    def truncate(self, n: int) -> None:
        del self.messages[n:]
        if self.at is not None and self.at >= n:
            self.at = None

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        start = len(self.messages)
        if self.at is None:
            self.at = next(
                (i for i in range(start, len(messages)) if getattr(messages[i], 'conversation_id', None)),
                None,
            )
        self.messages.extend(messages[start:])


# --- span ids ---------------------------------------------------------------------------------

_SIGNATURES: ObjectMemo[bytes] = ObjectMemo(max_bytes=8 * 1024 * 1024)
"""Each message's signature while it lives unchanged (weakly held: a span id keeps no message alive)."""


def span_ref(items: Sequence[ModelMessage | str]) -> str:
    """A short id for a span: `s` and 8 hex digits of a digest of what identifies its messages.

    The digest reads each message's kind, timestamp, run id, part kinds, tool call ids and text
    lengths (not whole tool outputs: cheap, and a marker's span is the same however its results
    were shortened before). A `str` item (an earlier span merged into this one) counts by its ref.
    """
    h = hashlib.blake2b(digest_size=4)
    for item in items:
        h.update(item.encode() if isinstance(item, str) else _signature(item))
        h.update(b'\x00')
    return 's' + h.hexdigest()


def message_signature(message: ModelMessage) -> bytes:
    """What identifies a message in a span's id (see `span_ref`)."""
    return _signature(message)


def _signature(message: ModelMessage) -> bytes:
    found = _SIGNATURES.get(message)
    if found is not None:
        return found
    stamp = getattr(message, 'timestamp', None)
    bits = [
        message.kind,
        stamp.isoformat() if stamp is not None else '',
        getattr(message, 'run_id', None) or '',
    ]
    for part in message.parts:
        kind = getattr(part, 'part_kind', type(part).__name__)
        call_id = getattr(part, 'tool_call_id', None) or ''
        # Tool results: their id says which; their (possibly already shortened) text does not count.
        size = '' if _parts.is_tool_result(part) else str(len(_parts.part_text(part)))
        bits.append(f'{kind}:{call_id}:{size}')
    signature = '|'.join(bits).encode('utf-8', 'surrogatepass')
    return _SIGNATURES.put(message, signature, size=len(signature))
