"""One more prompt-cache breakpoint, where the next compaction step will start (Anthropic, Bedrock).

Anthropic and Amazon Bedrock write a cache entry only where a request puts a breakpoint, and a
request reads an entry only when one of its own breakpoints is at it or up to about 20 content
blocks after it. pydantic-ai's `Caching` puts breakpoints after the tool definitions, after the
instructions and at the end of the conversation. A request that appends to the previous one reads
all of it; a request whose view changed ten or more steps back (a compaction step: masking the
next batch of observations, a new summary) reads only its tools and instructions, although most
of its messages are what the previous request sent.

Anthropic allows four breakpoints, so one is free, and this module places it:

- On a request that appends, right after the newest message that stands for compacted content
  (a masked, trimmed or superseded result, a finished run's digest, a summary, a drop note). The
  messages after it are the recency window the next step compacts, so that step's first change
  comes after it, and the entry written there is what that request can still read.
- On a request whose view changed out of the reach of its end breakpoint, on the newest entry
  the conversation's recent requests wrote (their ends and their points) that the view still
  starts with: the request reads that entry instead of its messages.

Which entries exist is remembered per conversation (`CachePointPlan`). The view itself is not
changed: the point is added to the request as it is sent (`with_cache_point`), so the view stays
a function of the log, and a process that lost the memory only places its next point as on a
request that appends. On the shared runs this recovers nearly all the cost the cache of the longest
common prefix would give (`bench/replay.py`, the "bp cost" column).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic_ai.messages import CachePoint, ModelMessage, ModelRequest, ModelResponse, UserPromptPart

from . import _parts
from ._markers import conversation_key

__all__ = (
    'LOOKBACK_BLOCKS',
    'TAIL_BREAKPOINT_BLOCKS',
    'CachePointPlan',
    'add_cache_point',
    'breakpoint_ttl',
    'content_blocks',
    'holds_cache_point',
    'previous_tail',
    'tail_takes_the_free_point',
    'with_cache_point',
    'write_position',
)

LOOKBACK_BLOCKS: Final = 20
"""How many content blocks before a breakpoint a provider looks back for an earlier entry."""
TAIL_BREAKPOINT_BLOCKS: Final = 18
"""More blocks than this after the previous request's end and pydantic-ai puts a breakpoint there
too (`pydantic_ai.models._prompt_cache.LOOKBACK_SAFE_BLOCKS`), which takes the free one."""

_COMPACTED_KINDS: Final = frozenset(
    {'masked', 'trimmed', 'args_clipped', 'superseded', 'isolated', 'summary', 'dropped'}
)
"""Markers that stand for older content a compaction step replaced. Clamps (`clamped`,
`prompt_clamped`) are left out: they shorten the newest result, inside the recency window."""
_PROVIDERS: Final = frozenset({'anthropic', 'bedrock'})
"""`Model.system` of the providers that cache only at breakpoints. OpenAI's chat and responses APIs
would send the point as an empty user message; Google drops it."""
_NOT_IN_MESSAGES: Final = frozenset({'system-prompt', 'instruction-baseline'})
"""Part kinds a request holds that take no position among the messages (the system prompt goes
first, with the instructions; a baseline is never sent)."""


def content_blocks(message: ModelMessage) -> int:
    """The content blocks (lookback positions) `message` takes in a request: at least one.

    Counted as the Claude API counts positions: each part of a response, each item of a user
    prompt, and a request's tool results together as one.
    """
    if isinstance(message, ModelResponse):
        return max(1, len(message.parts))
    results = 0
    others = 0
    for part in message.parts:
        kind = getattr(part, 'part_kind', None)
        if _parts.is_tool_result(part) or kind == 'retry-prompt':
            results = 1
        elif isinstance(part, UserPromptPart):
            others += 1 if isinstance(part.content, str) else max(1, len(part.content))
        elif kind not in _NOT_IN_MESSAGES:
            others += 1
    return max(1, results + others)


def previous_tail(view: Sequence[ModelMessage]) -> int | None:
    """Where the previous request ended in `view`: after the last request before the newest response."""
    for j in range(len(view) - 1, -1, -1):
        if isinstance(view[j], ModelResponse):
            for i in range(j - 1, -1, -1):
                if isinstance(view[i], ModelRequest):
                    return i + 1
            return None
    return None


def tail_takes_the_free_point(view: Sequence[ModelMessage]) -> bool:
    """pydantic-ai adds a breakpoint at the previous request's end (more than
    `TAIL_BREAKPOINT_BLOCKS` blocks follow it): with ours the request would be over the limit."""
    tail = previous_tail(view)
    return tail is not None and _blocks_over(view, tail, TAIL_BREAKPOINT_BLOCKS)


def _blocks_over(view: Sequence[ModelMessage], start: int, limit: int) -> bool:
    """More than `limit` content blocks in `view[start:]` (read from the end, only as far as needed)."""
    total = 0
    for i in range(len(view) - 1, start - 1, -1):
        total += content_blocks(view[i])
        if total > limit:
            return True
    return False


def breakpoint_ttl(model: Any, settings: Mapping[str, Any] | None) -> Literal['5m', '1h'] | None:
    """The TTL of the point to add when `model` caches the conversation at breakpoints under
    `settings` (pydantic-ai's unified `cache`, as `Caching` sets it, or the provider's own
    `anthropic_cache*` / `bedrock_cache_messages`, which take precedence); else `None`."""
    system = getattr(model, 'system', None)
    if system not in _PROVIDERS or not settings:
        return None
    prefix = f'{system}_cache'
    own = {k: v for k, v in settings.items() if k.startswith(prefix)}
    value: Any
    if own:
        value = own.get(f'{prefix}_messages') or (own.get(prefix) if system == 'anthropic' else None)
    else:
        value = settings.get('cache')
        if isinstance(value, Mapping):
            value = value.get('retention', True) if value.get('messages', True) else None
    if not value:
        return None
    return '1h' if value in ('1h', '12h') else '5m'


def holds_cache_point(view: Sequence[ModelMessage]) -> bool:
    """A request of `view` already carries a `CachePoint` (the application placed its own)."""
    return any(
        isinstance(part, UserPromptPart)
        and not isinstance(part.content, str)
        and any(isinstance(item, CachePoint) for item in part.content)
        for message in view
        if isinstance(message, ModelRequest)
        for part in message.parts
    )


def with_cache_point(
    view: Sequence[ModelMessage], at: int, ttl: Literal['5m', '1h'] = '5m'
) -> list[ModelMessage]:
    """`view` with a `CachePoint` after its first `at` messages (the request `view[at - 1]` gains a
    user-prompt part holding only the point: the provider marks the block before it)."""
    message = view[at - 1]
    assert isinstance(message, ModelRequest), 'a cache point follows a request'
    # Stamped as its request, so a request sent twice is the same request.
    point = UserPromptPart([CachePoint(ttl=ttl)])
    if message.timestamp is not None:
        point = dataclasses.replace(point, timestamp=message.timestamp)
    out = list(view)
    out[at - 1] = dataclasses.replace(message, parts=[*message.parts, point])
    return out


def _anchors(message: ModelMessage) -> bool:
    """A point after `message` lands on a block it sends (a tool result, a retry, a user prompt)."""
    if not isinstance(message, ModelRequest):
        return False
    return any(
        _parts.is_tool_result(part)
        or getattr(part, 'part_kind', None) == 'retry-prompt'
        or (isinstance(part, UserPromptPart) and bool(part.content))
        for part in message.parts
    )


def write_position(view: Sequence[ModelMessage]) -> int:
    """Right after the newest message that stands for compacted content (see the module), moved
    back to the nearest request a point can follow; 0 when the view holds none."""
    for i in range(len(view) - 1, -1, -1):
        message = view[i]
        if _compacted(message):
            for k in range(i, -1, -1):
                if _anchors(view[k]):
                    return k + 1
            return 0
    return 0


def _compacted(message: ModelMessage) -> bool:
    record = _parts.marker(message)
    if record is not None and record.get('kind') in _COMPACTED_KINDS:
        return True
    return any((_parts.marker(p) or {}).get('kind') in _COMPACTED_KINDS for p in message.parts)


def add_cache_point(
    plan: CachePointPlan,
    view: list[ModelMessage],
    *,
    model: Any,
    settings: Mapping[str, Any] | None,
    conversation: Hashable | None = None,
) -> list[ModelMessage]:
    """The request to send for `view`: with the point `plan` places, when `model` caches the
    conversation at breakpoints and the application placed none of its own; else `view` itself.
    `conversation` (`None`: told from the view's opening prompt) names whose requests are remembered."""
    ttl = breakpoint_ttl(model, settings)
    if ttl is None or holds_cache_point(view):
        return view
    at = plan.place(view, conversation if conversation is not None else conversation_key(view))
    return with_cache_point(view, at, ttl) if at is not None else view


@dataclass(frozen=True)
class _Sent:
    """A request as sent: its view and the prefix lengths it wrote cache entries at."""

    view: Sequence[ModelMessage]
    points: tuple[int, ...]


class CachePointPlan:
    """Where each request of a conversation puts the free breakpoint (see the module).

    Remembers the last `REMEMBERED` requests of at most `conversations` conversations (the least
    recently used is forgotten first; one forgotten only loses the read on its next step).

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

        from pydantic_ai_context._cache_points import CachePointPlan

        def step(i: int, content: str, masked: bool = False) -> list:
            meta = {'pydantic_ai_context': {'kind': 'masked'}} if masked else None
            return [
                ModelResponse(parts=[ToolCallPart('cat', {}, tool_call_id=f'c{i}')]),
                ModelRequest(parts=[ToolReturnPart('cat', content, tool_call_id=f'c{i}', metadata=meta)]),
            ]

        plan = CachePointPlan()
        head = [ModelRequest.user_text_prompt('fix it')]
        view = head + step(0, '[masked]', masked=True) + step(1, 'new') + step(2, 'newer')
        assert plan.place(view, 'c1') == 3  # after the masked result: where the next step starts
        ```
    """

    REMEMBERED: Final = 4

    def __init__(self, *, conversations: int = 64) -> None:
        if conversations < 1:
            raise ValueError(f'conversations must be >= 1, got {conversations}')
        self.conversations = conversations
        self._sent: collections.OrderedDict[Hashable, collections.deque[_Sent]] = collections.OrderedDict()

    def place(self, view: Sequence[ModelMessage], conversation: Hashable) -> int | None:
        """The prefix length (messages before it) to put the point after, or `None` for no point;
        then this request's entries are remembered as written."""
        sent = self._sent.get(conversation)
        if sent is None:
            sent = self._sent[conversation] = collections.deque(maxlen=self.REMEMBERED)
            while len(self._sent) > self.conversations:
                self._sent.popitem(last=False)
        else:
            self._sent.move_to_end(conversation)
        n = len(view)
        point: int | None = None
        if n and not tail_takes_the_free_point(view):
            entry = _newest_entry(view, sent)
            if entry is not None and entry < n and _blocks_over(view, entry, LOOKBACK_BLOCKS):
                point = entry  # out of the end's reach: read it
            else:
                at = write_position(view)
                point = at if 0 < at < n else None
        sent.append(_Sent(list(view), (n,) if point is None else (n, point)))
        return point

    def forget(self, conversation: Hashable) -> None:
        """Drop what is remembered of `conversation`."""
        self._sent.pop(conversation, None)


def _newest_entry(view: Sequence[ModelMessage], sent: Sequence[_Sent]) -> int | None:
    """The longest prefix of `view` a remembered request wrote an entry at."""
    best: int | None = None
    for earlier in sent:
        points = [p for p in earlier.points if p <= len(view) and (best is None or p > best)]
        if not points:
            continue
        same = _common_prefix(view, earlier.view, max(points))
        fits = [p for p in points if p <= same]
        if fits:
            best = max(fits)
    return best


def _common_prefix(a: Sequence[ModelMessage], b: Sequence[ModelMessage], limit: int) -> int:
    n = min(len(a), len(b), limit)
    for i in range(n):
        x, y = a[i], b[i]
        if x is not y and x != y:
            return i
    return n
