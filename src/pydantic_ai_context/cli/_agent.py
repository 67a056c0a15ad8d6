"""`replay --agent module:attr`: load the user's agent and measure what its requests send besides messages."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any

from ..overhead import agent_parameters, measure_overhead
from ..tokens import TokenCounter
from ._common import UsageError


@dataclass(frozen=True)
class AgentOverhead:
    """The agent's request parameters and, for the table and JSON, what they weigh."""

    spec: str
    parameters: Any
    tools: int
    tools_tokens: int
    instructions_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {
            'agent': self.spec,
            'tools': self.tools,
            'tools_tokens': self.tools_tokens,
            'instructions_tokens': self.instructions_tokens,
        }


def load_agent(spec: str) -> Any:
    """The object `module:attr` names (the current folder is importable, as for `python -m`)."""
    module_name, sep, attr = spec.partition(':')
    if not sep or not module_name or not attr:
        raise UsageError(f'--agent {spec!r}: give it as module:attribute, e.g. my_app.agents:agent')
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UsageError(f'--agent {spec!r}: cannot import {module_name}: {exc}') from None
    found: Any = module
    for name in attr.split('.'):
        try:
            found = getattr(found, name)
        except AttributeError:
            raise UsageError(f'--agent {spec!r}: {module_name} has no attribute {attr}') from None
    if not hasattr(found, 'run_sync'):
        raise UsageError(f'--agent {spec!r}: {type(found).__name__} is not a pydantic-ai Agent')
    return found


def agent_overhead(spec: str, counter: TokenCounter) -> AgentOverhead:
    agent = load_agent(spec)
    try:
        parameters = agent_parameters(agent)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(
            f'--agent {spec!r}: could not prepare a request ({type(exc).__name__}: {exc}); '
            'pass --overhead-tokens N instead'
        ) from None
    overhead = measure_overhead([], counter=counter, parameters=parameters)
    return AgentOverhead(
        spec=spec,
        parameters=parameters,
        tools=overhead.tools,
        tools_tokens=overhead.tools_tokens,
        instructions_tokens=overhead.instructions_tokens,
    )
