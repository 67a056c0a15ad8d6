"""Where a run ends when the messages carry no run ids: a user prompt, unless it continues the task.

pydantic-ai 2.x stamps `run_id` on every message, and then only a change of run id is a boundary
(`views.run_spans`). Histories without run ids (pydantic-ai 1.x, converted or hand-built logs)
only have user prompts to go by, and many agents send user-role messages inside one task:
format reminders, nudges, observations. Splitting there would treat the task's first half as a
finished run. So the rule errs on the side of one run: a request holding a user prompt (and no
tool results) starts a run, unless

1. the response right before it called tools (the prompt arrives in the middle of a step);
2. its prompt repeats an earlier prompt's text (templated messages recur: reminders, "continue");
3. it is a short reminder about the agent's own output format (at most `REMINDER_MAX_CHARS`
   characters mentioning code fences, "triple backticks", "exactly one", a response example,
   "format" or tool/function calls): it answers how the agent replied, not a new request;
4. it is a bare nudge ("continue", "go on", "keep going", "proceed", "carry on").

A wrong "same run" only keeps a finished run's trace in view longer (the budget still governs
it); a wrong boundary would hide the agent's reasoning in the middle of its task.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, UserPromptPart

from . import _parts

__all__ = (
    'REMINDER_MAX_CHARS',
    'continues_task',
    'is_summary',
    'prompt_text',
    'run_starts',
    'starts_at',
    'starts_run',
)

REMINDER_MAX_CHARS: Final = 1_500
"""A format reminder longer than this is read as a new request."""

_FORMAT_WORDS: Final = re.compile(
    r'```|triple backticks|exactly one|<response_example>|\bformat(?:ted|ting)?\b'
    r'|\btool[ _]calls?\b|\bfunction[ _]calls?\b',
    re.IGNORECASE,
)
_NUDGE: Final = re.compile(
    r'(?:please[ ,]+)?(?:continue|go on|keep going|proceed|carry on)(?: please)?[.!]*', re.IGNORECASE
)


SUMMARY_KIND: Final = 'summary'
"""The marker kind of a summary request (`policies.summarize`; named here, as views sit below policies)."""


def is_summary(message: ModelMessage) -> bool:
    """A summary this package wrote: no one's reply to the agent, so it starts a run whatever it says."""
    return (_parts.marker(message) or {}).get('kind') == SUMMARY_KIND


def starts_run(message: ModelMessage) -> bool:
    """A request holding a user prompt and no tool results: where a run may start (see `run_starts`)."""
    return _parts.has_user_prompt(message) and not _parts.tool_results(message)


def prompt_text(message: ModelMessage) -> str:
    """The text of a request's user prompts (non-text content is left out), stripped."""
    if not isinstance(message, ModelRequest):
        return ''
    chunks: list[str] = []
    for part in message.parts:
        if isinstance(part, UserPromptPart):
            content = part.content
            if isinstance(content, str):
                chunks.append(content)
            else:
                chunks.extend(c for c in content if isinstance(c, str))
    return '\n'.join(chunks).strip()


def continues_task(previous: ModelMessage | None, text: str, earlier: AbstractSet[str]) -> bool:
    """Whether a user prompt with `text`, after `previous`, continues the task (rules 1 to 4)."""
    if isinstance(previous, ModelResponse) and _parts.tool_calls(previous):
        return True
    if not text:
        return False
    if text in earlier:
        return True
    if len(text) <= REMINDER_MAX_CHARS and _FORMAT_WORDS.search(text):
        return True
    return len(text) <= 40 and _NUDGE.fullmatch(text) is not None


def starts_at(messages: Sequence[ModelMessage], i: int, earlier: AbstractSet[str]) -> bool:
    """Whether a run starts at `messages[i]`, given the prompt texts before it (`earlier`)."""
    message = messages[i]
    if i == 0:
        return True
    if not _parts.has_user_prompt(message) or _parts.tool_results(message):
        return False
    return is_summary(message) or not continues_task(messages[i - 1], prompt_text(message), earlier)


def run_starts(messages: Sequence[ModelMessage]) -> list[int]:
    """The indexes where a run starts in a log without run ids (the first message always does)."""
    starts: list[int] = []
    earlier: set[str] = set()
    for i, message in enumerate(messages):
        if starts_at(messages, i, earlier):
            starts.append(i)
        if text := prompt_text(message):
            earlier.add(text)
    return starts
