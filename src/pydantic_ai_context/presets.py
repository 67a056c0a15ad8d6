"""The named presets `profile(name)` builds: each a chain of policies with documented defaults.

| preset | chain | for |
|---|---|---|
| `transparent` | normalize → check_budget | validation and repair only; raises when over a known window |
| `coding` | isolate → dedupe → trim → mask → fit | long tool-using runs (zero LLM calls) |
| `chat` | isolate → trim → summarize → fit | many-turn conversations |
| `long_horizon` | isolate → dedupe → trim → mask → summarize → fit | runs that outgrow even masking |

The defaults come from replaying the shared recorded agent runs (`bench/replay.py`,
`docs/benchmarks.md`). Every preset accepts the common settings of `profile()` plus the
keyword-only settings of its factory below.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from .policies._frontier import Frontier
from .policies.check import check_budget
from .policies.dedupe import dedupe_reads
from .policies.fit import fit_to_budget
from .policies.isolate import IsolateMode, isolate_boundaries
from .policies.mask import DEFAULT_EXCLUDED_TOOLS, mask_observations
from .policies.summarize import SummaryCache, summarize_window
from .policies.trim import trim_tool_outputs
from .profiles import ContextProfile, register_profile, split_settings

__all__ = ('chat', 'coding', 'long_horizon', 'transparent')

# The constraints in the factories' annotations are checked when a profile is built, for keyword
# arguments and `PYDANTIC_AI_CONTEXT_*` variables alike (see `settings`).
Share = Annotated[float, Field(gt=0, le=1)]
# A collection of tool names, never one string (whose letters it would hold); from the environment,
# a JSON list (`PYDANTIC_AI_CONTEXT_EXCLUDE_TOOLS='["think"]'`).
ToolNames = Sequence[str] | set[str] | frozenset[str]
_EXCLUDED_TOOLS = tuple(sorted(DEFAULT_EXCLUDED_TOOLS))


def transparent(**settings: Any) -> ContextProfile:
    """Normalize only: repairs broken histories and changes nothing else (so no read-back tools:
    it writes no marker to read back).

    Like every preset it never sends a view the model cannot take: over a known window (explicit
    `context_window`, or the model's), `check_budget` raises `ContextBudgetExceeded`.
    """
    return ContextProfile(
        name='transparent', steps=(check_budget(),), **{'readback': False, **_fields(settings)}
    )


def coding(
    *,
    keep_recent: NonNegativeInt = 1,
    step: PositiveInt = 10,
    budget_step: Share = 0.4,
    trim_threshold: PositiveInt = 400,
    clip_args: NonNegativeInt = 80,
    isolate_mode: IsolateMode = 'digest',
    exclude_tools: ToolNames = _EXCLUDED_TOOLS,
    keep_last_steps: NonNegativeInt = 2,
    clamp_fresh: bool = True,
    **common: Any,
) -> ContextProfile:
    """Zero-LLM compaction for long tool-using runs.

    Args:
        keep_recent: Tool observations (result requests) kept verbatim at the end of the view.
            The observations that left it stay whole until a `step` of them has gathered, so the
            agent still sees 1 to `step` recent outputs; 1 rather than 2 leaves one output fewer
            to re-send uncached at each frontier move (replay, six shared and four held-out runs:
            cost lower at every window, e.g. `coding` at 128k 0.531 -> 0.504 and 0.553 -> 0.530
            of no compaction, needed facts and model texts kept unchanged).
        step: Observations the compaction frontier advances at once; larger steps rewrite the
            cached prompt prefix less often.
        budget_step: When the view would be over the soft threshold, the frontier masks further
            observations in chunks of this share of the limit (tokens, not observations), so
            large outputs are masked as soon as they no longer fit.
        trim_threshold: Tool results older than the window and longer than this many tokens
            are trimmed to head + tail (then masked).
        clip_args: Long string arguments of old tool calls (file contents sent to an editor)
            are clipped to this many characters; paths and a command's first line stay whole.
        isolate_mode: What finished runs keep of their tool trace (`keep`/`mask`/`digest`/`drop`).
        exclude_tools: Tools whose results are never masked (reasoning and plan trackers).
        keep_last_steps: Steps `fit_to_budget` never drops.
        clamp_fresh: Clamp a fresh tool result that alone takes the view over the limit to the
            room left (head and tail, readable back), rather than drop older steps that come
            back once trim has shortened it (DESIGN invariant 3). On by default: replay of the
            six shipped runs at 16k, cost/none coding 0.497 -> 0.440, long_horizon 0.452 ->
            0.447, at 32k coding 0.498 -> 0.491, needed facts no lower anywhere; the held-out
            runs unchanged (docs/benchmarks.md). Off: the newest result stays whole while
            dropping older steps makes the view fit.
    """
    return ContextProfile(
        name='coding',
        steps=_zero_llm_chain(
            keep_recent=keep_recent,
            step=step,
            budget_step=budget_step,
            trim_threshold=trim_threshold,
            clip_args=clip_args,
            isolate_mode=isolate_mode,
            exclude_tools=tuple(exclude_tools),
            keep_last_steps=keep_last_steps,
            clamp_fresh=clamp_fresh,
        ),
        **_fields(common),
    )


def chat(
    *,
    keep_recent: NonNegativeInt = 1,
    step: PositiveInt = 10,
    budget_step: Share = 0.4,
    trim_threshold: PositiveInt = 400,
    clip_args: NonNegativeInt = 80,
    isolate_mode: IsolateMode = 'digest',
    summary_step: PositiveInt = 8,
    summary_low_water: Share = 0.6,
    summary_share: Share = 0.5,
    summary_keep_tokens: PositiveInt | None = None,
    summary_timeout: PositiveFloat = 60.0,
    summary_cache: SummaryCache | None = None,
    summary_ahead: bool = True,
    summary_ahead_lead: NonNegativeFloat = 0.75,
    keep_last_steps: NonNegativeInt = 2,
    clamp_fresh: bool = False,
    **common: Any,
) -> ContextProfile:
    """Many-turn conversations: finished turns collapse, old outputs are trimmed, and when the
    view still crosses the soft threshold the middle is summarised (one LLM call, cached).

    Args:
        keep_recent: Tool observations kept verbatim (trim's recency window); see `coding`.
        step: Observations the trim frontier advances at once.
        budget_step: When the view would be over the soft threshold, the frontier masks further
            observations in chunks of this share of the limit (tokens, not observations), so
            large outputs are masked as soon as they no longer fit.
        trim_threshold: Old tool results longer than this many tokens are trimmed.
        clip_args: Long string arguments of old tool calls are clipped to this many characters
            (0: never clipped).
        isolate_mode: What finished runs keep of their tool trace.
        summary_step: The summarised span ends on a multiple of this many messages.
        summary_low_water: A new summary shrinks the view to this share of the limit; it is
            reused until the view is over the soft threshold again.
        summary_share: The summariser is asked to stay within this share of the room the task
            framing leaves under the limit.
        summary_keep_tokens: Tokens the summariser leaves verbatim at the end (default: 40% of
            the trigger).
        summary_timeout: Seconds the summariser may take before the static marker is used.
        summary_cache: Where summaries are cached (share one to share summaries).
        summary_ahead: Write the next shrink's summary in the background, so that no request
            waits for the summariser (replay at 16k, summariser 1.5 s: see docs/sessions.md).
        summary_ahead_lead: How early summarising ahead starts, in multiples of the room a shrink
            leaves for recent steps, below the limit (0: at the trigger). 0.75 here: the run in
            progress is kept out of summaries, so they come late (replay at 16k, summariser
            1.5 s: cost +1.6% against the synchronous summary, 10% of summariser tokens wasted;
            +1.2% at 0; before the interim view, 18% wasted at 1.0).
        keep_last_steps: Steps `fit_to_budget` never drops.
        clamp_fresh: Clamp a fresh tool result that alone takes the view over the limit to the
            room left (head and tail, readable back), rather than drop older steps that come
            back once trim has shortened it (DESIGN invariant 3). Off by default here (on in
            `coding`): on a view of the view the clamped result leaves room for a summary the
            view itself had none for, so the view would not be its own view; and replay gains
            little (16k: chat 0.557 -> 0.556, long_horizon 0.452 -> 0.447).
    """
    frontier = Frontier(keep_recent=keep_recent, step=step, budget_step=budget_step)
    summarize = _summarize(
        keep_current_run=True,
        low_water=summary_low_water,
        summary_share=summary_share,
        step_messages=summary_step,
        keep_tokens=summary_keep_tokens,
        timeout=summary_timeout,
        cache=summary_cache,
        ahead=summary_ahead,
        ahead_lead=summary_ahead_lead,
    )
    steps = (
        isolate_boundaries(mode=isolate_mode),
        trim_tool_outputs(frontier=frontier, max_tokens=trim_threshold, max_arg_chars=clip_args),
        summarize,
        fit_to_budget(keep_last_steps=keep_last_steps, clamp_fresh=clamp_fresh),
    )
    return ContextProfile(name='chat', steps=steps, **_fields(common))


def long_horizon(
    *,
    keep_recent: NonNegativeInt = 1,
    step: PositiveInt = 10,
    budget_step: Share = 0.4,
    trim_threshold: PositiveInt = 400,
    clip_args: NonNegativeInt = 80,
    isolate_mode: IsolateMode = 'digest',
    exclude_tools: ToolNames = _EXCLUDED_TOOLS,
    summary_step: PositiveInt = 8,
    summary_threshold: Share = 0.95,
    summary_low_water: Share = 0.6,
    summary_share: Share = 0.5,
    summary_keep_tokens: PositiveInt | None = None,
    summary_timeout: PositiveFloat = 60.0,
    summary_cache: SummaryCache | None = None,
    summary_ahead: bool = True,
    summary_ahead_lead: NonNegativeFloat = 0.0,
    keep_last_steps: NonNegativeInt = 2,
    clamp_fresh: bool = False,
    **common: Any,
) -> ContextProfile:
    """`coding`'s zero-LLM chain, then a summary of the middle when the view is still over the
    soft threshold (the current run included), then `fit_to_budget` as the last resort.

    Args:
        keep_recent: Tool observations kept verbatim at the end of the view; see `coding`.
        step: Observations the compaction frontier advances at once.
        budget_step: When the view would be over the soft threshold, the frontier masks further
            observations in chunks of this share of the limit (tokens, not observations), so
            large outputs are masked as soon as they no longer fit.
        trim_threshold: Old tool results longer than this many tokens are trimmed, then masked.
        clip_args: Long string arguments of old tool calls are clipped to this many characters
            (0: never clipped).
        isolate_mode: What finished runs keep of their tool trace.
        exclude_tools: Tools whose results are never masked.
        summary_step: The summarised span ends on a multiple of this many messages (replay at
            16k: 8 costs less than 30, whose coarse ends left steps for `fit_to_budget` to drop;
            how often a summary changes is set by the trigger and the low-water mark).
        summary_threshold: Share of the budget's usable limit the masked view must exceed before
            the summariser is called (replay: 0.95 halves summariser calls against 0.75 and
            lowers cost, at better fact retention; `fit_to_budget` still guards the limit).
        summary_low_water: A new summary shrinks the view to this share of the limit; it is
            reused, and the prefix stays cached, until the view is over the trigger again.
        summary_share: The summariser is asked to stay within this share of the room the task
            framing leaves under the limit (replay at 16k: 0.5 keeps 81% of facts against 69%
            without summaries, at the same cost; 0.1 kept 69%).
        summary_keep_tokens: Tokens the summariser leaves verbatim at the end (default: 40% of
            the trigger).
        summary_timeout: Seconds the summariser may take before the static marker is used.
        summary_cache: Where summaries are cached (share one to share summaries).
        summary_ahead: Write the next shrink's summary in the background, so that no request
            waits for the summariser (replay at 16k, summariser 1.5 s: see docs/sessions.md).
        summary_ahead_lead: How early summarising ahead starts, in multiples of the room a shrink
            leaves for recent steps, below the limit. 0: at the trigger, so no summary is made
            where the synchronous path would make none (replay at 16k: 8 calls as synchronously,
            against 13 at 1.0).
        keep_last_steps: Steps `fit_to_budget` never drops.
        clamp_fresh: Clamp a fresh tool result that alone takes the view over the limit to the
            room left (head and tail, readable back), rather than drop older steps that come
            back once trim has shortened it (DESIGN invariant 3). Off by default here (on in
            `coding`): on a view of the view the clamped result leaves room for a summary the
            view itself had none for, so the view would not be its own view; and replay gains
            little (16k: chat 0.557 -> 0.556, long_horizon 0.452 -> 0.447).
    """
    zero_llm = _zero_llm_chain(
        keep_recent=keep_recent,
        step=step,
        budget_step=budget_step,
        trim_threshold=trim_threshold,
        clip_args=clip_args,
        isolate_mode=isolate_mode,
        exclude_tools=tuple(exclude_tools),
        keep_last_steps=keep_last_steps,
        clamp_fresh=clamp_fresh,
    )
    summarize = _summarize(
        keep_current_run=False,
        threshold=summary_threshold,
        low_water=summary_low_water,
        summary_share=summary_share,
        step_messages=summary_step,
        keep_tokens=summary_keep_tokens,
        timeout=summary_timeout,
        cache=summary_cache,
        ahead=summary_ahead,
        ahead_lead=summary_ahead_lead,
    )
    # The summariser sits between mask and fit: it only fires when the masked view is still
    # over the soft threshold, and fit stays the last resort.
    steps = (*zero_llm[:-1], summarize, zero_llm[-1])
    return ContextProfile(name='long_horizon', steps=steps, **_fields(common))


def _zero_llm_chain(
    *,
    keep_recent: int,
    step: int,
    budget_step: float,
    trim_threshold: int,
    clip_args: int,
    isolate_mode: IsolateMode,
    exclude_tools: tuple[str, ...],
    keep_last_steps: int,
    clamp_fresh: bool,
) -> tuple[Any, ...]:
    # One frontier for dedupe, trim and mask: their rewrites of the prefix happen together,
    # so the provider's prompt cache breaks once per frontier step rather than three times.
    frontier = Frontier(keep_recent=keep_recent, step=step, budget_step=budget_step)
    return (
        isolate_boundaries(mode=isolate_mode),
        dedupe_reads(frontier=frontier),
        trim_tool_outputs(frontier=frontier, max_tokens=trim_threshold, max_arg_chars=clip_args),
        mask_observations(frontier=frontier, exclude_tools=exclude_tools),
        # `clamp_fresh` (on by default in `coding`): steps dropped for a fresh result would come
        # back at the next request (replay at 16k: coding 0.497 -> 0.440, `mini_gemini3pro_requests_1142`
        # 1.063 -> 0.682, needed facts no lower).
        fit_to_budget(keep_last_steps=keep_last_steps, clamp_fresh=clamp_fresh),
    )


def _fields(common: dict[str, Any]) -> dict[str, Any]:
    """The common settings as `ContextProfile` fields (`profile()` records the preset's own)."""
    fields, _ = split_settings(common)
    return fields


def _summarize(*, cache: SummaryCache | None, keep_tokens: int | None, **settings: Any) -> Any:
    options: dict[str, Any] = dict(settings)
    if cache is not None:
        options['cache'] = cache
    if keep_tokens is not None:
        options['keep_tokens'] = keep_tokens
    return summarize_window(**options)


register_profile('transparent', transparent)
register_profile('coding', coding)
register_profile('chat', chat)
register_profile('long_horizon', long_horizon)
