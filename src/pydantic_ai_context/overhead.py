"""What a model request sends besides its messages: instructions and tool definitions, in tokens.

A provider bills, and limits, the whole request: the messages, the instructions, and the
definition of every tool the model may call (name, description, JSON schema), plus any
output schema and provider-side (native) tools. A view that fits the window on its messages
alone can still be a request the provider rejects. `measure_overhead` counts the rest with the
same counter as the view, from what the request carries:

- pydantic-ai 2.x capability hooks and 1.x capabilities see the request's
  `ModelRequestParameters`: function and output tool definitions (skipping those the request
  withholds), the output object's schema, native tools, and the instruction parts;
- a history processor (1.x `history_processors=`, 2.x `ProcessHistory`) sees only its
  `RunContext`: the run's tool definitions (`ctx.tool_manager`, function and output tools)
  and the instructions on the newest request. It cannot see native tools, a native output
  schema or prompted-output instructions; set `reserved_system` for those.

Counts are approximations of each provider's own framing: a definition costs its name,
description and compact JSON schema plus `TOOL_OVERHEAD_TOKENS`; a native tool costs its
configuration as JSON plus `NATIVE_TOOL_TOKENS`. The budget's safety margin covers the rest.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic_ai.messages import ModelMessage

from ._instructions import newest_instructions
from .tokens import TokenCounter

__all__ = (
    'NATIVE_TOOL_TOKENS',
    'TOOL_OVERHEAD_TOKENS',
    'RequestOverhead',
    'agent_parameters',
    'measure_overhead',
)

TOOL_OVERHEAD_TOKENS: Final = 8
"""Tokens added per tool definition for its framing in the provider's tool list."""

NATIVE_TOOL_TOKENS: Final = 50
"""Tokens added per provider-side (native) tool, whose prompt the provider does not publish."""

OverheadSource = Literal['request', 'run-context', 'none']
"""Where the overhead was measured: the request's parameters, a history processor's `RunContext`, or nowhere."""

_MEMO_ENTRIES: Final = 512


@dataclass(frozen=True, kw_only=True)
class RequestOverhead:
    """The tokens a request sends besides its messages, measured with the view's counter.

    `reserve` is what the message budget must leave free: the tool definitions, and any
    instructions the message count does not already include (the counters count the
    instructions of the newest request with the messages).

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, UserPromptPart
        from pydantic_ai.models import ModelRequestParameters
        from pydantic_ai.tools import ToolDefinition

        from pydantic_ai_context import HeuristicCounter, measure_overhead

        tool = ToolDefinition(
            name='read_file',
            description='Read a file of the repository.',
            parameters_json_schema={'type': 'object', 'properties': {'path': {'type': 'string'}}},
        )
        request = ModelRequest(parts=[UserPromptPart('hi')], instructions='Be brief.')
        overhead = measure_overhead(
            [request], counter=HeuristicCounter(), parameters=ModelRequestParameters(function_tools=[tool])
        )
        assert overhead.tools == 1 and overhead.tools_tokens > 8
        assert overhead.instructions_tokens == overhead.counted_instructions_tokens > 0
        assert overhead.reserve == overhead.tools_tokens  # the instructions are counted with the messages
        ```
    """

    instructions_tokens: int = 0
    """Tokens of the instructions the request sends."""
    counted_instructions_tokens: int = 0
    """Tokens of the instructions the counter already counts with the messages (the newest request's)."""
    tools_tokens: int = 0
    """Tokens of the function and output tool definitions, the output schema and native tools."""
    tools: int = 0
    """How many definitions `tools_tokens` counts."""
    source: OverheadSource = 'none'
    """Where it was measured: `'request'`, `'run-context'` (a history processor) or `'none'`."""

    @property
    def reserve(self) -> int:
        """Tokens the message view cannot use: the tools, plus instructions the messages do not count."""
        return self.tools_tokens + max(0, self.instructions_tokens - self.counted_instructions_tokens)

    @property
    def total(self) -> int:
        """Instructions plus tools: everything the request sends besides its messages."""
        return self.instructions_tokens + self.tools_tokens


