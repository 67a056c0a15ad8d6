"""The instructions a request sends: pydantic-ai sends only the newest request's, once.

Shared by `request_tokens` (weighing a request) and `overhead` (measuring what it sends besides its
messages); both import it from here, and `request_tokens` re-exports `newest_instructions`.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from ._scope import resumed_fold

__all__ = ('newest_instructions',)


def newest_instructions(messages: Sequence[ModelMessage]) -> ModelRequest | None:
    """The newest request that carries `instructions`: pydantic-ai sends only its instructions."""
    # The requests after the last response are read as they are now (pydantic-ai fills in the
    # newest one's instructions before sending it); before them, during a compile, the fold of the
    # previous list is resumed from its first changed message (most runs set instructions on no
    # request: a backwards scan would read every message).
    end = len(messages)
    while end and not isinstance(messages[end - 1], ModelResponse):
        message = messages[end - 1]
        if isinstance(message, ModelRequest) and message.instructions:
            return message
        end -= 1
    if not end:
        return None
    # The fold reads only messages a response follows: those are sent, and stay as they are.
    found = resumed_fold('request_tokens.instructions', messages[:end], _Instructions, _Instructions.newest)
    newest = messages[found] if found is not None else None
    return newest if isinstance(newest, ModelRequest) else None


class _Instructions:
    """`newest_instructions` as a fold: the indices of the requests that carry instructions."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.found: list[int] = []

    def newest(self) -> int | None:
        return self.found[-1] if self.found else None

    def truncate(self, n: int) -> None:
        del self.messages[n:], self.found[bisect.bisect_left(self.found, n) :]

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        for i in range(len(self.messages), len(messages)):
            message = messages[i]
            if isinstance(message, ModelRequest) and message.instructions:
                self.found.append(i)
            self.messages.append(message)
