"""A deterministic, offline summariser model for replays and tests."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from .facts import error_lines, paths_in


def extractive_summary_model(*, max_chars: int = 2_400) -> FunctionModel:
    """A deterministic, offline stand-in for a summariser model, for replays and tests.

    It answers the summariser's prompt with an *extractive* summary under the sections the
    prompt asks for (`SUMMARY_SECTIONS`): the first lines of the task, every file path, the
    commands run, every error line (the execution facts replay measures, newest first when they
    do not all fit), and the end of the last assistant text. It stays within the size the prompt
    asks for (about 4 characters a token), else `max_chars`. A real model writes better
    summaries; this one makes summarising profiles measurable without a network, and its cost is
    charged like a real call (input x1.0, output x4.0).

    Example:
        ```python
        from pydantic_ai import Agent

        from pydantic_ai_context.replay import extractive_summary_model

        agent = Agent(extractive_summary_model())
        out = agent.run_sync('<transcript>user: fix src/app.py\\nValueError: boom</transcript>').output
        assert 'src/app.py' in out and 'ValueError: boom' in out
        assert out.startswith('Task and constraints:')
        ```
    """

    def summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = '\n'.join(
            p.content
            for m in messages
            for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        )
        hint = _SIZE_HINT.search(prompt)
        budget = int(hint.group(1).replace(',', '')) * 4 if hint else max_chars
        return ModelResponse(parts=[TextPart(extractive_summary(prompt, max_chars=budget))])

    return FunctionModel(summarise, model_name='extractive-summariser')


_SIZE_HINT = re.compile(r'Stay within about ([\d,]+) tokens')
_CALL_LINE = re.compile(r'^assistant called (\S+) \[[^\]]*\]: (.*)$')


def extractive_summary(prompt: str, *, max_chars: int) -> str:
    """The extractive summary of a summariser prompt (see `extractive_summary_model`)."""
    from ..policies.summarize.summariser import SUMMARY_SECTIONS

    lines = [line.strip() for line in prompt.splitlines() if line.strip()]
    previous = _section_lines(prompt)
    task = (
        previous.get(SUMMARY_SECTIONS[0])
        or [line.removeprefix('user: ') for line in lines if line.startswith('user: ')][:2]
        or [line for line in lines if not line.startswith('<')][:2]
    )
    paths = list(dict.fromkeys(reversed(paths_in(prompt))))
    errors = list(dict.fromkeys(reversed(error_lines(prompt))))
    commands = list(
        dict.fromkeys(
            f'{m.group(1)} {m.group(2)[:100]}' for line in reversed(lines) if (m := _CALL_LINE.match(line))
        )
    )
    said = [line.removeprefix('assistant: ') for line in lines if line.startswith('assistant: ')]
    state = said[-1][-300:] if said else ''.join(previous.get(SUMMARY_SECTIONS[4], []))[-300:]
    decisions = (
        ' / '.join(said[-3:-1])[-300:] if len(said) > 1 else ' / '.join(previous.get(SUMMARY_SECTIONS[3], []))
    )
    fixed = [
        f'{SUMMARY_SECTIONS[0]}: ' + ' / '.join(task)[:400],
        f'{SUMMARY_SECTIONS[3]}: {decisions}',
        f'{SUMMARY_SECTIONS[4]}: {state}',
    ]
    room = max(max_chars - sum(len(s) + 1 for s in fixed) - 120, 0)
    # Paths and error lines share the room (the facts); a few commands come with them.
    # One error line a line, verbatim, so the next update reads each back as it was. Errors take
    # up to 40% of the room, paths what is left of 90%, a few commands the rest.
    errs = _fit(errors, room * 4 // 10, '\n')
    files = _fit(paths, room * 9 // 10 - len(errs), ', ')
    cmds = _fit(commands[:8], room - len(files) - len(errs), ' | ')
    body = [
        fixed[0],
        f'{SUMMARY_SECTIONS[1]}: {files}',
        f'{SUMMARY_SECTIONS[2]}: {cmds}' + (f'\n{errs}' if errs else ''),
        fixed[1],
        fixed[2],
    ]
    return '\n'.join(body)


def _fit(items: Sequence[str], room: int, sep: str) -> str:
    """As many of `items` (in order) as fit in `room` characters, saying how many were left out."""
    kept: list[str] = []
    used = 0
    for item in items:
        if used + len(item) + len(sep) > room:
            break
        kept.append(item)
        used += len(item) + len(sep)
    text = sep.join(kept)
    left = len(items) - len(kept)
    return text + (f'{sep if sep == chr(10) else " "}(and {left} more)' if left else '')


def _section_lines(prompt: str) -> dict[str, list[str]]:
    """The sections of the previous summary quoted in the prompt, if any."""
    from ..policies.summarize.summariser import SUMMARY_SECTIONS

    found: dict[str, list[str]] = {}
    start = prompt.find('<previous_summary>')
    end = prompt.find('</previous_summary>')
    if start < 0 or end < start:
        return found
    for line in prompt[start:end].splitlines():
        for name in SUMMARY_SECTIONS:
            if line.startswith(f'{name}: '):
                found[name] = [line.removeprefix(f'{name}: ')]
    return found
