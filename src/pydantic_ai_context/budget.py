"""The token budget of a model request: the context window, what is reserved, and what the view may hold."""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, get_args

from ._window_table import table_window
from .errors import ContextBudgetExceeded, ContextWarning

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = (
    'DEFAULT_CONTEXT_WINDOW',
    'DEFAULT_RESERVED_OUTPUT',
    'DEFAULT_SAFETY_MARGIN',
    'DEFAULT_SOFT_THRESHOLD',
    'ContextBudget',
    'ContextWindow',
    'WindowSource',
    'resolve_context_window',
    'resolve_input_limit',
)

WindowSource = Literal['explicit', 'model-profile', 'genai-prices', 'window-table', 'default', 'provider']
"""Where a context window came from, in the order they are tried (`'window-table'`: this package's
bundled table, see `resolve_context_window`); `'provider'`: tightened after the provider rejected a
request as too long (see `ContextProfile.max_overflow_retries`)."""

DEFAULT_CONTEXT_WINDOW: Final = 32_000
"""The window assumed for a model nothing knows: small enough for nearly every current model."""

DEFAULT_RESERVED_OUTPUT: Final = 4_096
"""Tokens kept free for the model's answer, unless the window is small (see `ContextBudget.for_model`)."""

DEFAULT_SAFETY_MARGIN: Final = 0.02
"""Share of the window kept free for counting error."""

DEFAULT_SOFT_THRESHOLD: Final = 0.75
"""Share of the limit at which compaction starts."""

_SOURCES: Final = frozenset(get_args(WindowSource))


