"""What every policy shares: standalone use as a pydantic-ai history processor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import RunContext

from ..tokens import default_counter
from ..views import CompileContext


def standalone_context(messages: Sequence[ModelMessage]) -> CompileContext:
    """The context a policy gets when it runs on its own, outside a profile."""
    return CompileContext(counter=default_counter(None), log=messages)


class SyncPolicy:
    """Mixin: `policy(messages)` runs `apply` with a standalone context (a sync history processor).

    Subclasses are dataclasses with a `name` and an `apply(messages, context)` method.
    """

    name: str

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        raise NotImplementedError

    def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        return self.apply(list(messages), standalone_context(messages))


class AsyncPolicy:
    """Mixin: `await policy(ctx, messages)` runs `apply` inside a pydantic-ai run (an async processor)."""

    name: str

    async def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        raise NotImplementedError

    async def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        context = standalone_context(messages)
        context.run_context = ctx
        context.model = getattr(ctx, 'model', None)
        context.run_id = getattr(ctx, 'run_id', None)
        return await self.apply(list(messages), context)
