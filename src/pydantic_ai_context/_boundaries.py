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

Not every user prompt part is a prompt. A tool that returns `ToolReturn(value, content=[...])`
(pydantic-ai's way to send images and files back) is recorded as its `ToolReturnPart` plus a
`UserPromptPart` holding `content`, in the same request, after the results: that part is the tool's
output (`is_tool_content`), never a user turn. A user prompt beside results that only close the
previous run (an output tool's return, a result synthesized for a call that never ran) is a prompt:
the next run's, merged into the request that closed the last one (`has_prompt`).

The run in progress has a prompt too (`current_prompt`): the task at hand, kept in every view like
the first prompt (DESIGN.md invariant 1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolReturnPart, UserPromptPart

from . import _parts

__all__ = (
    'OUTPUT_TOOL_NAME',
    'REMINDER_MAX_CHARS',
    'closes_previous',
    'closes_run',
    'continues_task',
    'current_prompt',
    'group_texts',
    'has_prompt',
    'is_summary',
    'is_tool_content',
    'prompt_parts',
    'prompt_text',
    'prompt_texts',
    'request_group',
    'run_prompt',
    'run_starts',
    'starts_at',
    'starts_run',
)

OUTPUT_TOOL_NAME: Final = 'final_result'
"""pydantic-ai's name for an output tool (`final_result`, or `final_result_<Type>` with several)."""

_OUTPUT_TOOL_RESULTS: Final = frozenset(
    {
        'Final result processed.',
        'Output tool not used - a final result was already processed.',
        'Output tool not used - output failed validation.',
        'Output tool not used - output function execution failed.',
        'Output tool not used - result failed validation.',
    }
)
"""What pydantic-ai (1.x and 2.x) records as an output tool's return, whatever the tool's name."""

_SYNTHESIZED: Final = 'pydantic_ai_synthesized_tool_return'
"""The metadata key of a result pydantic-ai's `repair_messages` made up for a call that never ran."""

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


def closes_run(part: Any) -> bool:
    """A tool result that ends a run rather than feeds the model: an output tool's return, or a
    result synthesized for a call that never ran (a deferred call left unresolved, an interrupt:
    pydantic-ai's `repair_messages`, `outcome='interrupted'`, this package's `normalize`)."""
    if not isinstance(part, ToolReturnPart):
        return False
    name = part.tool_name or ''
    if name == OUTPUT_TOOL_NAME or name.startswith(OUTPUT_TOOL_NAME + '_'):
        return True
    if isinstance(part.content, str) and part.content in _OUTPUT_TOOL_RESULTS:
        return True
    if getattr(part, 'outcome', None) == 'interrupted':
        return True
    metadata = part.metadata
    if not isinstance(metadata, dict):
        return False
    return metadata.get(_SYNTHESIZED) is True or (_parts.marker(part) or {}).get('kind') == 'synthetic'


def _feeds_model(message: ModelMessage) -> bool:
    """The request holds a tool result the model is to read (not only results that close a run)."""
    return any(not closes_run(p) for p in _parts.tool_results(message))


def closes_previous(message: ModelMessage) -> bool:
    """The request holds results that closed the previous run (not only ones `normalize` made up
    for calls left without a result: a prompt after those still follows rule 1)."""
    return any(
        closes_run(p) and (_parts.marker(p) or {}).get('kind') != 'synthetic'
        for p in _parts.tool_results(message)
    )


def is_tool_content(part: Any, message: ModelMessage, *, run_start: bool = False) -> bool:
    """`part` (of `message`) is content a tool returned (`ToolReturn(content=...)`), not a user turn:
    a user prompt part in a request that answers the model's tool calls, unless the request starts
    a run (a prompt sent with deferred tool results is the run's prompt; see `prompt_parts`)."""
    return isinstance(part, UserPromptPart) and not run_start and _feeds_model(message)


def has_prompt(message: ModelMessage) -> bool:
    """A request holding a user prompt that is no tool's content (see `is_tool_content`)."""
    return _parts.has_user_prompt(message) and not _feeds_model(message)


def first_prompt_at(messages: Sequence[ModelMessage]) -> int | None:
    """Where the task framing's user prompt is: the first request holding a prompt that is no
    tool's content (DESIGN invariant 1), else the first holding any user prompt (a log whose only
    prompts came with tool results has no other task text); `None` when no request holds one."""
    first_any: int | None = None
    for i, message in enumerate(messages):
        if _parts.has_user_prompt(message):
            if not _feeds_model(message):
                return i
            if first_any is None:
                first_any = i
    return first_any


def prompt_parts(message: ModelMessage, *, run_start: bool = False) -> list[UserPromptPart]:
    """The user prompt parts of `message` that are a prompt: none when they are tool content, unless
    the request starts a run (a run id's first request: a prompt sent with deferred tool results)."""
    if not isinstance(message, ModelRequest) or (not run_start and _feeds_model(message)):
        return []
    return [p for p in message.parts if isinstance(p, UserPromptPart)]


def starts_run(message: ModelMessage) -> bool:
    """A request holding a prompt, beside no result the model is to read: where a run may start (see
    `run_starts`)."""
    return has_prompt(message)


def prompt_text(message: ModelMessage) -> str:
    """The text of a request's user prompts (non-text content and tool content are left out), stripped."""
    return '\n'.join(prompt_texts(message)).strip()


def prompt_texts(message: ModelMessage) -> list[str]:
    """The text of each of a request's user prompt parts that has any (see `prompt_text`), stripped:
    what the rules read part by part, so a log reads the same before and after pydantic-ai merges
    consecutive requests into one."""
    return _prompt_texts(prompt_parts(message))


def _prompt_texts(parts: Sequence[Any]) -> list[str]:
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, UserPromptPart):
            continue
        content = part.content
        chunks = [content] if isinstance(content, str) else [c for c in content if isinstance(c, str)]
        if text := '\n'.join(chunks).strip():
            texts.append(text)
    return texts


def continues_task(
    previous: ModelMessage | None,
    text: str | Sequence[str],
    earlier: AbstractSet[str],
    *,
    closing: bool = False,
) -> bool:
    """Whether user prompts with `text` (one text, or one per prompt part), after `previous`,
    continue the task (rules 1 to 4): every part has to, so a new request sent beside a reminder
    still starts a run. `closing`: the prompts' request holds the results that closed `previous`'s
    calls (an output tool's, synthesized ones), so they follow a finished run, not a step."""
    if not closing and isinstance(previous, ModelResponse) and _parts.tool_calls(previous):
        return True
    texts = [text] if isinstance(text, str) else list(text)
    texts = [t for t in texts if t]
    if not texts:
        return False
    seen: set[str] = set()  # the texts of the parts before (`earlier` is not copied: it is long)
    for t in texts:
        if not (t in earlier or t in seen or _reminds(t)):
            return False
        seen.add(t)
    return True


def _reminds(text: str) -> bool:
    if len(text) <= REMINDER_MAX_CHARS and _FORMAT_WORDS.search(text):
        return True
    return len(text) <= 40 and _NUDGE.fullmatch(text) is not None


def request_group(messages: Sequence[ModelMessage], i: int) -> Sequence[ModelMessage]:
    """`messages[i]` and the requests right after it: what pydantic-ai sends as one request (it
    merges consecutive requests), so what the rules read as one."""
    j = i + 1
    if isinstance(messages[i], ModelRequest):
        while j < len(messages) and isinstance(messages[j], ModelRequest):
            j += 1
    return messages[i:j]


def _in_group(messages: Sequence[ModelMessage], i: int) -> bool:
    return i > 0 and isinstance(messages[i], ModelRequest) and isinstance(messages[i - 1], ModelRequest)


def _group_results(messages: Sequence[ModelMessage], i: int, group: Sequence[ModelMessage]) -> list[Any]:
    """The tool results of a group of requests that answer a call of the response before it: the
    others are orphans, which `normalize` removes from the view (and so from what it reads)."""
    previous = messages[i - 1] if i > 0 else None
    calls = {p.tool_call_id for p in _parts.tool_calls(previous)} if previous is not None else set()
    return [p for m in group for p in _parts.tool_results(m) if p.tool_call_id in calls]


def group_texts(messages: Sequence[ModelMessage], i: int) -> list[str]:
    """The prompt texts the rules remember from `messages[i]` (rule 2): those of the requests from
    it on that pydantic-ai sends as one, read at the first of them (none inside the group), and
    none if any of them holds results the model is to read (the prompts are then tool content)."""
    if _in_group(messages, i):
        return []
    group = request_group(messages, i)
    if any(not closes_run(p) for p in _group_results(messages, i, group)):
        return []
    return [t for m in group for t in _prompt_texts(m.parts)]


def starts_at(messages: Sequence[ModelMessage], i: int, earlier: AbstractSet[str]) -> bool:
    """Whether a run starts at `messages[i]`, given the prompt texts before it (`earlier`, as
    `group_texts` reads them).

    Consecutive requests are read as the one request pydantic-ai merges them into: a run may only
    start at the first of them, and whether it does depends on all of them (so a log reads the same
    before and after `normalize` merges them)."""
    if i == 0:
        return True
    if _in_group(messages, i):
        return False
    group = request_group(messages, i)
    if not any(_parts.has_user_prompt(m) for m in group):
        return False
    results = _group_results(messages, i, group)
    if any(not closes_run(p) for p in results):
        return False
    if any(is_summary(m) for m in group):
        return True
    texts = [t for m in group for t in _prompt_texts(m.parts)]
    closing = any(closes_run(p) and (_parts.marker(p) or {}).get('kind') != 'synthetic' for p in results)
    return not continues_task(messages[i - 1], texts, earlier, closing=closing)


def run_starts(messages: Sequence[ModelMessage]) -> list[int]:
    """The indexes where a run starts in a log without run ids (the first message always does)."""
    starts: list[int] = []
    earlier: set[str] = set()
    for i in range(len(messages)):
        if starts_at(messages, i, earlier):
            starts.append(i)
        earlier.update(group_texts(messages, i))
    return starts


def run_prompt(messages: Sequence[ModelMessage], start: int, end: int) -> int | None:
    """Where the prompt of the run `messages[start:end]` is: its first request holding a prompt
    before its first response (the run's first request counts whatever it holds beside), or None
    (a run resumed without a prompt, e.g. with deferred tool results only)."""
    for i in range(start, end):
        message = messages[i]
        if isinstance(message, ModelResponse):
            return None
        if prompt_parts(message, run_start=i == start):
            return i
    return None


def current_prompt(messages: Sequence[ModelMessage], spans: Sequence[tuple[int, int]]) -> int | None:
    """Where the current run's prompt is (the task at hand, DESIGN.md invariant 1): the prompt of the
    newest run that has one, given the runs as (start, end) in order, the current one last."""
    for start, end in reversed(spans):
        found = run_prompt(messages, start, end)
        if found is not None:
            return found
    return None