class OverheadMemo:
    """Token counts of instructions and tool definitions, remembered by their text.

    Owned by the profile that measures (a request's definitions are the same on every request);
    bounded by entries, least recently used forgotten first. Keys are definition texts, never
    conversation content.
    """

    def __init__(self, *, entries: int = _MEMO_ENTRIES) -> None:
        self._entries = entries
        self._memo: collections.OrderedDict[tuple[str, str], int] = collections.OrderedDict()

    def count(self, counter: TokenCounter, text: str) -> int:
        if not text:
            return 0
        key = (counter.name, text)
        found = self._memo.get(key)
        if found is not None:
            self._memo.move_to_end(key)
            return found
        tokens = counter.count_text(text)
        self._memo[key] = tokens
        while len(self._memo) > self._entries:
            self._memo.popitem(last=False)
        return tokens


def measure_overhead(
    messages: Sequence[ModelMessage],
    *,
    counter: TokenCounter,
    parameters: Any = None,
    tool_definitions: Iterable[Any] | None = None,
    memo: OverheadMemo | None = None,
) -> RequestOverhead:
    """Measure what a request of `messages` sends besides them.

    `parameters` is the request's `ModelRequestParameters` (what capability hooks see); without
    it, `tool_definitions` (e.g. `ctx.tool_manager.tool_defs` in a history processor) are counted
    and the instructions are those of the newest request. With neither, only instructions.
    """
    memo = memo if memo is not None else OverheadMemo()
    newest = newest_instructions(messages)
    counted = newest.instructions if newest is not None else None
    counted_tokens = memo.count(counter, counted or '')
    if parameters is not None:
        sent = _sent_instructions(parameters, counted)
        tools_tokens, tools = _parameters_tokens(parameters, counter, memo)
        source: OverheadSource = 'request'
    else:
        sent = counted
        definitions = list(tool_definitions) if tool_definitions is not None else []
        tools_tokens = sum(_definition_tokens(d, counter, memo) for d in definitions)
        tools = len(definitions)
        source = 'run-context' if tool_definitions is not None else 'none'
    return RequestOverhead(
        instructions_tokens=memo.count(counter, sent or ''),
        counted_instructions_tokens=counted_tokens,
        tools_tokens=tools_tokens,
        tools=tools,
        source=source,
    )


def _sent_instructions(parameters: Any, fallback: str | None) -> str | None:
    parts = getattr(parameters, 'instruction_parts', None)
    if parts is None:
        text = fallback
    else:
        visibility = getattr(parameters, 'instruction_visibility_of', None)
        # Parts a loaded capability states through the history are in the messages already.
        shown = [p for p in parts if visibility is None or visibility(p) == 'prefix']
        # As `InstructionPart.join` renders them.
        text = '\n\n'.join(str(getattr(p, 'content', '')) for p in shown).strip() or None
    prompted = _prompted_output_instructions(parameters)
    if prompted:
        text = f'{text}\n\n{prompted}' if text else prompted
    return text


def _prompted_output_instructions(parameters: Any) -> str | None:
    if getattr(parameters, 'output_mode', None) != 'prompted':
        return None
    try:
        value = parameters.prompted_output_instructions
    except Exception:  # a pydantic-ai without it, or an output object it cannot render
        return None
    return value if isinstance(value, str) else None


