"""The normalizer: any history made a valid view by small repair passes, each reported.

Also `patch_dangling_tool_calls`, the one repair meant for the canonical log.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolReturnPart

from .. import _compaction, _memo, _parts
from ._call_ids import _unique_call_ids
from ._pairing import Repair, check_messages
from ._validity import _already_valid, _shape

logger = logging.getLogger('pydantic_ai_context.integrity')

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

INTERRUPTED_NOTE = 'Tool call was not completed: no result was recorded.'


@dataclass
class _Slot:
    """A message of the view under construction, with the input indices it came from."""

    message: ModelMessage
    sources: list[int] = field(default_factory=list)

    @property
    def index(self) -> int:
        return self.sources[0] if self.sources else -1


def normalize_with_repairs(messages: Sequence[ModelMessage]) -> tuple[list[ModelMessage], list[Repair]]:
    """Return a valid view of `messages` and the list of repairs that made it so.

    Repairs, each safe for a view (the log keeps everything):

    - empty messages are dropped; consecutive requests (or responses) are merged into one (a
      request that opens a new run, by its prompt and run id, gives the merged one its run id);
    - leading responses are dropped (a view starts with a request), except one holding a provider's
      compaction part (`CompactionPart`), which is kept from that part on: a view may start with it,
      as pydantic-ai's `post_compaction_window` and a stateless compaction do;
    - results whose call is not in the response right before them are dropped (orphans),
      as are repeated call ids within one response and repeated results for one call;
    - calls without a result get a synthetic result saying so (`outcome='interrupted'` on
      pydantic-ai 2.x), in the next request or, after the last response, in a new request;
    - a trailing response without calls is left out (a model request must end with a request);
    - a call id an earlier step already used is renamed, with its result (`unique_call_ids`);
    - tool-call arguments nested deeper than `MAX_ARGUMENTS_DEPTH` (200) levels are sent as their
      JSON text: nothing here, in pydantic-ai or in a provider SDK, has to walk them recursively.

    Raises:
        HistoryIntegrityError: an element is not a `ModelRequest`/`ModelResponse`.
    """
    check_messages(messages)
    if _already_valid(messages):
        return list(messages), []
    repairs: list[Repair] = []
    slots = [_Slot(m, [i]) for i, m in enumerate(_unique_call_ids(messages, repairs))]
    # Each pass can expose work for another (dropping an orphan can empty a request, which makes
    # two responses adjacent); iterate to a fixed point, which also makes normalize idempotent.
    for _ in range(len(slots) + 2):
        before = len(repairs)
        slots = _drop_empty(slots, repairs)
        slots = _opaque_arguments(slots, repairs)
        slots = _merge_adjacent(slots, repairs)
        slots = _drop_leading_responses(slots, repairs)
        slots = _pair(slots, repairs)
        slots = _end_with_request(slots, repairs)
        if len(repairs) == before:
            break
    for repair in repairs:
        logger.info('normalize repaired %s', repair)
    return [s.message for s in slots], repairs


def normalize(
    messages: Sequence[ModelMessage],
    *,
    on_repair: Callable[[Repair], None] | None = None,
) -> list[ModelMessage]:
    """Return a valid view of `messages` (invariants 2 and 7), repairing what is safe to repair.

    Each repair is logged on the `pydantic_ai_context.integrity` logger and passed to
    `on_repair`. A valid history comes back equal to the input (as a new list).
    Usable directly as a history processor.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, UserPromptPart

        from pydantic_ai_context import normalize

        interrupted = [
            ModelRequest(parts=[UserPromptPart('run the tests')]),
            ModelResponse(parts=[ToolCallPart('pytest', {}, tool_call_id='t1')]),
        ]
        view = normalize(interrupted)
        assert len(view) == 3 and view[2].parts[0].tool_call_id == 't1'
        assert len(interrupted) == 2  # the input is never changed
        ```
    """
    view, repairs = normalize_with_repairs(messages)
    if on_repair is not None:
        for repair in repairs:
            on_repair(repair)
    return view


def _drop_empty(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    out: list[_Slot] = []
    for slot in slots:
        if not slot.message.parts:
            kind = 'request' if isinstance(slot.message, ModelRequest) else 'response'
            repairs.append(Repair(kind='empty_message', index=slot.index, detail=f'empty {kind} left out'))
        else:
            out.append(slot)
    return out


def _opaque_arguments(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    out: list[_Slot] = []
    for slot in slots:
        message = slot.message
        if isinstance(message, ModelResponse) and _shape(message)[3]:
            # The same copy every compile, so what is remembered about it stays warm.
            copy = _memo.remembered_copy(
                _AS_TEXT, message, None, _with_arguments_as_text, message, size=_parts_text_size
            )
            for part in message.parts:
                if _parts.is_tool_call(part) and _parts.arguments_too_deep(part):
                    repairs.append(
                        Repair(
                            kind='opaque_arguments',
                            index=slot.index,
                            detail=f'arguments of call {part.tool_call_id!r} ({part.tool_name}) are nested deeper '
                            f'than {_parts.MAX_ARGUMENTS_DEPTH} levels; sent as their JSON text',
                            tool_call_id=part.tool_call_id,
                        )
                    )
            slot = _Slot(copy, slot.sources)
        out.append(slot)
    return out


_AS_TEXT: _memo.ObjectMemo[Any] = _memo.ObjectMemo(max_bytes=16 * 1024 * 1024)


def _parts_text_size(message: ModelMessage) -> int:
    return sum(len(_parts.args_text(p)) for p in _parts.tool_calls(message))


def _with_arguments_as_text(message: ModelResponse) -> ModelResponse:
    parts = [
        dataclasses.replace(p, args=_parts.json_text(p.args))
        if _parts.is_tool_call(p) and _parts.arguments_too_deep(p)
        else p
        for p in message.parts
    ]
    return dataclasses.replace(message, parts=parts)


def _merge_adjacent(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    out: list[_Slot] = []
    for slot in slots:
        prev = out[-1] if out else None
        if (
            prev is not None
            and isinstance(prev.message, ModelRequest)
            and isinstance(slot.message, ModelRequest)
        ):
            merged = dataclasses.replace(
                prev.message,
                parts=[*prev.message.parts, *slot.message.parts],
                instructions=slot.message.instructions or prev.message.instructions,
                metadata=_merged_metadata(prev.message, slot.message),
            )
            run_id = _parts.merged_run_id(getattr(prev.message, 'run_id', None), slot.message)
            if run_id != getattr(prev.message, 'run_id', None):
                merged = dataclasses.replace(merged, run_id=run_id)
            out[-1] = _Slot(merged, prev.sources + slot.sources)
            repairs.append(
                Repair(
                    kind='merged_requests', index=slot.index, detail='consecutive requests merged into one'
                )
            )
        elif (
            prev is not None
            and isinstance(prev.message, ModelResponse)
            and isinstance(slot.message, ModelResponse)
        ):
            merged_response = dataclasses.replace(
                prev.message,
                parts=[*prev.message.parts, *slot.message.parts],
                metadata=_merged_metadata(prev.message, slot.message),
            )
            out[-1] = _Slot(merged_response, prev.sources + slot.sources)
            repairs.append(
                Repair(
                    kind='merged_responses', index=slot.index, detail='consecutive responses merged into one'
                )
            )
        else:
            out.append(slot)
    return out


def _merged_metadata(first: ModelMessage, second: ModelMessage) -> Any:
    """The first message's metadata, pinned when either message was: a pin on the second message
    must survive the merge (the application asked for that content to be kept)."""
    if _parts.is_pinned(second) and not _parts.is_pinned(first):
        return {**(first.metadata or {}), 'pinned': True}
    return first.metadata


def _drop_leading_responses(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    start = 0
    while start < len(slots) and isinstance(slots[start].message, ModelResponse):
        slot = slots[start]
        response = slot.message
        part = _compaction.provider_part_index(response)
        if part is not None and isinstance(response, ModelResponse):
            # A provider's compaction opens the view (`post_compaction_window`, a stateless
            # compaction): kept, from its part on, like the adapters send it.
            if part:
                repairs.append(
                    Repair(
                        kind='leading_response',
                        index=slot.index,
                        detail="a view may start with a provider's compaction; the parts before it are left out",
                    )
                )
                kept = dataclasses.replace(response, parts=list(response.parts[part:]))
                return [_Slot(kept, slot.sources), *slots[start + 1 :]]
            return slots[start:]
        repairs.append(
            Repair(
                kind='leading_response',
                index=slots[start].index,
                detail='a view starts with a request; the response before the first request is left out',
            )
        )
        start += 1
    return slots[start:]


def _pair(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    out = list(slots)
    for i, slot in enumerate(out):
        message = slot.message
        if isinstance(message, ModelResponse):
            seen: set[str] = set()
            kept: list[Any] = []
            response_parts: list[Any] = list(message.parts)
            for part in response_parts:
                if _parts.is_tool_call(part):
                    if part.tool_call_id in seen:
                        repairs.append(
                            Repair(
                                kind='duplicate_call',
                                index=slot.index,
                                detail=f'repeated call id {part.tool_call_id!r} ({part.tool_name}) left out',
                                tool_call_id=part.tool_call_id,
                            )
                        )
                        continue
                    seen.add(part.tool_call_id)
                kept.append(part)
            if len(kept) != len(message.parts):
                out[i] = _Slot(dataclasses.replace(message, parts=kept), slot.sources)
            continue
        prev = out[i - 1].message if i > 0 else None
        calls = {c.tool_call_id: c for c in _parts.tool_calls(prev)} if prev is not None else {}
        answered: set[str] = set()
        new_parts: list[Any] = []
        changed = False
        request_parts: list[Any] = list(message.parts)
        for part in request_parts:
            if _parts.is_tool_result(part):
                cid = part.tool_call_id
                if cid not in calls:
                    repairs.append(
                        Repair(
                            kind='orphan_result',
                            index=slot.index,
                            detail=f'result for {cid!r} ({getattr(part, "tool_name", None)}) has no call '
                            'in the response before it; left out of the view',
                            tool_call_id=cid,
                        )
                    )
                    changed = True
                    continue
                if cid in answered:
                    repairs.append(
                        Repair(
                            kind='duplicate_result',
                            index=slot.index,
                            detail=f'second result for {cid!r} left out',
                            tool_call_id=cid,
                        )
                    )
                    changed = True
                    continue
                answered.add(cid)
            new_parts.append(part)
        missing = [c for cid, c in calls.items() if cid not in answered]
        if missing:
            changed = True
            synthetic = [_synthetic_result(c, INTERRUPTED_NOTE, out[i - 1].message) for c in missing]
            for c in missing:
                repairs.append(
                    Repair(
                        kind='dangling_call',
                        index=out[i - 1].index,
                        detail=f'call {c.tool_call_id!r} ({c.tool_name}) had no result; a synthetic one was added',
                        tool_call_id=c.tool_call_id,
                    )
                )
            new_parts = synthetic + new_parts
        if changed:
            out[i] = _Slot(dataclasses.replace(message, parts=new_parts), slot.sources)
    return out


def _end_with_request(slots: list[_Slot], repairs: list[Repair]) -> list[_Slot]:
    if not slots or isinstance(slots[-1].message, ModelRequest):
        return slots
    last = slots[-1]
    calls = _parts.tool_calls(last.message)
    if calls:
        for c in calls:
            repairs.append(
                Repair(
                    kind='dangling_call',
                    index=last.index,
                    detail=f'call {c.tool_call_id!r} ({c.tool_name}) in the last response had no result; '
                    'a synthetic one was added',
                    tool_call_id=c.tool_call_id,
                )
            )
        request = ModelRequest(
            parts=[_synthetic_result(c, INTERRUPTED_NOTE, last.message) for c in _unique_calls(calls)],
            timestamp=getattr(last.message, 'timestamp', None),
        )
        request = _copy_run_ids(request, last.message)
        return [*slots, _Slot(request, [])]
    repairs.append(
        Repair(
            kind='trailing_response',
            index=last.index,
            detail='a view sent to a model ends with a request; the final response is left out of it',
        )
    )
    return slots[:-1]


def _unique_calls(calls: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for c in calls:
        if c.tool_call_id not in seen:
            seen.add(c.tool_call_id)
            out.append(c)
    return out


def _copy_run_ids(request: ModelRequest, like: ModelMessage) -> ModelRequest:
    updates = {
        name: getattr(like, name)
        for name in ('run_id', 'conversation_id')
        if hasattr(request, name) and getattr(like, name, None)
    }
    return dataclasses.replace(request, **updates) if updates else request


def _synthetic_result(call: Any, note: str, response: ModelMessage) -> ToolReturnPart:
    # The response's timestamp, not the clock: the same log must give the same view.
    part = ToolReturnPart(
        tool_name=call.tool_name,
        content=note,
        tool_call_id=call.tool_call_id,
        metadata={_parts.META_KEY: {'kind': 'synthetic', 'reason': 'dangling_call'}},
        timestamp=response.timestamp or _EPOCH,
    )
    if hasattr(part, 'outcome'):
        part = dataclasses.replace(part, outcome=_parts.INTERRUPTED_OUTCOME)
    return part


def patch_dangling_tool_calls(
    messages: Sequence[ModelMessage], *, note: str = 'Interrupted by user.'
) -> list[ModelMessage]:
    """Give every tool call that has no result a synthetic result carrying `note`.

    For chat loops after an interrupt (Ctrl-C during tool execution): the history can be sent
    again without the provider rejecting an unanswered call. Unlike `normalize`, this is meant for
    the canonical log, so it changes nothing else: orphans, merges and a trailing response stay
    as they are. The input is not mutated.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, UserPromptPart

        from pydantic_ai_context import patch_dangling_tool_calls

        history = [
            ModelRequest(parts=[UserPromptPart('deploy')]),
            ModelResponse(parts=[ToolCallPart('deploy', {'env': 'prod'}, tool_call_id='d1')]),
        ]
        patched = patch_dangling_tool_calls(history)
        assert patched[-1].parts[0].content == 'Interrupted by user.'
        ```
    """
    check_messages(messages)
    out: list[ModelMessage] = []
    n = len(messages)
    i = 0
    while i < n:
        message = messages[i]
        out.append(message)
        calls = _unique_calls(_parts.tool_calls(message))
        if calls:
            nxt = messages[i + 1] if i + 1 < n else None
            if isinstance(nxt, ModelRequest):
                answered = {r.tool_call_id for r in _parts.tool_results(nxt)}
                missing = [c for c in calls if c.tool_call_id not in answered]
                if missing:
                    patched = [_synthetic_result(c, note, message) for c in missing]
                    out.append(dataclasses.replace(nxt, parts=[*patched, *nxt.parts]))
                    i += 2
                    continue
            else:
                request = ModelRequest(
                    parts=[_synthetic_result(c, note, message) for c in calls],
                    timestamp=getattr(message, 'timestamp', None),
                )
                out.append(_copy_run_ids(request, message))
        i += 1
    return out