@dataclass(frozen=True, kw_only=True)
class ContextBudget:
    """What one model request may hold: the window, less what is reserved, and how much is used.

    The `limit` is the most the message view may hold: `context_window` less `reserved_output`
    (capped at `input_limit` where the provider has one), less `reserved_system` and the safety
    margin; `describe()` shows that sum in one line. Compaction starts above `soft_limit`
    (`soft_threshold` × `limit`) or when less than `min_headroom` remains; a view that still
    exceeds `limit` after every policy raises `ContextBudgetExceeded` (see `check`).
    It is a value: `with_used` returns a copy.

    Example:
        ```python
        from pydantic_ai_context import ContextBudget

        budget = ContextBudget(context_window=128_000, reserved_output=8_000, reserved_system=2_000)
        assert budget.safety_tokens == 2_560  # 2% of the window
        assert budget.limit == 128_000 - 8_000 - 2_000 - 2_560 == 115_440
        assert budget.soft_limit == 86_580  # 75% of the limit

        budget = budget.with_used(90_000)
        assert budget.remaining() == 25_440
        assert budget.over_soft_threshold() and budget.fits()
        assert round(budget.headroom, 2) == 0.22
        assert budget.describe() == (
            'window 128,000 (explicit) - output 8,000 - system & tools 2,000 - margin 2,560 '
            '= limit 115,440; soft limit 86,580 (75% trigger)'
        )
        ```
    """

    context_window: int
    """The most tokens the model accepts in one request, input and output together."""

    reserved_output: int = DEFAULT_RESERVED_OUTPUT
    """Tokens kept free for the model's answer (set it to the request's `max_tokens`)."""

    reserved_system: int = 0
    """Tokens every request sends that the message view does not hold: tool definitions, and any
    system text a counter is not shown. This package's counters count `ModelRequest.instructions`
    with the view, so leave instructions out of this."""

    safety_margin: float = DEFAULT_SAFETY_MARGIN
    """Share of `context_window` (from 0 up to, not including, 1) kept free for counting error: a
    local tokenizer is not the provider's. See `safety_tokens`."""

    soft_threshold: float = DEFAULT_SOFT_THRESHOLD
    """Share of `limit`, in (0, 1], above which compaction starts."""

    min_headroom: int = 0
    """Tokens that must stay free below `limit`; fewer also starts compaction."""

    used: int = 0
    """Tokens the view holds now (see `pydantic_ai_context.tokens.measure_context`)."""

    window_source: WindowSource = 'explicit'
    """Where `context_window` came from: `'explicit'`, `'model-profile'`, `'genai-prices'`,
    `'window-table'`, `'default'` or `'provider'`."""

    input_limit: int | None = None
    """The most input tokens the provider accepts in one request where that is less than the window
    less the answer (gpt-5: 272,000 of a 400,000 window); `None` when it has no separate cap."""

    def __post_init__(self) -> None:
        _require_int('context_window', self.context_window, minimum=1)
        for name in ('reserved_output', 'reserved_system', 'min_headroom', 'used'):
            _require_int(name, getattr(self, name), minimum=0)
        if self.input_limit is not None:
            _require_int('input_limit', self.input_limit, minimum=1)
        if not 0 <= self.safety_margin < 1:
            raise ValueError(f'safety_margin must be in [0, 1), got {self.safety_margin!r}')
        if not 0 < self.soft_threshold <= 1:
            raise ValueError(f'soft_threshold must be in (0, 1], got {self.soft_threshold!r}')
        if self.window_source not in _SOURCES:
            raise ValueError(f'window_source must be one of {sorted(_SOURCES)}, got {self.window_source!r}')
        if self.limit <= 0:
            capped = f' (input capped at {self.input_limit:,})' if self.input_limit is not None else ''
            raise ValueError(
                f'context_window ({self.context_window:,}){capped} leaves no room for messages after '
                f'reserved_output ({self.reserved_output:,}), reserved_system ({self.reserved_system:,}) '
                f'and the safety margin ({self.safety_tokens:,})'
            )

    @classmethod
    def for_model(
        cls,
        model: Model | str | None = None,
        *,
        context_window: int | None = None,
        reserved_output: int | None = None,
        reserved_system: int = 0,
        safety_margin: float = DEFAULT_SAFETY_MARGIN,
        soft_threshold: float = DEFAULT_SOFT_THRESHOLD,
        min_headroom: int = 0,
        used: int = 0,
        input_limit: int | None = None,
    ) -> ContextBudget:
        """The budget of a request to `model`, its window resolved by `resolve_context_window`.

        `reserved_output` defaults to `DEFAULT_RESERVED_OUTPUT`, or a quarter of the window when
        that is smaller. `input_limit` defaults to the model's input cap (`resolve_input_limit`)
        unless the window is explicit.

        Example:
            ```python
            from pydantic_ai_context import ContextBudget

            budget = ContextBudget.for_model('openai:gpt-4o')
            assert (budget.context_window, budget.window_source) == (128_000, 'genai-prices')
            assert ContextBudget.for_model(None, context_window=8_000).reserved_output == 2_000
            assert ContextBudget.for_model('openai:gpt-5').input_limit == 272_000  # of a 400,000 window
            ```
        """
        window = resolve_context_window(model, explicit=context_window)
        if reserved_output is None:
            reserved_output = min(DEFAULT_RESERVED_OUTPUT, window.tokens // 4)
        if input_limit is None and window.source != 'explicit':
            input_limit = resolve_input_limit(model)
        return cls(
            context_window=window.tokens,
            reserved_output=reserved_output,
            reserved_system=reserved_system,
            safety_margin=safety_margin,
            soft_threshold=soft_threshold,
            min_headroom=min_headroom,
            used=used,
            window_source=window.source,
            input_limit=input_limit,
        )

    @property
    def safety_tokens(self) -> int:
        """The safety margin in tokens: `safety_margin` × `context_window`, rounded up."""
        return math.ceil(self.context_window * self.safety_margin)

    @property
    def input_tokens(self) -> int:
        """What a request may send: `context_window - reserved_output`, capped at `input_limit`."""
        room = self.context_window - self.reserved_output
        return room if self.input_limit is None else min(room, self.input_limit)

    @property
    def limit(self) -> int:
        """The most tokens the message view may hold: `input_tokens - reserved_system - safety_tokens`."""
        return self.input_tokens - self.reserved_system - self.safety_tokens

    def describe(self) -> str:
        """The budget's arithmetic in one line, as `inspect`, `replay`, `session.stats()` and the
        usage event show it (see `budget_line`)."""
        return budget_line(
            window=self.context_window,
            source=self.window_source,
            reserved_output=self.reserved_output,
            input_limit=self.input_limit,
            reserved_system=self.reserved_system,
            safety=self.safety_tokens,
            limit=self.limit,
            soft_limit=self.soft_limit,
            soft_threshold=self.soft_threshold,
        )

    @property
    def soft_limit(self) -> int:
        """The tokens above which compaction starts: `soft_threshold` × `limit`, rounded down."""
        return math.floor(self.limit * self.soft_threshold)

    @property
    def headroom(self) -> float:
        """The share of `limit` still free: `remaining() / limit` (1.0 when empty, negative when over)."""
        return self.remaining() / self.limit

    def remaining(self) -> int:
        """Tokens the view may still grow by: `limit - used` (negative when over the limit)."""
        return self.limit - self.used

    def over_soft_threshold(self) -> bool:
        """Whether `used` is above `soft_limit`."""
        return self.used > self.soft_limit

    def needs_compaction(self) -> bool:
        """Whether to compact: above the soft threshold, or less than `min_headroom` remaining."""
        return self.over_soft_threshold() or self.remaining() < self.min_headroom

    def fits(self, tokens: int | None = None) -> bool:
        """Whether `tokens` (by default `used`) is within `limit`."""
        return (self.used if tokens is None else tokens) <= self.limit

    def check(self, *, detail: str = '', policy: str | None = None) -> None:
        """Raise `ContextBudgetExceeded` with the numbers if `used` is over `limit`."""
        if not self.fits():
            raise ContextBudgetExceeded(self.used, self.limit, detail=detail, policy=policy)

    def with_used(self, used: int) -> ContextBudget:
        """A copy of this budget holding `used` tokens."""
        return dataclasses.replace(self, used=used)


def budget_line(
    *,
    window: int,
    source: str,
    reserved_output: int,
    reserved_system: int,
    safety: int,
    limit: int,
    soft_limit: int,
    soft_threshold: float,
    input_limit: int | None = None,
) -> str:
    """The budget's arithmetic in one line: the window, what is reserved, the limit, the soft limit.

    `ContextBudget.describe`, `ContextUsageEvent.budget_line`, `HistoryStats` (`session.stats()`)
    and the gauge lines of `inspect` and `replay` all print it, in the same words. An input cap
    that binds replaces the window less the answer.

    Example:
        ```python
        from pydantic_ai_context.budget import budget_line

        line = budget_line(
            window=16_000, source='explicit', reserved_output=4_000, reserved_system=314, safety=320,
            limit=11_366, soft_limit=8_524, soft_threshold=0.75,
        )
        assert line == (
            'window 16,000 (explicit) - output 4,000 - system & tools 314 - margin 320 '
            '= limit 11,366; soft limit 8,524 (75% trigger)'
        )
        ```
    """
    if input_limit is not None and input_limit < window - reserved_output:
        start = f'window {window:,} ({source}), input capped at {input_limit:,}'
    else:
        start = f'window {window:,} ({source}) - output {reserved_output:,}'
    return (
        f'{start} - system & tools {reserved_system:,} - margin {safety:,} = limit {limit:,}; '
        f'soft limit {soft_limit:,} ({soft_threshold:.0%} trigger)'
    )


def _require_int(name: str, value: Any, *, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f'{name} must be an int, got {type(value).__name__}')
    if value < minimum:
        raise ValueError(f'{name} must be >= {minimum}, got {value:,}')


# --- resolving the window -----------------------------------------------------------------------


class ContextWindow(NamedTuple):
    """A model's context window and where it came from; unpacks as `(tokens, source)`."""

    tokens: int
    source: WindowSource


def resolve_context_window(model: Model | str | None = None, *, explicit: int | None = None) -> ContextWindow:
    """A model's context window: `explicit`, else its profile, else genai-prices, else the default.

    - `explicit` always wins.
    - A `Model`'s profile: pydantic-ai 2.x profiles carry `context_window` (providers set it, or
      pydantic-ai fills it from genai-prices); 1.x profiles have no such field.
    - [genai-prices](https://github.com/pydantic/genai-prices)' bundled data, by model name and
      provider (`'openai:gpt-4o'`, or a `Model`'s `model_name` and `system`). Only the data shipped
      with the installed package is read: nothing here fetches updates.
    - This package's window table (source `'window-table'`): litellm's and models.dev's numbers,
      generated offline into the package (`tools/make_window_table.py`), by `provider:name`, else
      by bare name. Never fetched or updated at run time.
    - Else `DEFAULT_CONTEXT_WINDOW` (32,000), with source `'default'`, and a `ContextWarning` the
      first time each model name falls back to it (test models excepted), saying how to set it.

    A `FallbackModel` may send any request to any of its models: its window is the smallest of
    theirs (with that model's source), so that a view fitted to it fits whichever model serves.

    A model name string is not turned into a profile: that would import the provider's SDK.

    Example:
        ```python
        from pydantic_ai_context import resolve_context_window

        assert resolve_context_window('openai:gpt-4o') == (128_000, 'genai-prices')
        assert resolve_context_window('openai:gpt-4o', explicit=100_000) == (100_000, 'explicit')
        assert resolve_context_window('mistral:mistral-large-latest').source == 'window-table'
        ```
    """
    if explicit is not None:
        _require_int('explicit', explicit, minimum=1)
        return ContextWindow(explicit, 'explicit')
    if model is None:
        return ContextWindow(DEFAULT_CONTEXT_WINDOW, 'default')
    members = _fallback_members(model)
    if members:
        return min((resolve_context_window(m) for m in members), key=lambda w: w.tokens)
    if not isinstance(model, str):
        window = _profile_context_window(model)
        if window is not None:
            return ContextWindow(window, 'model-profile')
    name, provider = _model_reference(model)
    if name:
        window = _genai_prices_context_window(name, provider)
        if window is not None:
            return ContextWindow(window, 'genai-prices')
        found = table_window(name, provider)
        if found is not None:
            return ContextWindow(found.tokens, 'window-table')
    _announce_default(name, provider)
    return ContextWindow(DEFAULT_CONTEXT_WINDOW, 'default')


def resolve_input_limit(model: Model | str | None) -> int | None:
    """The most input tokens `model`'s provider accepts, where it caps input below the window.

    From this package's window table (see `resolve_context_window`); `None` when the model has no
    separate cap or is unknown. A `FallbackModel`'s is the smallest of its models' caps.

    Example:
        ```python
        from pydantic_ai_context import resolve_input_limit

        assert resolve_input_limit('openai:gpt-5') == 272_000  # of a 400,000 window
        assert resolve_input_limit('anthropic:claude-sonnet-4-6') is None  # the window is the cap
        ```
    """
    if model is None:
        return None
    members = _fallback_members(model)
    if members:
        caps = [cap for cap in map(resolve_input_limit, members) if cap is not None]
        return min(caps) if caps else None
    name, provider = _model_reference(model)
    found = table_window(name, provider) if name else None
    return found.input_limit if found is not None else None


# Model names already warned about falling back to the default window (once per name per process).
_ANNOUNCED: set[str] = set()
_ANNOUNCED_LOCK = threading.Lock()
# Test models have no window to set: a test that wants one passes it explicitly.
_TEST_PROVIDERS: Final = frozenset({'test', 'function'})


def _announce_default(name: str | None, provider: str | None) -> None:
    if not name or provider in _TEST_PROVIDERS or name == 'test' or name.startswith('function:'):
        return
    label = f'{provider}:{name}' if provider else name
    with _ANNOUNCED_LOCK:
        if label in _ANNOUNCED:
            return
        _ANNOUNCED.add(label)
    warnings.warn(
        f'no context window is known for model {label!r}: assuming {DEFAULT_CONTEXT_WINDOW:,} tokens. '
        f'Set it with profile(..., context_window=N) or PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW=N '
        f"(or the model's profile={{'context_window': N}}, or ContextBudget.for_model(model, "
        f'context_window=N)).',
        ContextWarning,
        stacklevel=3,
    )


def _fallback_members(model: Any) -> list[Any]:
    """The models a `FallbackModel` tries (it has no profile of its own), else nothing."""
    from pydantic_ai.models.fallback import FallbackModel

    return list(model.models) if isinstance(model, FallbackModel) else []


def _valid_window(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _profile_context_window(model: Any) -> int | None:
    try:
        profile = model.profile
    except Exception:  # a model whose profile cannot resolve (e.g. a missing SDK) has none to offer
        return None
    if isinstance(profile, Mapping):
        return _valid_window(profile.get('context_window'))
    return _valid_window(getattr(profile, 'context_window', None))


def _model_reference(model: Any) -> tuple[str | None, str | None]:
    """(model name, provider id) for a genai-prices lookup."""
    if isinstance(model, str):
        provider, sep, name = model.partition(':')
        if not sep or provider == 'ft' or ' ' in provider:
            return model, None
        return name, provider.removeprefix('gateway/') or None
    return getattr(model, 'model_name', None), getattr(model, 'system', None)


@functools.lru_cache(maxsize=1024)
def _genai_prices_context_window(name: str, provider: str | None) -> int | None:
    try:
        from genai_prices.data_snapshot import get_snapshot
    except ImportError:  # pragma: no cover - genai-prices is a dependency
        return None
    snapshot = get_snapshot()
    # The provider narrows the match; an id genai-prices does not know ('test', 'function') is
    # retried by model name alone.
    for provider_id in dict.fromkeys((provider, None)):
        try:
            _, info = snapshot.find_provider_model(
                model_ref=name, provider=None, provider_id=provider_id, provider_api_url=None
            )
        except LookupError:
            continue
        window = _valid_window(getattr(info, 'context_window', None))
        if window is not None:
            return window
    return None
