"""What reading back would have cost a replayed run: the recall charge of each request.

A view that leaves out a fact the agent's next action uses is only as good as what it costs to
get the fact back. When the recorded response at index `i` uses a fact (a path or error line of
an earlier tool output, verbatim in its call arguments or text) that the view does not show, the
agent would first have had to read it back. The request is charged what that takes, with the
real tools on the replayed log:

- a fact whose tool result the view names (its own part, a marker keeps the id) on the first
  page of `read_context`: one read;
- any other (only inside a span, or further down its output): a `search_context` for the fact,
  then, unless the search snippet already shows it, a read of the page that holds it.

Searches go out together in one extra request, reads in one more. An extra request re-sends the
view plus what earlier rounds added, as a cached prefix, and adds the calls and what they return
uncached. A fact that no ref reaches (no read-back tools, or a policy that left no marker) is
unrecoverable: it counts against `needed_or_recoverable` and costs nothing.

Two accountings (`RecallCharge`): *round trips* charges every request its own read-back and
carries nothing further (issue 10's definition); *kept* carries each page into the run's later
requests, as a real run would (read-back results are never compacted): re-sent cached by every
later request, and its facts found there without another round trip.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelMessage

from .. import _markers, _parts
from ..readback import read_context, search_context
from ..readback.archive import ContextArchive
from ..tokens import TokenCounter
from ..views import run_spans
from .facts import FactIndex

_NEXT_PAGE = re.compile(r'offset=(\d+)\)\]$')


@dataclass(frozen=True)
class RecallCharge:
    """The read-back one replayed request needed, counted two ways.

    *Round trips*: each request that needs a fact pays its own read-back (the call, the page as
    extra input, one extra request), and the page is not carried further. *Kept*: a page read
    back stays in the run's later views (read-back results are never compacted), so later
    requests re-send it (cached) and find its facts without another round trip.
    """

    used_missing: int = 0
    """Facts the response uses that the view does not show."""
    unrecoverable: int = 0
    """Of those, facts no read-back reaches."""
    round_trips: int = 0
    """Extra model requests (one for the searches, one for the reads)."""
    cached_tokens: int = 0
    """Prefix tokens the extra requests re-send (the view, then what earlier rounds added)."""
    uncached_tokens: int = 0
    """Tokens of the read-back calls and of what they returned."""
    kept_round_trips: int = 0
    kept_cached_tokens: int = 0
    kept_uncached_tokens: int = 0
    """The same three when earlier pages of the run stay in view."""
    carried_tokens: int = 0
    """Tokens of earlier read-back pages this request re-sends (kept accounting; cached)."""


NO_CHARGE = RecallCharge()


@dataclass
class Reach:
    """What read-back can reach from one view: tool results by id, directly or inside spans."""

    direct: set[str]
    """Tool call ids the view names: a result's own part (a marker keeps its id) or a marker's ref."""
    all: set[str]
    """`direct` plus the tool results of every span a marker of the view names."""


class SpanCalls:
    """The tool call ids inside each span of an archive (spans never change under a ref)."""

    def __init__(self, archive: ContextArchive, conversation: str | None) -> None:
        self.archive = archive
        self.conversation = conversation
        self._calls: dict[str, frozenset[str]] = {}

    def resolve(self, conversation: str | None) -> None:
        """Name the conversation once it is known (what was read before it named nothing)."""
        if conversation is not None and conversation != self.conversation:
            self.conversation = conversation
            self._calls.clear()

    def of(self, ref: str) -> frozenset[str]:
        found = self._calls.get(ref)
        if found is not None:
            return found
        # Walked with a stack, not recursion: each summary of a long growing log names the previous
        # summary's span, one level per summary. Each span is read once.
        calls: set[str] = set()
        seen = {ref}
        pending = [ref]
        while pending:
            at = pending.pop()
            known = self._calls.get(at)
            if known is not None:
                calls |= known
                continue
            items = self.archive.span(at, conversation=self.conversation)
            for item in items or ():
                inner: str | None
                if isinstance(item, str):
                    inner = item
                else:
                    for part in item.parts:
                        call_id = getattr(part, 'tool_call_id', None)
                        if _parts.is_tool_result(part) and call_id:
                            calls.add(call_id)
                    inner = _markers.ref_of(item)
                if inner is not None and inner not in seen:
                    seen.add(inner)
                    pending.append(inner)
        found = self._calls[ref] = frozenset(calls)
        return found


def reach(view: Sequence[ModelMessage], spans: SpanCalls) -> Reach:
    direct: set[str] = set()
    inside: set[str] = set()
    for message in view:
        for part in message.parts:
            if _parts.is_tool_result(part) and part.tool_call_id:
                direct.add(part.tool_call_id)
        ref = _markers.ref_of(message)
        if ref is not None:
            inside |= spans.of(ref)
    return Reach(direct, direct | inside)


@dataclass(frozen=True)
class _Trips:
    rounds: int = 0
    cached: int = 0
    uncached: int = 0
    text: str = ''
    """What the calls returned (for the kept accounting)."""


class RecallLedger:
    """The recall charges of one replay, request by request (pages kept per run for the second count)."""

    def __init__(
        self,
        facts: FactIndex,
        log: Sequence[ModelMessage],
        archive: ContextArchive | None,
        counter: TokenCounter,
    ) -> None:
        self.facts = facts
        self.log = log
        self.spans = SpanCalls(archive, archive.conversation_of(log)) if archive is not None else None
        self.counter = counter
        self._runs = run_spans(log)
        self._history: Sequence[ModelMessage] | None = None
        self._kept: list[tuple[int, int, str]] = []
        """(run start, tokens, text) of each round of read-back calls, kept accounting."""

    def charge(
        self,
        index: int,
        view: Sequence[ModelMessage],
        view_tokens: int,
        present: set[int],
        *,
        history: Sequence[ModelMessage] | None = None,
    ) -> tuple[RecallCharge, Reach | None]:
        """The charge of the request answered by `log[index]`, whose input compiled to `view`.

        `history` is that input as compiled (default `log[:index]`): read-back reads it, and a log
        without pydantic-ai ids is known to the archive by what was compiled."""
        self._history = history
        if self.spans is not None and self.spans.conversation is None:
            # A log without pydantic-ai ids is known by its compile lineage, which only exists once
            # the profile has compiled it: the view just compiled names the conversation.
            self.spans.resolve(self.spans.archive.conversation_of(view))
        run = next((s.start for s in self._runs if index in s), 0)
        kept = [(tokens, text) for start, tokens, text in self._kept if start == run]
        carried = sum(tokens for tokens, _ in kept)
        missing = [k for k in self.facts.used_at(index) if k not in present]
        if not missing:
            return RecallCharge(carried_tokens=carried), None
        if self.spans is None:
            return RecallCharge(
                used_missing=len(missing), unrecoverable=len(missing), carried_tokens=carried
            ), None
        reached = reach(view, self.spans)
        reachable = [k for k in missing if any(c in reached.all for c in self.facts.source_calls[k])]
        trips = self._round_trips(index, reachable, reached, view_tokens)
        on_pages = '\n'.join(text for _, text in kept)
        still = [k for k in reachable if self.facts.facts[k] not in on_pages]
        kept_trips = (
            trips if still == reachable else self._round_trips(index, still, reached, view_tokens + carried)
        )
        if kept_trips.rounds:
            self._kept.append((run, kept_trips.uncached, kept_trips.text))
        return (
            RecallCharge(
                used_missing=len(missing),
                unrecoverable=len(missing) - len(reachable),
                round_trips=trips.rounds,
                cached_tokens=trips.cached,
                uncached_tokens=trips.uncached,
                kept_round_trips=kept_trips.rounds,
                kept_cached_tokens=kept_trips.cached,
                kept_uncached_tokens=kept_trips.uncached,
                carried_tokens=carried,
            ),
            reached,
        )

    def _round_trips(self, index: int, wanted: Sequence[int], reached: Reach, prefix: int) -> _Trips:
        if not wanted:
            return _Trips()
        assert self.spans is not None
        archive = self.spans.archive
        history = self._history if self._history is not None else self.log[:index]
        counter = self.counter
        searches: list[str] = []
        reads: dict[tuple[str, int], None] = {}
        pending: list[tuple[int, str, int]] = []
        for k in wanted:
            calls = [c for c in self.facts.source_calls[k] if c in reached.all]
            direct = [c for c in calls if c in reached.direct]
            ref = (direct or calls)[-1]
            offset = _page_of(self.facts.facts[k], ref, history, archive)
            if direct and offset == 0:
                reads[(ref, 0)] = None
            else:
                searches.append(self.facts.facts[k])
                pending.append((k, ref, offset))
        rounds: list[int] = []
        texts: list[str] = []
        if searches:
            added = 0
            for query in searches:
                added += _tokens(counter, _markers.SEARCH_CONTEXT, {'query': query})
                try:
                    result = search_context(query, history, archive)
                except ModelRetry as exc:
                    result = str(exc)
                texts.append(result)
                added += counter.count_text(result)
            found = '\n'.join(texts)
            for k, ref, offset in pending:
                if self.facts.facts[k] not in found:
                    reads[(ref, offset)] = None
            rounds.append(added)
        if reads:
            added = 0
            for ref, offset in reads:
                added += _tokens(counter, _markers.READ_CONTEXT, {'ref': ref, 'offset': offset})
                try:
                    page = read_context(ref, history, archive, offset=offset)
                except ModelRetry as exc:
                    page = str(exc)
                texts.append(page)
                added += counter.count_text(page)
            rounds.append(added)
        cached = 0
        for added in rounds:
            cached += prefix
            prefix += added
        return _Trips(len(rounds), cached, sum(rounds), '\n'.join(texts))


def recoverable(
    facts: FactIndex,
    ids: Sequence[int],
    view: Sequence[ModelMessage],
    spans: SpanCalls | None,
    reached: Reach | None,
) -> int:
    """How many of the fact ids `ids` (missing from `view`) read-back reaches."""
    if not ids or spans is None:
        return 0
    reached = reached if reached is not None else reach(view, spans)
    return sum(1 for k in ids if any(c in reached.all for c in facts.source_calls[k]))


def _page_of(fact: str, ref: str, history: Sequence[ModelMessage], archive: ContextArchive) -> int:
    """The `read_context` offset of the page of `ref` that shows `fact` (0 when none does)."""
    offset: int | None = 0
    while offset is not None:
        try:
            header, _, body = read_context(ref, history, archive, offset=offset).partition('\n')
        except ModelRetry:
            return 0
        if fact in body:
            return offset
        more = _NEXT_PAGE.search(header)
        offset = int(more.group(1)) if more else None
    return 0


def _tokens(counter: TokenCounter, tool: str, args: dict[str, Any]) -> int:
    return counter.count_text(f'{tool} {json.dumps(args)}')
