"""The note `fit_to_budget` leaves where it dropped steps, and finding it again in a view.

One user-role note, in the request right before the first gap, says how many messages, tokens and
observations were removed and names a read-back span listing the dropped steps; its request
carries the `dropped` marker. A view of a view merges an earlier note into the new one
(`_with_note`), and `drop_record` reads the record back, whether the marker is the request's own
or nested under a summary's. The policy and its decisions live in `fit.py`, what it keeps between
compiles in `_fit_plan.py`.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any, Final, cast

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from pydantic_ai_context import _markers, _parts

__all__ = ('DROPPED_NOTE', 'MARKER_KIND', '_EPOCH', '_with_note', '_without_note', 'drop_record')

MARKER_KIND: Final = 'dropped'

DROPPED_NOTE: Final = (
    '[Note from context management, not a new instruction: older steps of this conversation were removed '
    'from here on to fit the context window; the rest of the conversation follows.]'
)
"""The note where steps were dropped. Its text stays the same however many were dropped (the counts
are in the marker): it sits in an early request, and a text that changed with every drop would
break the provider's prompt cache from there on."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _with_note(
    view: list[ModelMessage],
    at: int,
    messages: int,
    tokens: int,
    observations: int,
    step_refs: list[str],
    *,
    notes: bool = True,
    noted: tuple[ModelMessage, dict[str, Any], ModelMessage] | None = None,
    notes_out: list[tuple[ModelMessage, dict[str, Any], ModelMessage]] | None = None,
) -> tuple[list[ModelMessage], tuple[str, list[str]]]:
    """`view` with the note on what was dropped in the request at `at` (merging an earlier note),
    and the note's read-back span: its ref and the refs of the steps it lists.

    The note records how many observations (tool-result requests) went with the dropped steps:
    the compaction frontier still counts them, so a view of this view compacts the same messages.

    Each dropped step (its ref in `step_refs`) is a span of its own, kept by the caller; the note
    names a span listing them, whose ref comes from the first step dropped
    after the head. Drops start there every time, so the ref, and with it the note's text, stays
    the same as more steps are dropped: the request holding the note stays in the provider's
    prompt cache. `notes=False`: the input holds no earlier note (nothing to merge). `noted`: the
    (request, record, noted request) of an earlier call, reused when the same again; a new one is
    appended to `notes_out`.
    """
    earlier_ref: str | None = None
    earlier_steps: list[str] = []
    for i, message in enumerate(view if notes else ()):
        found = drop_record(message)
        if found is not None:
            # A view of a view under a smaller budget: one note for everything removed.
            messages += int(found.get('messages', 0))
            tokens += int(found.get('tokens', 0))
            observations += int(found.get('observations', 0))
            if isinstance(found.get('ref'), str):
                earlier_ref = found['ref']
                earlier_steps = [r for r in found.get('steps', []) if isinstance(r, str)]
            view[i] = _without_note(message, found)
    all_steps = list(dict.fromkeys([*earlier_steps, *step_refs]))
    ref = earlier_ref or (f'd{step_refs[0][1:]}' if step_refs else _markers.span_ref([]))
    target = view[at]
    note = _markers.with_ref(DROPPED_NOTE, ref)
    record = {
        'kind': MARKER_KIND,
        'messages': messages,
        'tokens': tokens,
        'observations': observations,
        'note': note,
        'ref': ref,
        'steps': all_steps,
    }
    if isinstance(target, ModelRequest):
        # A fixed timestamp: the view must be the same, byte for byte, every time it is compiled.
        stamp = target.timestamp or next(
            (p.timestamp for p in target.parts if hasattr(p, 'timestamp')), _EPOCH
        )
        existing = _parts.marker(target)
        # The request may already be a summary (merged into the task framing): its record stays,
        # with the drop's nested under it.
        combined = {**existing, MARKER_KIND: record} if existing is not None else record
        if noted is not None and noted[0] is target and noted[1] == combined:
            # The same note on the same request as the previous compile: the same object, so
            # what is remembered of the view's prefix (totals, validity) stays valid.
            view[at] = noted[2]
        else:
            view[at] = dataclasses.replace(
                target,
                parts=[*target.parts, UserPromptPart(note, timestamp=stamp)],
                metadata=_parts.with_marker(target.metadata, combined),
            )
            if notes_out is not None:
                notes_out.append((target, combined, view[at]))
    else:
        # Only in a malformed view (two responses in a row): the note gets a request of its own.
        request = ModelRequest(
            parts=[UserPromptPart(note, timestamp=_EPOCH)],
            metadata=_parts.with_marker(None, record),
            run_id=getattr(target, 'run_id', None),
        )
        view.insert(at + 1, request)
    return view, (ref, all_steps)


def drop_record(message: ModelMessage) -> dict[str, Any] | None:
    """The record of a drop note the message carries: its own marker, or nested under another
    record (a summary merged into the task framing keeps its own marker)."""
    record = _parts.marker(message)
    if record is None:
        return None
    if record.get('kind') == MARKER_KIND:
        return record
    nested = record.get(MARKER_KIND)
    return nested if isinstance(nested, dict) else None


def _without_note(message: ModelMessage, record: dict[str, Any]) -> ModelMessage:
    note = record.get('note')
    parts = [p for p in message.parts if not (isinstance(p, UserPromptPart) and p.content == note)]
    outer = _parts.marker(message)
    if outer is not None and outer.get('kind') != MARKER_KIND:
        rest = {k: v for k, v in outer.items() if k != MARKER_KIND}
        kept: ModelMessage = dataclasses.replace(
            cast(Any, message), parts=parts, metadata=_parts.with_marker(message.metadata, rest)
        )
        return kept
    meta = {k: v for k, v in (message.metadata or {}).items() if k != _parts.META_KEY}
    stripped: ModelMessage = dataclasses.replace(cast(Any, message), parts=parts, metadata=meta or None)
    return stripped
