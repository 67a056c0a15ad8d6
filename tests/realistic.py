"""A realistic tool-using agent for tests of the budget path (DESIGN.md section 7).

25 tools with documented JSON schemas (about 10.5k tokens of definitions), about 3.7k tokens of
instructions, a `read_file` tool returning about 3k tokens, and a scripted `FunctionModel` whose
function measures the whole request it receives (messages + instructions + tool definitions)
with the library's counter, independently of the library's own measurement.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import Tool, ToolDefinition
from pydantic_ai.usage import RequestUsage

from pydantic_ai_context import ContextProfile, TokenCounter
from pydantic_ai_context._parts import PYDANTIC_AI_MAJOR
from pydantic_ai_context.tokens import default_counter

_VOCABULARY = (
    'agent repository module function request budget context window token parser cache index '
    'schema field value record branch commit review patch test suite failure error warning path '
    'config setting option default override payload header client server worker queue retry '
    'timeout deadline stream buffer chunk offset limit cursor page result status report summary '
    'change update delete create insert select filter order group count total average median '
    'account owner scope session user prompt answer question reason plan step task goal check'
)
_WORDS = tuple(_VOCABULARY.split())


def prose(words: int, *, seed: int) -> str:
    """Deterministic varied English-like text (tokenizes like real prose, not like a repeated word)."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(words):
        word = rng.choice(_WORDS)
        out.append(word.capitalize() if i % 13 == 0 else word)
        if i % 13 == 12:
            out[-1] += '.'
    return ' '.join(out)


INSTRUCTIONS = 'You are a careful coding agent.\n\n' + '\n\n'.join(
    prose(140, seed=1000 + n) for n in range(25)
)
"""About 3.7k tokens of instructions."""

SHORT_INSTRUCTIONS = 'You are a careful coding agent.\n\n' + prose(200, seed=999)
"""About 300 tokens of instructions, for agents on small windows."""


def _schema(n: int) -> dict[str, Any]:
    rng = random.Random(n)
    properties: dict[str, Any] = {}
    for k in range(12):
        name = f'{rng.choice(_WORDS)}_{rng.choice(_WORDS)}_{k}'
        kind = rng.choice(['string', 'integer', 'boolean', 'number'])
        properties[name] = {'type': kind, 'description': prose(18, seed=n * 100 + k)}
    return {
        'type': 'object',
        'properties': properties,
        'required': sorted(properties)[:3],
        'additionalProperties': False,
    }


def _noop(**kwargs: Any) -> str:
    return 'done'


def read_file(path: str) -> str:
    """Read a file of the repository; returns its numbered lines."""
    seed = sum(map(ord, path))
    lines = [f'{i + 1:4d}  ' + prose(10, seed=seed * 1000 + i) for i in range(200)]
    return f'# {path}\n' + '\n'.join(lines)


def make_tools(n: int = 25) -> list[Tool[Any]]:
    """`read_file` plus `n - 1` tools with large documented schemas."""
    tools: list[Tool[Any]] = [Tool(read_file, takes_ctx=False)]
    for i in range(n - 1):
        tools.append(
            Tool.from_schema(
                _noop,
                name=f'tool_{i:02d}_{_WORDS[i]}',
                description=prose(40, seed=i),
                json_schema=_schema(i),
            )
        )
    return tools


def strip_instructions(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    return [
        dataclasses.replace(m, instructions=None) if isinstance(m, ModelRequest) and m.instructions else m
        for m in messages
    ]


def definition_tokens(counter: TokenCounter, tool: ToolDefinition) -> int:
    """The test's own count of one tool definition: name, description and JSON schema."""
    schema = json.dumps(tool.parameters_json_schema, separators=(',', ':'))
    return (
        counter.count_text(tool.name)
        + counter.count_text(tool.description or '')
        + counter.count_text(schema)
    )


@dataclass
class RequestMeter:
    """A `FunctionModel` function: measures every request it receives, then follows a script."""

    script: Callable[[int, list[ModelMessage]], ModelResponse]
    counter: TokenCounter = field(default_factory=default_counter)
    totals: list[int] = field(default_factory=list[int])
    message_counts: list[int] = field(default_factory=list[int])
    seen: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])

    def total(self, messages: Sequence[ModelMessage], info: AgentInfo) -> int:
        tools = [*info.function_tools, *info.output_tools]
        return (
            self.counter.count_messages(strip_instructions(messages))
            + (self.counter.count_text(info.instructions) if info.instructions else 0)
            + sum(definition_tokens(self.counter, t) for t in tools)
        )

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        total = self.total(messages, info)
        self.totals.append(total)
        self.message_counts.append(len(messages))
        self.seen.append(list(messages))
        response = self.script(len(self.totals), messages)
        # Report usage as a provider does: the whole request's input, tools and instructions included.
        output = self.counter.count_messages([response])
        return dataclasses.replace(response, usage=RequestUsage(input_tokens=total, output_tokens=output))


def reading_script(steps: int) -> Callable[[int, list[ModelMessage]], ModelResponse]:
    """Read `steps` different files, one per request, then answer."""

    def script(n: int, messages: list[ModelMessage]) -> ModelResponse:
        if n <= steps:
            return ModelResponse(
                parts=[
                    TextPart(f'Reading the next file ({n}).'),
                    ToolCallPart('read_file', {'path': f'src/pkg/module_{n:03d}.py'}, tool_call_id=f'c{n}'),
                ]
            )
        return ModelResponse(parts=[TextPart('All files read.')])

    return script


def realistic_agent(
    meter: RequestMeter,
    profile: ContextProfile,
    *,
    capability: bool | None = None,
    tools: int = 25,
    instructions: str = INSTRUCTIONS,
    extra_tools: Sequence[Tool[Any]] = (),
    **kwargs: Any,
) -> Agent[None, str]:
    """The agent, with `profile` as a capability (2.x default) or as a history processor
    (`history_processors=` on 1.x, the 1.x default; `ProcessHistory` on 2.x); `extra_tools` join
    the `tools` generated ones."""
    model = FunctionModel(meter.__call__)
    if capability is None:
        capability = PYDANTIC_AI_MAJOR >= 2
    if capability:
        return Agent(
            model,
            instructions=instructions,
            tools=[*make_tools(tools), *extra_tools],
            capabilities=[profile],
            **kwargs,
        )
    if PYDANTIC_AI_MAJOR >= 2:
        processors: dict[str, Any] = {'capabilities': [profile.process_history()]}
    else:
        processors = {'history_processors': profile.history_processors}
    return Agent(
        model, instructions=instructions, tools=[*make_tools(tools), *extra_tools], **processors, **kwargs
    )


def tool_results(messages: Sequence[ModelMessage]) -> list[ToolReturnPart]:
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]
