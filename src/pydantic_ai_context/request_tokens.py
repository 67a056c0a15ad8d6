"""The tokens of one model request as pydantic-ai sends it: the one function every measurement uses.

pydantic-ai records `instructions` on every `ModelRequest` of a run's history, but a model is sent
only the newest request's, once. Summing `count_message` over a view charges them once per
request: a 3k-token instruction on a 10-step run reads as 33k. `weigh_request` counts a view the
way the request goes out: each message's parts, the instructions in effect once, and what the
request sends besides its messages (tool definitions, output schema, native tools: see
`pydantic_ai_context.overhead`). The live gauge (`ContextUsageEvent`), `replay`, `inspect`, the
replay chart and `history_stats` all weigh requests with it, so their numbers agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic_ai.messages import ModelMessage

from ._instructions import _Instructions as _Instructions
from ._instructions import newest_instructions
from .tokens import TokenCounter, message_tokens

if TYPE_CHECKING:
    from .overhead import RequestOverhead

__all__ = ('RequestTokens', 'newest_instructions', 'weigh_request')


@dataclass(frozen=True, kw_only=True)
class RequestTokens:
    """One request's tokens, split as it is sent: messages, instructions (once), tools and other overhead.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context import HeuristicCounter
        from pydantic_ai_context.request_tokens import weigh_request

        rules = 'Be careful. ' * 200
        view = [
            ModelRequest(parts=[UserPromptPart('hi')], instructions=rules),
            ModelResponse(parts=[TextPart('hello')]),
            ModelRequest(parts=[UserPromptPart('and now?')], instructions=rules),
        ]
        counter = HeuristicCounter()
        weight = weigh_request(view, counter=counter, overhead_tokens=500)
        assert weight.instructions_tokens == counter.count_text(rules)  # once, not once per request
        assert weight.view_tokens == counter.count_messages(view)
        assert weight.total_tokens == weight.view_tokens + 500
        ```
    """

    message_tokens: int
    """The messages' parts and framing, without any instructions."""
    instructions_tokens: int
    """The instructions the request sends, counted once."""
    counted_instructions_tokens: int
    """The instructions stored on the newest request of the view (what `count_messages` adds to the
    messages); differs from `instructions_tokens` when the request sends others (dynamic instructions,
    the read-back instruction, prompted-output instructions)."""
    tools_tokens: int = 0
    """Tool definitions, output schema and native tools, as `measure_overhead` counts them."""
    extra_tokens: int = 0
    """Overhead given as a number (`replay --overhead-tokens`, an explicit `reserved_system`)."""
    instructions: str | None = None
    """The instructions text the messages carry (the newest request's), for comparing requests."""
    per_message: tuple[int, ...] | None = None
    """Each message's tokens (without instructions), when asked for (`weigh_request(per_message=True)`)."""

    @property
    def view_tokens(self) -> int:
        """The messages plus the instructions they carry, once: `counter.count_messages(view)`."""
        return self.message_tokens + self.counted_instructions_tokens

    @property
    def overhead_tokens(self) -> int:
        """Everything the request sends besides its messages and their instructions."""
        return (
            self.tools_tokens
            + self.extra_tokens
            + max(0, self.instructions_tokens - self.counted_instructions_tokens)
        )

    @property
    def total_tokens(self) -> int:
        """The whole request: messages, instructions once, tools and other overhead."""
        return self.message_tokens + self.instructions_tokens + self.tools_tokens + self.extra_tokens


def weigh_request(
    messages: Sequence[ModelMessage],
    *,
    counter: TokenCounter,
    overhead: RequestOverhead | None = None,
    overhead_tokens: int = 0,
    per_message: bool = False,
) -> RequestTokens:
    """Weigh a request made of `messages` as pydantic-ai sends it.

    `overhead` is a `RequestOverhead` measured for the request (`measure_overhead`): its tool
    definitions are added, and its instructions (those the request sends) replace the stored ones
    in `instructions_tokens`. `overhead_tokens` adds a number (tools a recorded log cannot show).
    `per_message` also records each message's tokens (for a cached-prefix comparison).
    """
    total = counter.count_messages(messages)
    newest = newest_instructions(messages)
    counted = counter.count_message(newest) - message_tokens(counter, newest) if newest is not None else 0
    sent = counted
    tools = 0
    if overhead is not None:
        sent, tools = overhead.instructions_tokens, overhead.tools_tokens
    return RequestTokens(
        message_tokens=max(0, total - counted),
        instructions_tokens=sent,
        counted_instructions_tokens=counted,
        tools_tokens=tools,
        extra_tokens=overhead_tokens,
        instructions=newest.instructions if newest is not None else None,
        per_message=tuple(message_tokens(counter, m) for m in messages) if per_message else None,
    )
