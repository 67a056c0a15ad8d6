"""Provider-native compaction as a boundary: what of a log the provider is still sent.

A provider's compaction (`OpenAICompaction`, `AnthropicCompaction`, `Model.compact_messages` on
pydantic-ai 2.68+) is stored as a `CompactionPart` inside a `ModelResponse`: OpenAI's is encrypted
(`content=None`, the state in `provider_details['encrypted_content']`), Anthropic's carries a
readable summary and a signature. Each adapter sends nothing from before the latest such part but
the standing prompt (the opening system prompt parts of the first request), and
`pydantic_ai.messages.post_compaction_window` is the same boundary rule.

This module is that rule for the chain. `window(messages)` is what a profile compiles: the standing
prompt plus the messages from the latest provider part on (the response holding it starts at that
part). Every policy therefore acts on what is sent, the budget and the gauge count it, and the
response holding the part is kept while it is the boundary (`holds_provider_part`: `message_pinned`
says yes for it, so nothing drops, masks, clips, summarises or collapses it).

A `CompactionPart` in a *request* is not a provider part: it is a summary the application (or this
package's summariser) wrote, sent as text. It is no boundary here, unlike in pydantic-ai's
`post_compaction_window`, which also starts its window at such a summary's turn.

No import of the rest of the package: `_parts` asks this module whether a message is pinned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from . import _memo
from ._scope import resumed_fold

__all__ = (
    'OPAQUE_BYTES_PER_TOKEN',
    'boundary',
    'holds_provider_part',
    'opaque_tokens',
    'provider_part_index',
    'standing_prompt',
    'window',
)

OPAQUE_BYTES_PER_TOKEN: Final = 4
"""An opaque part (OpenAI's `encrypted_content`, base64) is estimated as the text its decoded bytes
could hold, at this many bytes a token, until provider usage anchors the count."""


def is_provider_part(part: Any) -> bool:
    """A compaction part as a provider stores it (the caller checks it sits in a response)."""
    return getattr(part, 'part_kind', None) == 'compaction'


def provider_part_index(message: ModelMessage) -> int | None:
    """The index of the latest provider compaction part in `message` (a response), or `None`."""
    if not isinstance(message, ModelResponse):
        return None
    parts = message.parts
    for j in range(len(parts) - 1, -1, -1):
        if is_provider_part(parts[j]):
            return j
    return None


def holds_provider_part(message: ModelMessage) -> bool:
    """`message` is a response holding a provider compaction part (kept while it is the boundary)."""
    return isinstance(message, ModelResponse) and any(is_provider_part(p) for p in message.parts)


def opens_with_provider_part(message: ModelMessage) -> bool:
    """A response whose first part is a provider compaction part: one a view may start with (what
    `OpenAICompaction(stateless=True)` leaves, and what `post_compaction_window` returns)."""
    return isinstance(message, ModelResponse) and bool(message.parts) and is_provider_part(message.parts[0])


class _Boundaries:
    """The positions of the responses holding a provider compaction part, as a fold."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.at: list[int] = []

    def truncate(self, n: int) -> None:
        del self.messages[n:]
        while self.at and self.at[-1] >= n:
            self.at.pop()

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        for i in range(len(self.messages), len(messages)):
            message = messages[i]
            if isinstance(message, ModelResponse) and holds_provider_part(message):
                self.at.append(i)
            self.messages.append(message)

    def latest(self) -> tuple[int, ...]:
        return tuple(self.at[-2:])


def boundary(messages: Sequence[ModelMessage]) -> tuple[int, int] | None:
    """(message index, part index) of the active provider compaction part in `messages`, or `None`.

    The active part is the latest one, unless it sits in a trailing response (a finished run, no
    request yet): a view leaves that response out, so the part before it is the boundary.
    """
    if not messages:
        return None
    # Resumed from the previous compile's list: the scan costs the new messages only.
    latest = resumed_fold('compaction.boundary', messages, _Boundaries, _Boundaries.latest)
    if latest and latest[-1] == len(messages) - 1:
        latest = latest[:-1]
    if not latest:
        return None
    at = latest[-1]
    part = provider_part_index(messages[at])
    assert part is not None
    return at, part


_COPIES: _memo.ObjectMemo[Any] = _memo.ObjectMemo(max_bytes=4 * 1024 * 1024)
"""The standing prompt request and the boundary response cut at its part, the same object each compile."""


def standing_prompt(prefix: Iterable[ModelMessage]) -> ModelRequest | None:
    """What of `prefix` (the messages before the boundary) the adapters still send: the opening
    system prompt parts of the first request, as a request of their own (`None` if it has none).

    Instructions are not carried over: every request of a run carries the run's own, and pydantic-ai
    sends the newest request's.
    """
    first = next((m for m in prefix if isinstance(m, ModelRequest)), None)
    if first is None or not first.parts:
        return None
    opening = 0
    for part in first.parts:
        if getattr(part, 'part_kind', None) != 'system-prompt':
            break
        opening += 1
    if opening == 0:
        return None
    if opening == len(first.parts) and first.instructions is None:
        return first
    found: ModelRequest = _memo.remembered_copy(_COPIES, first, 'standing', _opening_request, first, opening)
    return found


def _opening_request(first: ModelRequest, opening: int) -> ModelRequest:
    return dataclasses.replace(first, parts=list(first.parts[:opening]), instructions=None)


def _from_part(message: ModelResponse, part: int) -> ModelResponse:
    return dataclasses.replace(message, parts=list(message.parts[part:]))


def window(messages: Sequence[ModelMessage]) -> Sequence[ModelMessage]:
    """What of `messages` a provider is sent after its own compaction: the standing prompt, then the
    messages from the active provider compaction part on (see `boundary`). `messages` itself when
    it holds none.

    Example (pydantic-ai 2.68+, which has `CompactionPart`):
        ```python {requires="2.68"}
        from pydantic_ai.messages import (
            CompactionPart,
            ModelRequest,
            ModelResponse,
            SystemPromptPart,
            TextPart,
            UserPromptPart,
        )

        from pydantic_ai_context._compaction import window

        part = CompactionPart(content='The user asked for a haiku; one was written.', provider_name='anthropic')
        log = [
            ModelRequest(parts=[SystemPromptPart('Be brief.'), UserPromptPart('A haiku, please.')]),
            ModelResponse(parts=[TextPart('...')]),
            ModelRequest(parts=[UserPromptPart('Another one.')]),
            ModelResponse(parts=[part, TextPart('Here it is.')]),
            ModelRequest(parts=[UserPromptPart('Thanks!')]),
        ]
        sent = window(log)
        assert [type(m).__name__ for m in sent] == ['ModelRequest', 'ModelResponse', 'ModelRequest']
        assert sent[0].parts[0].content == 'Be brief.' and sent[1].parts[0] is part
        ```
    """
    found = boundary(messages)
    if found is None:
        return messages
    at, part = found
    response = messages[at]
    assert isinstance(response, ModelResponse)
    if part:
        response = _memo.remembered_copy(_COPIES, response, ('from', part), _from_part, response, part)
    standing = standing_prompt(messages[i] for i in range(at))
    head: list[ModelMessage] = [standing] if standing is not None else []
    return [*head, response, *messages[at + 1 :]]


def opaque_tokens(part: Any) -> int:
    """The estimated tokens of a provider part the counter cannot read (OpenAI's encrypted state):
    the bytes its base64 payload decodes to, at `OPAQUE_BYTES_PER_TOKEN`; 0 for any other part."""
    if not is_provider_part(part) or getattr(part, 'content', None):
        return 0
    details = getattr(part, 'provider_details', None)
    payload = details.get('encrypted_content') if isinstance(details, dict) else None
    if not isinstance(payload, str):
        return 0
    return len(payload) * 3 // 4 // OPAQUE_BYTES_PER_TOKEN
