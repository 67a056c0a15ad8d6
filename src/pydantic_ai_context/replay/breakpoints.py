"""What a provider that caches at explicit breakpoints (Anthropic, Amazon Bedrock) would serve.

`RequestRecord.cached_tokens` counts the longest run of leading messages a request shares with
the previous one: OpenAI's (and Gemini's, DeepSeek's) automatic prompt caching reads that much.
A provider with explicit breakpoints reads less when a request changes an earlier message:

- A cache entry is written only where a request puts a breakpoint. pydantic-ai's `Caching`
  capability puts one after the tool definitions, one after the instructions, and one at the end
  of the conversation; and one at the end of the previous request too when more than 18 content
  blocks follow it (`pydantic_ai.models._prompt_cache.LOOKBACK_SAFE_BLOCKS`).
- A request reads the longest prefix that ends at one of its breakpoints, or at a content block
  boundary up to 20 blocks before one, and that an earlier request wrote.

So a request that appends to the previous one reads all of it, and one that changes a message
more than about 20 blocks before its end (a compaction step) reads only the tools and the
instructions, unless an earlier request wrote an entry before its first change and one of its
own breakpoints reaches it. A profile adds that fourth breakpoint (`_cache_points`): the replay
passes it to `read` as `point`. Content blocks are counted as the Claude API counts positions
(`_cache_points.content_blocks`): each part of a response, each item of a user prompt, and a
request's tool results together as one. Retention windows are not modelled (a replay has no
clock), as they are not for `cached_tokens`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from .._cache_points import LOOKBACK_BLOCKS, TAIL_BREAKPOINT_BLOCKS, content_blocks, previous_tail
from ..request_tokens import RequestTokens

__all__ = ('LOOKBACK_BLOCKS', 'TAIL_BREAKPOINT_BLOCKS', 'BreakpointCache', 'content_blocks')


class BreakpointCache:
    """The entries one conversation's requests wrote at their breakpoints, and what each request reads.

    `sent` gives a message as the provider receives it (the replay leaves out metadata); two
    requests' prefixes are the same when their messages are, as sent, and their tools and
    instructions are.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart

        from pydantic_ai_context import HeuristicCounter
        from pydantic_ai_context.replay.breakpoints import BreakpointCache
        from pydantic_ai_context.request_tokens import weigh_request

        counter = HeuristicCounter()
        cache = BreakpointCache(lambda m: m)
        first = [ModelRequest.user_text_prompt('hi')]
        assert cache.read(first, weigh_request(first, counter=counter, per_message=True)) == 0
        second = [*first, ModelResponse(parts=[TextPart('hello')]), ModelRequest.user_text_prompt('and?')]
        weight = weigh_request(second, counter=counter, per_message=True)
        assert cache.read(second, weight) == weight.per_message[0]  # the first request's entry
        ```
    """

    def __init__(self, sent: Callable[[ModelMessage], ModelMessage]) -> None:
        self._sent = sent
        self._entries: set[bytes] = set()
        # Per message object (kept alive here, so its id is not reused): its digest as sent.
        self._digests: dict[int, tuple[ModelMessage, bytes]] = {}

    def read(self, view: Sequence[ModelMessage], weight: RequestTokens, *, point: int | None = None) -> int:
        """The tokens of `view` (weighed as `weight`, per message) the provider serves from its
        cache; then the entries this request writes are added. `point`: the free breakpoint a
        profile adds after that many messages (see `_cache_points`); it is dropped where pydantic-ai
        already takes the fourth breakpoint at the previous request's end."""
        assert weight.per_message is not None
        fixed = repr(
            (weight.instructions, weight.instructions_tokens, weight.tools_tokens, weight.extra_tokens)
        ).encode('utf-8', 'surrogatepass')
        chain = [hashlib.blake2b(fixed, digest_size=16).digest()]
        for message in view:
            chain.append(hashlib.blake2b(chain[-1] + self._digest(message), digest_size=16).digest())
        blocks = [content_blocks(m) for m in view]
        points = [len(view)]
        tail = previous_tail(view)
        if tail is not None and sum(blocks[tail:]) > TAIL_BREAKPOINT_BLOCKS:
            points.append(tail)
        elif point is not None:
            points.append(point)
        entries = self._entries
        cached = -1
        for point in points:
            k, behind = point, 0
            while k > cached and behind <= LOOKBACK_BLOCKS:
                if chain[k] in entries:
                    cached = k
                    break
                if k == 0:
                    break
                k -= 1
                behind += blocks[k]
        # The tools and the instructions have breakpoints of their own: read whenever unchanged.
        tokens = 0
        if cached >= 0 or chain[0] in entries:
            tokens = weight.instructions_tokens + weight.tools_tokens + weight.extra_tokens
            tokens += sum(weight.per_message[: max(cached, 0)])
        entries.add(chain[0])
        entries.update(chain[point] for point in points)
        return tokens

    def _digest(self, message: ModelMessage) -> bytes:
        found = self._digests.get(id(message))
        if found is not None and found[0] is message:
            return found[1]
        encoded = ModelMessagesTypeAdapter.dump_json([self._sent(message)])
        digest = hashlib.blake2b(encoded, digest_size=16).digest()
        self._digests[id(message)] = (message, digest)
        return digest
