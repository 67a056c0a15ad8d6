"""The current run's prompt clamped to the room left, when nothing else can make the view fit.

The prompt is task framing (DESIGN.md invariant 1): `fit_to_budget` never drops it. When it alone is
larger than the room the rest of the smallest view leaves, its text is cut to head + tail with a
note of what was cut, and the whole request is kept for read-back under a span ref that the note
names (`read_context`). Images and files in it stay whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from pydantic_ai_context import _markers, _parts
from pydantic_ai_context.tokens import message_tokens
from pydantic_ai_context.views import CompileContext

__all__ = ('MARKER_KIND', 'clamp_prompt')

MARKER_KIND: Final = 'prompt_clamped'

NOTE: Final = (
    '[... ~{cut:,} tokens of this prompt cut by pydantic-ai-context to fit the context window '
    '(the prompt was ~{tokens:,} tokens) ...]\n{ref_line}'
)

_HEAD_SHARE: Final = 0.6
"""Share of what is kept taken from the prompt's start (the task is usually stated first)."""


def clamp_prompt(
    view: Sequence[ModelMessage], prompt: ModelMessage | None, used: int, limit: int, context: CompileContext
) -> tuple[list[ModelMessage], int] | None:
    """`view` with the text of `prompt`'s user prompt parts cut so the view takes at most `limit`
    tokens, and its tokens; None when `prompt` is not in `view`, has no text to cut, or cutting it
    cannot make the view fit."""
    if prompt is None:
        return None
    at = next((i for i, m in enumerate(view) if _holds(m, prompt)), None)
    if at is None:
        return None
    request = view[at]
    assert isinstance(request, ModelRequest)
    counter = context.counter
    before = message_tokens(counter, request)
    room = limit - (used - before)
    parts_in: list[Any] = list(request.parts)
    texts = [i for i, p in enumerate(parts_in) if _prompt_of(p, prompt) and isinstance(p.content, str)]
    if not texts or room <= 0:
        return None
    ref = _markers.span_ref([prompt])
    _markers.keep_span(context.originals, ref, [prompt])
    total = sum(counter.count_text(parts_in[i].content) for i in texts)
    for share in (0.8, 0.6, 0.4, 0.2):
        keep = int((room - (before - total)) * share)
        if keep < 1:
            break
        parts = list(parts_in)
        for i in texts:
            part = parts[i]
            tokens = counter.count_text(part.content)
            parts[i] = dataclasses.replace(
                part, content=_cut(part.content, tokens, keep * tokens // total, ref)
            )
        candidate = dataclasses.replace(
            request,
            parts=parts,
            metadata=_parts.with_marker(request.metadata, {'kind': MARKER_KIND, 'ref': ref, 'tokens': total}),
        )
        after = message_tokens(counter, candidate)
        if used - before + after <= limit:
            context.note(
                f'clamped the current prompt from ~{total:,} tokens to fit the limit of {limit:,} tokens',
                clamped_prompt=1,
            )
            out = list(view)
            out[at] = candidate
            return out, used - before + after
    return None


def _holds(message: ModelMessage, prompt: ModelMessage) -> bool:
    return message is prompt or (
        isinstance(message, ModelRequest) and any(_prompt_of(p, prompt) for p in message.parts)
    )


def _prompt_of(part: Any, prompt: ModelMessage) -> bool:
    return isinstance(part, UserPromptPart) and any(part is p for p in prompt.parts)


def _cut(text: str, tokens: int, keep: int, ref: str) -> str:
    chars = int(len(text) * keep / max(tokens, 1) * 0.9)
    head_chars = int(chars * _HEAD_SHARE)
    tail_chars = chars - head_chars
    head = text[:head_chars]
    tail = text[len(text) - tail_chars :] if tail_chars > 0 else ''
    cut = max(tokens - keep, 0)
    note = NOTE.format(cut=cut, tokens=tokens, ref_line=_markers.ref_line(ref))
    return f'{head}\n{note}\n{tail}'