def _parameters_tokens(parameters: Any, counter: TokenCounter, memo: OverheadMemo) -> tuple[int, int]:
    tokens = tools = 0
    visibility = getattr(parameters, 'visibility_of', None)
    for definition in [*getattr(parameters, 'function_tools', ()), *getattr(parameters, 'output_tools', ())]:
        shown = visibility(definition.name) if visibility is not None else 'visible'
        if shown == 'visible':
            tokens += _definition_tokens(definition, counter, memo)
        elif shown == 'deferred':
            # Declared, schema withheld until revealed: the name and description are sent.
            tokens += TOOL_OVERHEAD_TOKENS + memo.count(counter, definition.name)
            tokens += memo.count(counter, definition.description or '')
        else:
            continue  # withheld, or travelling in the history (counted with the messages)
        tools += 1
    output_object = getattr(parameters, 'output_object', None)
    if output_object is not None and getattr(parameters, 'output_mode', None) == 'native':
        tokens += TOOL_OVERHEAD_TOKENS + memo.count(counter, _json(getattr(output_object, 'json_schema', {})))
        tokens += memo.count(counter, getattr(output_object, 'name', None) or '')
        tokens += memo.count(counter, getattr(output_object, 'description', None) or '')
        tools += 1
    natives = getattr(parameters, 'native_tools', None)
    if natives is None:  # older pydantic-ai; where both exist, `builtin_tools` warns that it is deprecated
        natives = getattr(parameters, 'builtin_tools', None)
    for native in natives or ():
        tokens += NATIVE_TOOL_TOKENS + memo.count(counter, _native_text(native))
        tools += 1
    return tokens, tools


def _definition_tokens(definition: Any, counter: TokenCounter, memo: OverheadMemo) -> int:
    return (
        TOOL_OVERHEAD_TOKENS
        + memo.count(counter, getattr(definition, 'name', ''))
        + memo.count(counter, getattr(definition, 'description', None) or '')
        + memo.count(counter, _json(getattr(definition, 'parameters_json_schema', {})))
    )


def _json(value: Any) -> str:
    try:
        return json.dumps(value, separators=(',', ':'), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def _native_text(tool: Any) -> str:
    if dataclasses.is_dataclass(tool) and not isinstance(tool, type):
        try:
            return _json(dataclasses.asdict(tool))
        except (TypeError, RecursionError):
            pass
    return str(getattr(tool, 'kind', type(tool).__name__))


@dataclass(frozen=True)
class _InstructionText:
    content: str


@dataclass(frozen=True)
class _ProbedParameters:
    """What a first request of an agent carries, where pydantic-ai has no `ModelRequestParameters` to show."""

    function_tools: list[Any]
    output_tools: list[Any]
    instruction_parts: list[_InstructionText]


class _Captured(Exception):
    def __init__(self, parameters: Any) -> None:
        super().__init__('captured')
        self.parameters = parameters


def agent_parameters(agent: Any, *, prompt: str = 'probe') -> Any:
    """What `agent`'s first model request sends besides its messages, as request parameters.

    Runs `agent` once on `prompt` with a `FunctionModel` that records the request's
    `ModelRequestParameters` (tool definitions, output tools and schema, native tools,
    instruction parts) and stops the run before any tool executes: no model is called. Pass the
    result to `measure_overhead(parameters=...)`, `ContextProfile.compile(parameters=...)` or
    `replay(parameters=...)` to count a recorded log's requests with the agent's tools.
    An agent whose tools or instructions need `deps` may fail here; the exception is raised.

    Example:
        ```python
        from pydantic_ai import Agent

        from pydantic_ai_context import HeuristicCounter, measure_overhead
        from pydantic_ai_context.overhead import agent_parameters

        agent = Agent('test', instructions='Be brief.')

        @agent.tool_plain
        def ping() -> str:
            \"\"\"Check the service.\"\"\"
            return 'pong'

        parameters = agent_parameters(agent)
        overhead = measure_overhead([], counter=HeuristicCounter(), parameters=parameters)
        assert overhead.tools == 1 and overhead.instructions_tokens > 0
        ```
    """
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def capture(messages: list[ModelMessage], info: AgentInfo) -> Any:
        parameters = getattr(info, 'model_request_parameters', None)
        if parameters is None or getattr(parameters, 'instruction_parts', None) is None:
            instructions = getattr(info, 'instructions', None)
            if instructions is None:
                newest = newest_instructions(messages)
                instructions = newest.instructions if newest is not None else None
            parameters = _ProbedParameters(
                function_tools=list(info.function_tools),
                output_tools=list(info.output_tools),
                instruction_parts=[_InstructionText(instructions)] if instructions else [],
            )
        raise _Captured(parameters)

    try:
        agent.run_sync(prompt, model=FunctionModel(capture))
    except _Captured as captured:
        return captured.parameters
    raise RuntimeError('the agent finished without making a model request')  # pragma: no cover
