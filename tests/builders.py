"""A small readable builder for pydantic-ai histories used across the tests."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

_ids = itertools.count()


def call_id() -> str:
    return f'call_{next(_ids):05d}'


@dataclass
class Tool:
    """One tool call and its result, for `History.step`."""

    name: str
    args: dict[str, Any] | str | None = None
    result: Any = 'ok'
    id: str = field(default_factory=call_id)
    failed: bool = False


@dataclass
class History:
    """Builds a history step by step.

    Example: `History().user('fix it', system='be brief').step(Tool('ls', {}, 'a.py')).answer('done').messages`
    """

    messages: list[ModelMessage] = field(default_factory=list)
    stamp_runs: bool = False
    _run: int = 0

    def _rid(self) -> dict[str, Any]:
        return {'run_id': f'run-{self._run}'} if self.stamp_runs else {}

    def user(self, text: str, *, system: str | None = None) -> History:
        self._run += 1
        parts: list[Any] = []
        if system is not None:
            parts.append(SystemPromptPart(system))
        parts.append(UserPromptPart(text))
        self.messages.append(ModelRequest(parts=parts, **self._rid()))
        return self

    def step(self, *tools: Tool, text: str | None = None, thinking: str | None = None) -> History:
        """A response calling `tools` (in parallel), then the request with their results."""
        response_parts: list[Any] = []
        if thinking:
            response_parts.append(ThinkingPart(thinking))
        if text:
            response_parts.append(TextPart(text))
        response_parts += [ToolCallPart(t.name, t.args, tool_call_id=t.id) for t in tools]
        self.messages.append(ModelResponse(parts=response_parts, **self._rid()))
        self.messages.append(
            ModelRequest(parts=[_result(t) for t in tools], **self._rid()),
        )
        return self

    def call(self, *tools: Tool) -> History:
        """A response calling `tools` whose results are not (yet) in the history."""
        self.messages.append(
            ModelResponse(
                parts=[ToolCallPart(t.name, t.args, tool_call_id=t.id) for t in tools], **self._rid()
            )
        )
        return self

    def answer(self, text: str, *, input_tokens: int = 0, output_tokens: int = 0) -> History:
        usage = RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens)
        self.messages.append(ModelResponse(parts=[TextPart(text)], usage=usage, **self._rid()))
        return self

    def build(self) -> list[ModelMessage]:
        return list(self.messages)


def _result(tool: Tool) -> Any:
    part = ToolReturnPart(tool.name, tool.result, tool_call_id=tool.id)
    if tool.failed and hasattr(part, 'outcome'):
        import dataclasses

        part = dataclasses.replace(part, outcome='failed')
    return part


def long_text(n_lines: int, *, prefix: str = 'line') -> str:
    return '\n'.join(f'{prefix} {i}: ' + 'x' * 60 for i in range(n_lines))
