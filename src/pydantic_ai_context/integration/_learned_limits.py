"""What provider rejections taught about a model's limit: evidence the profile weighs, never a verdict.

When a provider rejects a request as too long, the profile learns, per model, the window the
rejection states (if it states a plausible one) and an input cap below the rejected request (when
the stated window does not explain the rejection, or none was stated). Both tighten later budgets
for that model, within bounds:

- a cap never goes below what a request's fixed part needs (its instructions and tool definitions)
  plus room for messages, nor below `MIN_INPUT_CAP`; a stated window smaller than the request's
  fixed part plus its reserved output, or than `MIN_PLAUSIBLE_WINDOW`, is ignored ("maximum
  context length is 1 tokens" teaches nothing);
- a learned limit is re-tested: after `retest_requests` requests or `retest_seconds` seconds (each
  doubled by every rejection in a row) a request may use the known window again. A success above
  the learned limit lifts it; another rejection learns it again.

Every learned limit says where it came from (`LearnedLimit.source`), so an error can name it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from ._overflow import Overflow

MIN_INPUT_CAP: Final = 2_048
"""Input tokens (messages + instructions + tools) no learned cap goes below."""
MIN_MESSAGE_ROOM: Final = 1_024
"""Tokens for messages a learned cap leaves beside a request's instructions and tool definitions."""
MIN_PLAUSIBLE_WINDOW: Final = 1_024
"""A stated window below this is not believed (no current chat model has one)."""
RETEST_REQUESTS: Final = 50
"""Requests compiled under a learned limit before one may try the known window again."""
RETEST_SECONDS: Final = 600.0
"""Seconds after which a learned limit is re-tested (doubled by each rejection in a row)."""


@dataclass
class LearnedLimit:
    """The limit learned for one model: a stated window and/or an input cap, and where they came from."""

    stated: int | None
    """The window the provider stated, if it stated a plausible one."""
    cap: int | None
    """The most input tokens (messages, instructions, tool definitions) a request may send."""
    source: str
    """Where it was learned: the rejection's kind, the rejected size, the time (UTC)."""
    learned_at: float
    requests: int = 0
    """Requests compiled under it since it was learned."""
    strikes: int = 1
    """Rejections in a row without a success above it: each doubles the time to the next re-test."""
    retesting: bool = False
    """The known window is being tried again (the limit is not applied)."""

    def describe(self) -> str:
        """`'learned from <source>'`, for messages."""
        return f'learned from {self.source}'


@dataclass
class LearnedLimits:
    """Limits learned from provider rejections, per model key (see the module docstring)."""

    retest_requests: int = RETEST_REQUESTS
    retest_seconds: float = RETEST_SECONDS
    clock: Callable[[], float] = time.monotonic
    _limits: dict[str, LearnedLimit] = field(default_factory=dict[str, LearnedLimit])

    def get(self, key: str) -> LearnedLimit | None:
        """The limit learned for `key`, whether in force or being re-tested."""
        return self._limits.get(key)

    def in_force(self, key: str) -> LearnedLimit | None:
        """The limit a request to `key` is compiled under now, or `None` (nothing learned, or a
        re-test: this request may use the known window). Counts the request."""
        limit = self._limits.get(key)
        if limit is None:
            return None
        if limit.retesting:
            return None
        limit.requests += 1
        wait = self.retest_seconds * 2 ** (limit.strikes - 1)
        if limit.requests > self.retest_requests * 2 ** (limit.strikes - 1) or (
            self.clock() - limit.learned_at >= wait
        ):
            limit.retesting = True
            return None
        return limit

    def learn(
        self,
        key: str,
        overflow: Overflow,
        rejected: int,
        *,
        fixed: int,
        reserved_output: int,
        shrink: float,
    ) -> LearnedLimit | None:
        """Weigh one rejection of a `rejected`-token request (`fixed` of it instructions and tools)."""
        previous = self._limits.get(key)
        stated = previous.stated if previous is not None and not previous.retesting else None
        cap = previous.cap if previous is not None and not previous.retesting else None
        told = overflow.limit
        if told is not None and told >= max(MIN_PLAUSIBLE_WINDOW, fixed + min(reserved_output, told // 4)):
            stated = told if stated is None else min(stated, told)
        # A rejection the stated window does not explain means this counter undercounts for the
        # provider: cap the input below what was rejected, but never below what a request needs.
        if stated is None or rejected <= stated - min(reserved_output, stated // 4):
            floor = max(MIN_INPUT_CAP, fixed + MIN_MESSAGE_ROOM)
            shrunk = max(floor, math.floor(rejected * shrink))
            if shrunk < rejected:
                cap = shrunk if cap is None else max(floor, min(cap, shrunk))
        if stated is None and cap is None:
            # Nothing plausible to learn (a tiny request "too long", an absurd stated limit).
            return previous if previous is not None and not previous.retesting else None
        when = datetime.fromtimestamp(time.time(), UTC).strftime('%H:%M:%S UTC')
        said = f', stating a {told:,}-token window' if told is not None and stated == told else ''
        limit = LearnedLimit(
            stated=stated,
            cap=cap,
            source=f'a {overflow.message} rejection of a {rejected:,}-token request at {when}{said}',
            learned_at=self.clock(),
            strikes=previous.strikes + 1 if previous is not None else 1,
        )
        self._limits[key] = limit
        return limit

    def succeeded(self, key: str, sent: int) -> None:
        """A `sent`-token request to `key` was accepted: a limit it went past is lifted."""
        limit = self._limits.get(key)
        if limit is None:
            return
        if limit.cap is not None and sent > limit.cap:
            limit.cap = None
        if limit.stated is not None and sent > limit.stated:
            limit.stated = None
        if limit.cap is None and limit.stated is None:
            del self._limits[key]
