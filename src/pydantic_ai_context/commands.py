"""Helpers for chat front ends: `/compact`, `/clear`, `/history`, and repairing after an interrupt.

These act on the history the application keeps (the canonical log) at the user's request, unlike
policies, which only shape each request's view:

- `compact(messages, model=...)`: replace the history with two messages, a request holding a
  summary and an acknowledgement response (`compact_result` says whether and why);
- `clear()`: an empty history;
- `history_stats(messages)`: user turns, messages, tokens, share of the window, largest tool outputs;
- `patch_dangling_tool_calls(messages)`: after Ctrl-C during a tool call, give every unanswered
  call a synthetic result so the history can be sent again.

Example:
    ```python
    import asyncio

    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from pydantic_ai_context.commands import clear, compact, history_stats

    def summariser(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('The user asked about the weather in Paris.')])

    history: list[ModelMessage] = []
    for i in range(5):
        history.append(ModelRequest(parts=[UserPromptPart(f'question {i} about the weather in Paris?')]))
        answer = 'It is sunny, about 21 degrees, with a light wind. ' * 5
        history.append(ModelResponse(parts=[TextPart(answer)]))
    assert history_stats(history).user_turns == 5
    history = asyncio.run(compact(history, model=FunctionModel(summariser)))
    assert len(history) == 2 and 'Paris' in history[0].parts[-1].content
    assert clear() == []
    ```
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
)

from . import _parts
from ._boundaries import has_prompt
from .budget import ContextBudget
from .integrity import check_messages, normalize, patch_dangling_tool_calls
from .overhead import RequestOverhead
from .policies.summarize import (
    ACK_TEXT,
    MARKER_KIND,
    SUMMARISER_INSTRUCTIONS,
    render_transcript,
    run_summariser,
    summary_prompt,
    summary_request_part,
)
from .request_tokens import weigh_request
from .tokens import TokenCounter, default_counter

__all__ = (
    'CompactResult',
    'HistoryStats',
    'ToolOutputStats',
    'clear',
    'compact',
    'compact_result',
    'history_stats',
    'patch_dangling_tool_calls',
)


@dataclass(frozen=True, kw_only=True)
class CompactResult:
    """What `compact_result` did: the new history, whether it is compacted, and why (not).

    Example:
        ```python
        import asyncio

        from pydantic_ai_context.commands import compact_result

        result = asyncio.run(compact_result([], model='test'))
        assert not result.compacted and result.reason == 'the history is empty' and result.messages == []
        ```
    """

    messages: list[ModelMessage]
    """The history to keep: two messages when compacted, else the input (as a new list)."""
    compacted: bool
    """Whether the history was replaced by a summary."""
    reason: str
    """Why it was or was not compacted, in a few words."""
    messages_before: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    summary_input_tokens: int = 0
    """Tokens the summariser read (to charge the call)."""
    summary_output_tokens: int = 0


async def compact_result(
    messages: Sequence[ModelMessage],
    *,
    model: Any,
    focus: str | None = None,
    counter: TokenCounter | None = None,
    timeout: float | None = 120.0,
    max_part_chars: int = 4_000,
) -> CompactResult:
    """Summarise the whole history into two messages (a `/compact`), reporting what happened.

    The request keeps the history's system prompt parts (pydantic-ai does not add them again to a
    non-empty history) and holds the summary as a user-role part framed as background, with
    metadata `kind='summary'`, `scope='historical'`, `covers=[0, n]`; an acknowledgement response
    follows. `focus` (e.g. `'the database migration'`) steers what the summary keeps. The
    summariser is a tool-less agent on `model` that reads the history as quoted data.

    The input comes back unchanged, with the reason, when the history is empty, `model` is not a
    model pydantic-ai can build (the reason says why: an unknown name, a provider package not
    installed), the summariser fails or times out, or its summary is empty or not smaller than the
    history. A failure's reason names the error type and HTTP status only, never the provider's
    response body.
    """
    check_messages(messages)
    original = list(messages)
    counter = counter or default_counter(model if isinstance(model, str) else None)
    if not original:
        return CompactResult(messages=original, compacted=False, reason='the history is empty')
    before = counter.count_messages(original)
    # A history cut short by an interrupt is summarised as it would be sent: every call answered.
    history = normalize(patch_dangling_tool_calls(original))
    system_parts = [p for m in history for p in m.parts if isinstance(p, SystemPromptPart)]
    prompt = summary_prompt(
        render_transcript([_without_system(m) for m in history], max_part_chars=max_part_chars), focus=focus
    )
    base = {'messages_before': len(original), 'tokens_before': before, 'tokens_after': before}
    try:  # a name pydantic-ai does not know, or a provider package not installed: say which
        from pydantic_ai.models import infer_model

        infer_model(model)
    except Exception as exc:
        detail = f': {exc}' if isinstance(exc, UserError | ImportError) else f' ({type(exc).__name__})'
        return CompactResult(
            messages=original, compacted=False, reason=f'cannot use the model {model!r}{detail}', **base
        )
    try:
        text, input_tokens, output_tokens = await run_summariser(
            model, prompt, instructions=SUMMARISER_INSTRUCTIONS, timeout=timeout
        )
    except Exception as exc:  # a failed /compact leaves the history as it was
        return CompactResult(
            messages=original, compacted=False, reason=f'the summariser failed: {_failure(exc)}', **base
        )
    usage = {'summary_input_tokens': input_tokens, 'summary_output_tokens': output_tokens}
    if not text:
        return CompactResult(
            messages=original, compacted=False, reason='the summary was empty', **base, **usage
        )
    record = {
        'kind': MARKER_KIND,
        'scope': 'historical',
        'covers': [0, len(original)],
        'messages': len(original),
        'status': 'summary',
        'source': 'compact',
        'focus': focus,
        'merged': False,
        'part': len(system_parts),
    }
    ids = {name: value for name in ('run_id', 'conversation_id') if (value := _last(original, name))}
    stamp = next((m.timestamp for m in reversed(original) if isinstance(m, ModelResponse)), None)
    # pydantic-ai's own form where it has one (a `CompactionPart`), else our framed user text; the
    # summariser's answer was fenced (`fence_summary`), so it cannot close the frame early.
    summary = summary_request_part(text, timestamp=stamp or datetime.now(UTC))
    compacted: list[ModelMessage] = [
        ModelRequest(parts=[*system_parts, summary], metadata=_parts.with_marker(None, record), **ids),
        ModelResponse(
            parts=[TextPart(ACK_TEXT)], metadata=_parts.with_marker(None, {'kind': 'summary_ack'}), **ids
        ),
    ]
    after = counter.count_messages(compacted)
    if after >= before:
        return CompactResult(
            messages=original,
            compacted=False,
            reason='the summary is not smaller than the history',
            **base,
            **usage,
        )
    return CompactResult(
        messages=compacted,
        compacted=True,
        reason=f'{len(original)} messages summarised',
        messages_before=len(original),
        tokens_before=before,
        tokens_after=after,
        **usage,
    )


async def compact(
    messages: Sequence[ModelMessage],
    *,
    model: Any,
    focus: str | None = None,
    counter: TokenCounter | None = None,
    timeout: float | None = 120.0,
) -> list[ModelMessage]:
    """A `/compact`: the history summarised into two messages, or the input unchanged if that failed.

    Use `compact_result` to learn whether it worked and why not.
    """
    result = await compact_result(messages, model=model, focus=focus, counter=counter, timeout=timeout)
    return result.messages


def clear() -> list[ModelMessage]:
    """A `/clear`: the empty history (the next run starts afresh with the agent's system prompt)."""
    return []


@dataclass(frozen=True, kw_only=True)
class ToolOutputStats:
    """The tool results of one tool in a history: how many, and their tokens."""

    tool_name: str
    tokens: int
    count: int


@dataclass(frozen=True, kw_only=True)
class HistoryStats:
    """The numbers behind a `/history` command.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context import ContextBudget, HeuristicCounter
        from pydantic_ai_context.commands import history_stats

        log = [ModelRequest(parts=[UserPromptPart('hi')]), ModelResponse(parts=[TextPart('hello')])]
        stats = history_stats(log, counter=HeuristicCounter(), budget=ContextBudget(context_window=8_000))
        assert stats.user_turns == 1 and stats.messages == 2 and 0 < stats.share < 0.01
        print(stats)
        ```
    """

    messages: int
    user_turns: int
    """Requests holding a user prompt (a compacted summary is not counted)."""
    tokens: int
    tool_calls: int
    context_window: int | None = None
    limit: int | None = None
    """Tokens the message view may hold under the budget."""
    share: float | None = None
    """`tokens / limit`: how full the usable window is (over 1.0 means it does not fit)."""
    largest: tuple[ToolOutputStats, ...] = field(default_factory=tuple)
    """Tools whose results take the most tokens, largest first."""
    message_tokens: int | None = None
    """Of `tokens`, the messages' (without the instructions); `None` when not split."""
    instructions_tokens: int = 0
    """Of `tokens`, the instructions a request sends."""
    tools_tokens: int = 0
    """Tokens of the tool definitions a request sends (from `overhead`; not in `tokens`)."""
    budget: ContextBudget | None = None
    """The budget `limit` comes from; `str()` shows its arithmetic (`ContextBudget.describe`)."""
    counter: str = ''
    """The token counter that counted `tokens` (`TokenCounter.name`)."""
    counter_exact: bool = False
    """Whether `counter` is the model's own tokenizer (`TokenCounter.exact`), else an estimate."""

    def __str__(self) -> str:
        line = (
            f'{_count(self.messages, "message")}, {_count(self.user_turns, "user turn")}, '
            f'{_count(self.tool_calls, "tool call")}, {_count(self.tokens, "token")}'
        )
        if self.share is not None and self.limit is not None:
            line += f' ({self.share:.0%} of limit {self.limit:,})'
        if self.counter:
            line += f'; counted by {self.counter}, {"exact" if self.counter_exact else "estimated"}'
        lines = [line]
        if self.budget is not None:
            lines.append(f'  budget: {self.budget.describe()}')
        if self.message_tokens is not None:
            lines.append(
                f'  messages {self.message_tokens:,} · instructions {self.instructions_tokens:,} · '
                f'tools {self.tools_tokens:,} tokens'
            )
        lines += [
            f'  {t.tool_name}: {_count(t.tokens, "token")} in {_count(t.count, "result")}'
            for t in self.largest
        ]
        return '\n'.join(lines)


def _count(n: int, noun: str) -> str:
    """`1 user turn`, `2 user turns`, `12,000 tokens`."""
    return f'{n:,} {noun}' if n == 1 else f'{n:,} {noun}s'


def history_stats(
    messages: Sequence[ModelMessage],
    *,
    counter: TokenCounter | None = None,
    budget: ContextBudget | None = None,
    top: int = 5,
    overhead: RequestOverhead | None = None,
) -> HistoryStats:
    """Count a history: messages, user turns, tokens, share of the budget, the `top` tools by output.

    The tokens are split into messages and instructions (the newest request's); pass the
    `overhead` a profile measured for the agent's requests (`profile.last_overhead`) to add the
    tool definitions too.
    """
    check_messages(messages)
    counter = counter or default_counter()
    tokens_by_tool: collections.Counter[str] = collections.Counter()
    results_by_tool: collections.Counter[str] = collections.Counter()
    user_turns = 0
    calls = 0
    for message in messages:
        record = _parts.marker(message)
        if has_prompt(message) and not (record and record.get('kind') == MARKER_KIND):
            user_turns += 1
        calls += len(_parts.tool_calls(message))
        for result in _parts.tool_results(message):
            name = getattr(result, 'tool_name', None) or '?'
            tokens_by_tool[name] += counter.count_text(_parts.part_text(result))
            results_by_tool[name] += 1
    weight = weigh_request(messages, counter=counter, overhead=overhead)
    tokens = weight.view_tokens
    instructions = weight.counted_instructions_tokens
    largest = sorted(tokens_by_tool.items(), key=lambda item: (-item[1], item[0]))[:top]
    return HistoryStats(
        messages=len(messages),
        user_turns=user_turns,
        tokens=tokens,
        tool_calls=calls,
        context_window=budget.context_window if budget else None,
        limit=budget.limit if budget else None,
        share=tokens / budget.limit if budget else None,
        largest=tuple(ToolOutputStats(tool_name=n, tokens=t, count=results_by_tool[n]) for n, t in largest),
        message_tokens=tokens - instructions,
        instructions_tokens=instructions,
        tools_tokens=overhead.tools_tokens if overhead is not None else 0,
        budget=budget,
        counter=counter.name,
        counter_exact=getattr(counter, 'exact', False) is True,
    )


def _failure(exc: BaseException) -> str:
    """What went wrong, without what the provider sent back: an error body can quote the request
    (the conversation) or hold account details, and a reason is shown and logged."""
    if isinstance(exc, TimeoutError):
        return 'timed out'
    status = getattr(exc, 'status_code', None)
    name = type(exc).__name__
    if isinstance(status, int):
        return f'{name} (HTTP {status}{", rate limited" if status == 429 else ""})'
    return name


def _without_system(message: ModelMessage) -> ModelMessage:
    # System prompts are kept verbatim in the compacted request; the summary need not repeat them.
    if isinstance(message, ModelRequest) and _parts.has_system_prompt(message):
        return dataclasses.replace(
            message, parts=[p for p in message.parts if not isinstance(p, SystemPromptPart)]
        )
    return message


def _last(messages: Sequence[ModelMessage], name: str) -> Any:
    return next((getattr(m, name) for m in reversed(messages) if getattr(m, name, None)), None)
