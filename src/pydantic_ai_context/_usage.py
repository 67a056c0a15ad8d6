"""Usage anchoring: the tokens of a view, anchored on a provider's measurement when it still applies.

`pydantic_ai_context.tokens.measure_context` is the entry point; it resolves the counter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic_ai.messages import ModelMessage, ModelResponse


class _Counter(Protocol):
    """What anchoring needs of a `TokenCounter`."""

    @property
    def name(self) -> str: ...

    def count_messages(self, messages: Sequence[ModelMessage]) -> int: ...


@dataclass(frozen=True, kw_only=True)
class ContextUsage:
    """How many tokens a view holds, and whether a provider's measurement anchors the number.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest

        from pydantic_ai_context import HeuristicCounter
        from pydantic_ai_context.tokens import measure_context

        usage = measure_context([ModelRequest.user_text_prompt('hi')], counter=HeuristicCounter())
        assert not usage.anchored and usage.tokens == usage.estimated_tokens
        ```
    """

    tokens: int
    """The tokens of the view: anchored on the provider's count when possible, else counted."""

    anchored: bool
    """Whether `tokens` starts from a provider-measured `input_tokens + output_tokens`."""

    estimated_tokens: int
    """The counter's count of the whole view, whichever method `tokens` used."""

    provider_tokens: int = 0
    """The anchor response's input plus output tokens (0 when not anchored)."""

    anchor_index: int | None = None
    """The index in the view of the response whose usage anchors `tokens`."""

    counter: str = ''
    """The name of the counter that counted the rest."""

    reason: str = ''
    """Why the count is or is not anchored, for logs and events."""


def _context_input_tokens(response: ModelResponse) -> int:
    # pydantic-ai 2.x knows when a response's usage sums several model calls (Google long decodes,
    # Anthropic server-side tool loops) and records the input that measured the context; 1.x does not.
    try:
        from pydantic_ai._context_size import context_input_tokens
    except ImportError:
        return response.usage.input_tokens or 0
    return context_input_tokens(response) or 0


def _same_messages(a: Sequence[ModelMessage], b: Sequence[ModelMessage]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


def _index_in(log: Sequence[ModelMessage], message: ModelMessage) -> int | None:
    for i in range(len(log) - 1, -1, -1):
        if log[i] is message:
            return i
    for i in range(len(log) - 1, -1, -1):
        if log[i] == message:
            return i
    return None


def _measure(
    view: Sequence[ModelMessage],
    *,
    counter: _Counter,
    log: Sequence[ModelMessage] | None,
    sent: Sequence[ModelMessage] | None,
    reserved_system: int,
) -> ContextUsage:
    """`measure_context` once its counter is known."""
    estimated = counter.count_messages(view)

    def counted(reason: str) -> ContextUsage:
        return ContextUsage(
            tokens=estimated, anchored=False, estimated_tokens=estimated, counter=counter.name, reason=reason
        )

    index = next((i for i in range(len(view) - 1, -1, -1) if isinstance(view[i], ModelResponse)), None)
    if index is None:
        return counted('no response in the view')
    anchor = view[index]
    assert isinstance(anchor, ModelResponse)
    input_tokens = _context_input_tokens(anchor)
    if input_tokens <= 0:
        return counted('the newest response has no provider usage')
    prefix = view[:index]
    if sent is not None:
        if not _same_messages(prefix, sent):
            return counted('the view before the newest response is not what its request was sent')
        reason = 'the view before the newest response is what its request was sent'
    elif log is not None:
        position = _index_in(log, anchor)
        if position is None:
            return counted('the newest response is not in the log')
        if not _same_messages(prefix, log[:position]):
            return counted('compaction changed the messages before the newest response')
        reason = 'the view before the newest response matches the log'
    else:
        return counted('no log or sent messages to verify the anchor against')
    provider = input_tokens + (anchor.usage.output_tokens or 0)
    newer = estimated - counter.count_messages(view[: index + 1])
    return ContextUsage(
        tokens=max(0, provider - reserved_system + newer),
        anchored=True,
        estimated_tokens=estimated,
        provider_tokens=provider,
        anchor_index=index,
        counter=counter.name,
        reason=reason,
    )
