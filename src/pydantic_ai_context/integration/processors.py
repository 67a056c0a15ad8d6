"""The history-processor adapter: the profile's view replaces the run's history.

`ContextProfile.history_processors` (pydantic-ai 1.x: `Agent(history_processors=...)`) and
`ContextProfile.process_history()` (the opt-in destructive mode on 2.x) are built here. A history
processor sees the run's tool definitions through its `RunContext` (`gauge.run_tool_definitions`)
but not native tools or output instructions, and cannot retry a rejected request: the capability can.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage
from pydantic_ai.tools import RunContext

__all__ = ('HistoryProcessor', 'history_processor', 'process_history')

HistoryProcessor = Callable[[RunContext[Any], list[ModelMessage]], Awaitable[list[ModelMessage]]]


class _Compiles(Protocol):
    name: str

    async def compile_request(
        self, messages: Sequence[ModelMessage], ctx: Any = None, *, model: Any = None
    ) -> list[ModelMessage]: ...


def history_processor(owner: _Compiles) -> HistoryProcessor:
    """A history processor that returns `owner`'s view of the run's history (named after the profile).

    Example:
        ```python
        import asyncio

        from pydantic_ai.messages import ModelRequest

        from pydantic_ai_context import profile
        from pydantic_ai_context.integration.processors import history_processor

        compile_history = history_processor(profile('transparent', context_window=32_000))
        assert compile_history.__name__ == 'transparent_profile'
        history = [ModelRequest.user_text_prompt('hello')]
        assert asyncio.run(compile_history(None, history)) == history  # pydantic-ai passes its RunContext
        ```
    """

    async def compile_history(ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        return await owner.compile_request(messages, ctx)

    compile_history.__name__ = f'{owner.name}_profile'
    return compile_history


def process_history(owner: _Compiles) -> AbstractCapability[Any]:
    """pydantic-ai 2.x's `ProcessHistory` capability around `owner`'s history processor."""
    from pydantic_ai.capabilities import ProcessHistory

    return ProcessHistory(history_processor(owner))
