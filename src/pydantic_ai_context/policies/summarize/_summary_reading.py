"""What `summarize_window` keeps of a conversation from one compile to the next, and what it reads off it.

`Reading` holds what the policy reads of each message of its input (tokens, observation counts,
markers, running hashes of spans); `SummaryLedger` is the policy's own store of that reading with
the message digests, span digests of the canonical log and cache keys it derives: every count,
digest and key the policy, its planning and its summaries made ahead ask for is answered here,
from the previous compile's work where the conversation did not change.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import json
import operator
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ModelResponse
from pydantic_core import PydanticSerializationError

from pydantic_ai_context import _markers, _parts
from pydantic_ai_context._memo import ObjectMemo
from pydantic_ai_context._prefix import equal_prefix_length
from pydantic_ai_context._scope import active_generation
from pydantic_ai_context.integrity import _Cuts, check_messages, safe_cut_points
from pydantic_ai_context.policies._frontier import _Failures, counter_key, unresolved_failures
from pydantic_ai_context.policies.summarize._summary_block import MARKER_KIND, Zones, may_keep
from pydantic_ai_context.policies.summarize.summariser import PROMPT_VERSION, model_name
from pydantic_ai_context.tokens import TokenCounter, _MessageCounter, message_tokens
from pydantic_ai_context.views import RunSpan, _Runs, current_run, run_spans

__all__ = ('LogDigests', 'Reading', 'StepEnds', 'SummaryLedger', 'cache_key', 'key_template')


# --- what the policy reads of each message, from one compile to the next --------------------------


@dataclass(eq=False)
class Running:
    """A running hash over the messages from `start`: its state after each of them."""

    start: int
    seed: Any
    """The state before the first message."""
    states: list[Any] = field(default_factory=list[Any])

    def at(self, end: int, piece: Callable[[int], bytes]) -> Any:
        """The state after `messages[start:end]` (a copy, free to finish)."""
        if end <= self.start:
            return self.seed.copy()
        states = self.states
        if len(states) < end - self.start:
            running = (states[-1] if states else self.seed).copy()
            for i in range(self.start + len(states), end):
                running.update(piece(i))
                states.append(running.copy())
        return states[end - self.start - 1].copy()


@dataclass(eq=False)
class Suffix:
    """Tokens of `messages[i:]`, from running totals."""

    totals: list[int]

    def __getitem__(self, i: int) -> int:
        return self.totals[-1] - self.totals[i]


_SERIALS: Final = itertools.count(1)
"""Serial numbers of readings (`Reading.serial`)."""
_MESSAGE_TYPES: Final = frozenset({ModelRequest, ModelResponse})
_TEXTS: Final = 8
"""Texts whose tokens `SummaryLedger.text_tokens` remembers."""
_PARTS: Final = operator.attrgetter('parts')

_RUNNING_STARTS: Final = 4
"""Running hashes kept per kind (by the span's start): the chain of cached summaries has a few links."""


@dataclass(eq=False)
class Reading:
    """What `summarize_window` reads of each message of its input, kept from one compile to the next.

    Per message: its tokens (running totals), whether it is a tool-result request (running count),
    whether it carries a summary's marker, whether the summary's block may have to keep something
    of it, its digest; and running hashes of spans (the cache key's digest and the span's ref). The
    next compile of the same conversation (same generation of the compiling scope: no message
    edited in place since) reads only the messages from the first one that changed, so zones,
    plans, keys and refs cost the new messages plus a few passes over plain lists.
    """

    messages: tuple[ModelMessage, ...]
    generation: int | None
    counter: Hashable
    totals: list[int]
    """`message_tokens` of the messages before each one, and of all."""
    observations: list[int]
    """Tool-result requests before each message, and of all."""
    summaries: list[int]
    """Messages that carry a summary's marker."""
    own: list[int]
    """Messages the block may keep something of whatever their neighbours (`may_keep`)."""
    pinned: list[int]
    """Requests that are pinned or hold a pinned result (the response before may keep its calls)."""
    failed: list[int]
    """Requests that hold a failed result (the response before may keep an unresolved call)."""
    instructed: list[int]
    """Requests whose `instructions` are set (`count_messages` counts the newest of a list's once)."""
    exact: bool
    """`count` gives `count_messages` from the totals (the counter's own per-message counts)."""
    digests: list[str] = field(default_factory=list[str])
    """Digests of the first messages (read as the cache keys need them)."""
    keys: dict[Any, Running] = field(default_factory=dict[Any, Running])
    """Running hashes of message digests (cache keys), by the span's start."""
    refs: dict[Any, Running] = field(default_factory=dict[Any, Running])
    """Running hashes of message signatures (span refs), by the span's start and earlier ref."""
    cache_keys: dict[Any, dict[int, str]] = field(default_factory=dict[Any, dict[int, str]])
    """Cache keys of spans, by the span's start and key template, then by the span's end."""
    instruction_tokens: dict[int, int] = field(default_factory=dict[int, int])
    """Tokens of the instructions of the requests in `instructed`, as read."""
    misses: dict[Any, tuple[int, set[int]]] = field(default_factory=dict[Any, tuple[int, set[int]]])
    """Span ends whose cache key the summary cache held no summary for, by the span's start and key
    template, with the cache's `writes` when they were looked up (`walk_chain`)."""
    cuts: list[int] | None = None
    """`safe_cut_points` of the messages, once asked for."""
    folds: Followers | None = None
    """The policy's folds over its inputs (cut points, runs, failures), brought up to this reading."""
    serial: int = field(default_factory=lambda: next(_SERIALS))
    """This reading's place in its policy's sequence of readings (each one resumes the one before)."""
    born: list[int] = field(default_factory=list[int])
    """Per message, the serial of the reading that first read it (or an equal message) at its
    place (non-decreasing: a reading keeps a prefix of the one before and reads the rest)."""

    @classmethod
    def of(
        cls,
        messages: Sequence[ModelMessage],
        counter: TokenCounter,
        previous: Reading | None,
        folds: Followers | None = None,
    ) -> Reading:
        generation = active_generation()
        key = counter_key(counter)
        same = 0
        if (
            previous is not None
            and generation is not None
            and previous.generation == generation
            and previous.counter == key
        ):
            # Equal messages read the same (every count, digest and fold here is of their values):
            # list equality, in C, instead of an identity pass.
            same = equal_prefix_length(previous.messages, messages)
        if previous is None or same == 0:
            reading = cls(
                (), generation, key, [0], [0], [], [], [], [], [], isinstance(counter, _MessageCounter)
            )
        else:
            # A copy: a compile suspended in the summariser call still reads the one it made.
            reading = previous.truncated(same)
        reading.folds = folds
        reading._read(messages, counter)
        return reading

    def reads(self, messages: Sequence[ModelMessage]) -> bool:
        """This reading is of `messages` (the list the policy is applied to)."""
        return len(self.messages) == len(messages) and (not messages or self.messages[-1] is messages[-1])

    def truncated(self, n: int) -> Reading:
        """What this reading holds of its first `n` messages (a new reading: this one is unchanged,
        and no list or dict is shared, so two compiles resuming one reading at once never meet)."""

        def below(positions: list[int]) -> list[int]:
            return positions[: bisect.bisect_left(positions, n)]

        def kept(runnings: dict[Any, Running]) -> dict[Any, Running]:
            return {
                key: Running(r.start, r.seed, r.states[: n - r.start])
                for key, r in runnings.items()
                if r.start < n
            }

        return Reading(
            self.messages[:n],
            self.generation,
            self.counter,
            self.totals[: n + 1],
            self.observations[: n + 1],
            below(self.summaries),
            below(self.own),
            below(self.pinned),
            below(self.failed),
            below(self.instructed),
            self.exact,
            self.digests[:n],
            kept(self.keys),
            kept(self.refs),
            {
                key: ends.copy()
                if max(ends, default=0) <= n
                else {end: k for end, k in ends.items() if end <= n}
                for key, ends in self.cache_keys.items()
                if key[0] < n
            },
            {i: t for i, t in self.instruction_tokens.items() if i < n},
            {
                key: (writes, ends.copy() if max(ends, default=0) <= n else {end for end in ends if end <= n})
                for key, (writes, ends) in self.misses.items()
                if key[0] < n
            },
            born=self.born[:n],
        )

    def _read(self, messages: Sequence[ModelMessage], counter: TokenCounter) -> None:
        start = len(self.messages)
        rest = messages[start:]
        # `check_messages` of the new messages (what `run_spans` and `safe_cut_points` check): the
        # common case in C, else the whole check, which names the index of what is not a message.
        if not (set(map(type, rest)) <= _MESSAGE_TYPES and set(map(type, map(_PARTS, rest))) <= {list}):
            check_messages(messages)
        self.born.extend(itertools.repeat(self.serial, len(rest)))
        total, count = self.totals[-1], self.observations[-1]
        for i in range(start, len(messages)):
            message = messages[i]
            total += message_tokens(counter, message)
            self.totals.append(total)
            results = _parts.tool_results(message)
            if results:
                count += 1
                if _parts.is_pinned(message) or any(_parts.is_pinned(p) for p in results):
                    self.pinned.append(i)
                if any(_parts.is_failed_result(p) for p in results):
                    self.failed.append(i)
            elif isinstance(message, ModelRequest) and _parts.is_pinned(message):
                self.pinned.append(i)
            if isinstance(message, ModelRequest) and message.instructions is not None:
                self.instructed.append(i)
                self.instruction_tokens[i] = counter.count_message(message) - message_tokens(counter, message)
            self.observations.append(count)
            if (_parts.marker(message) or {}).get('kind') == MARKER_KIND:
                self.summaries.append(i)
            if may_keep(message):
                self.own.append(i)
        self.messages = tuple(messages)

    def may_keep(self, start: int, end: int) -> list[int]:
        """The indices in `[start, end)` the summary's block may keep something of, in order."""
        return self._kept_indices(start, end, self.failed)

    def _kept_indices(self, start: int, end: int, failed: list[int]) -> list[int]:
        """`own` in `[start, end)`, and the responses before the pinned and the `failed` requests."""
        own = self.own[bisect.bisect_left(self.own, start) : bisect.bisect_left(self.own, end)]
        before = [
            j - 1
            for positions in (self.pinned, failed)
            for j in positions[
                bisect.bisect_left(positions, start + 1) : bisect.bisect_left(positions, end + 1)
            ]
        ]
        return sorted({*own, *before}) if before else own

    def count(self, start: int, end: int, counter: TokenCounter) -> int:
        """`counter.count_messages(messages[start:end])`, from the totals: the parts of each message,
        and the instructions of the newest request in the range that has them."""
        if not self.exact:
            return counter.count_messages(self.messages[start:end])
        if end <= start:
            return 0
        tokens = self.totals[end] - self.totals[start]
        at = bisect.bisect_left(self.instructed, end) - 1
        if at >= 0 and self.instructed[at] >= start:
            tokens += self.instruction_tokens[self.instructed[at]]
        return tokens

    def keys_from(self, start: int, template: tuple[str, str]) -> dict[int, str]:
        """The cache keys known of the spans from `start` under `template`, by the span's end."""
        ends = self.cache_keys.get((start, template))
        if ends is None:
            if len(self.cache_keys) >= _RUNNING_STARTS * 2:
                del self.cache_keys[next(iter(self.cache_keys))]
            ends = self.cache_keys[(start, template)] = {}
        return ends

    def missed(self, start: int, template: tuple[str, str], writes: int) -> set[int]:
        """The span ends from `start` under `template` the cache held nothing for when it had taken
        `writes` puts (empty when it has taken others since: they are looked up again)."""
        found = self.misses.get((start, template))
        if found is None or found[0] != writes:
            if found is None and len(self.misses) >= _RUNNING_STARTS * 2:
                del self.misses[next(iter(self.misses))]
            found = self.misses[(start, template)] = (writes, set())
        return found[1]

    def unchanged_since(self, serial: int) -> int:
        """How many leading messages are the ones (or equal ones) the reading `serial` (an earlier one of this
        sequence) read at their places."""
        return bisect.bisect_right(self.born, serial) if serial <= self.serial else 0

    def cut_points(self) -> list[int]:
        """`safe_cut_points` of the messages (read once per reading)."""
        if self.cuts is None:
            folds = self.folds
            self.cuts = (
                folds.read(self, 'cuts', _Cuts, _Cuts.points)
                if folds is not None
                else safe_cut_points(self.messages)
            )
        return self.cuts

    def run_spans(self) -> list[RunSpan]:
        """`views.run_spans` of the messages."""
        if self.folds is None or not self.messages:
            return run_spans(self.messages)
        return self.folds.read(self, 'runs', _Runs, _Runs.spans)

    def unresolved_failures(self) -> set[str]:
        """`_frontier.unresolved_failures` of the messages."""
        if self.folds is None:
            return unresolved_failures(self.messages)
        return self.folds.read(self, 'failures', _Failures, _Failures.unresolved)

    def unresolved_positions(self) -> list[int]:
        """The messages that hold an unresolved failure (`unresolved_failures`), in order."""
        if self.folds is None:
            fold = _Failures()
            fold.extend(self.messages)
            return fold.positions()
        return self.folds.read(self, 'failures', _Failures, _Failures.positions)

    def keeps(self, start: int, end: int) -> list[int]:
        """The indices in `[start, end)` the summary's block keeps something of, in order, or may
        (`may_keep`, narrowed to the failures still unresolved: only those keep their call)."""
        return self._kept_indices(start, end, self.unresolved_positions())

    def span_digest(self, start: int, end: int, digest: Callable[[ModelMessage], str]) -> str:
        """The hex digest of the messages' digests from `start` to `end` (the cache key's span)."""
        running = self._running(self.keys, start, start, hashlib.sha256)
        messages, digests = self.messages, self.digests

        def piece(i: int) -> bytes:
            while len(digests) <= i:
                digests.append(digest(messages[len(digests)]))
            return digests[i].encode()

        return str(running.at(end, piece).hexdigest())

    def span_ref(self, start: int, end: int, earlier: str | None) -> str:
        """`_markers.span_ref` of the span a summary of `[start, end)` stands for (`earlier` first)."""

        def seed() -> Any:
            h = hashlib.blake2b(digest_size=4)
            if earlier is not None:
                h.update(earlier.encode())
                h.update(b'\x00')
            return h

        running = self._running(self.refs, (start, earlier), start, seed)
        messages = self.messages
        state = running.at(end, lambda i: _markers.message_signature(messages[i]) + b'\x00')
        return 's' + str(state.hexdigest())

    def _running(
        self, runnings: dict[Any, Running], key: Any, start: int, seed: Callable[[], Any]
    ) -> Running:
        found = runnings.get(key)
        if found is None:
            if len(runnings) >= _RUNNING_STARTS:
                del runnings[next(iter(runnings))]
            found = runnings[key] = Running(start, seed())
        return found


class _Fold(Protocol):
    """A fold over messages that can be cut back and extended (`_scope.Fold`)."""

    @property
    def messages(self) -> Sequence[ModelMessage]: ...
    def truncate(self, n: int) -> None: ...
    def extend(self, messages: Sequence[ModelMessage]) -> None: ...


F = TypeVar('F', bound=_Fold)
R = TypeVar('R')


@dataclass(eq=False)
class Followers:
    """Folds over the policy's inputs (cut points, runs, failures) that follow its readings.

    Each fold is brought up to a reading from the one it last followed: the messages of the
    reading born before then are the ones (or equal ones) the fold read (`Reading.born`), so it is cut back
    to them and extended, with no pass over the list (the compiling scope's folds of the same
    name search their folds by comparing lists, several passes per compile). A reading older than
    the one a fold followed (a compile resumed after awaiting the summariser) gets a fold of its own.
    """

    folds: dict[str, tuple[int, Any]] = field(default_factory=dict[str, tuple[int, Any]])
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, reading: Reading, name: str, new: Callable[[], F], read: Callable[[F], R]) -> R:
        """`read(fold)` of the fold `name` brought up to `reading`."""
        with self.lock:
            found = self.folds.get(name)
            if found is not None and found[0] <= reading.serial:
                fold: F = found[1]
                same = reading.unchanged_since(found[0])
                if same < len(fold.messages):
                    fold.truncate(same)
            else:
                fold = new()
                if found is not None:  # an older reading: the fold following the newer ones stays
                    fold.extend(reading.messages)
                    return read(fold)
            fold.extend(reading.messages)
            self.folds[name] = (reading.serial, fold)
            return read(fold)


# --- the ledger: counts, digests and cache keys, from the kept reading ------------------------------


@dataclass(eq=False)
class SummaryLedger:
    """What one `summarize_window` keeps between compiles: the reading of its latest input, the
    digests of the messages it has seen, digests of spans of the canonical log, and step ends.

    Every count, digest and cache key asked of a list is answered from the reading when the
    reading is of that list (the one the policy is applied to), else computed afresh.
    """

    digests: ObjectMemo[str] = field(default_factory=ObjectMemo[str])
    """Digests of messages, by object (`message_digest`)."""
    reading: Reading | None = None
    """What the latest compile read of its input."""
    log_digests: LogDigests = field(default_factory=lambda: LogDigests())
    """Digests of spans of the canonical log (the identity of a summary made ahead)."""
    steps: dict[bool, StepEnds] = field(default_factory=lambda: dict[bool, StepEnds]())
    """Where summaries may end (`_summary_plan.candidates`), kept apart for the lists that stop
    before the current run and the ones that do not."""
    folds: Followers = field(default_factory=lambda: Followers())
    """Cut points, runs and failures of the inputs, following the readings."""
    texts: dict[tuple[Hashable, str], int] = field(default_factory=dict[tuple[Hashable, str], int])
    """Tokens of the last few texts counted (`text_tokens`)."""

    def read(self, messages: Sequence[ModelMessage], counter: TokenCounter) -> Reading:
        """What this compile reads of `messages`, resumed from the previous compile's reading."""
        reading = self.reading = Reading.of(messages, counter, self.reading, self.folds)
        return reading

    def reading_of(self, messages: Sequence[ModelMessage]) -> Reading | None:
        """The kept reading when it is of `messages`, else `None`."""
        reading = self.reading
        return reading if reading is not None and reading.reads(messages) else None

    def message_digest(self, message: ModelMessage) -> str:
        """The sha256 of the message's JSON form (kept by object)."""
        found = self.digests.get(message)
        if found is None:
            try:
                dumped = ModelMessagesTypeAdapter.dump_json([message], warnings=False)
            except PydanticSerializationError:
                # A lone surrogate (a tool that decoded bytes with `surrogateescape`) has no UTF-8 form.
                python = ModelMessagesTypeAdapter.dump_python([message], warnings=False)
                dumped = repr(python).encode('utf-8', 'surrogatepass')
            found = self.digests.put(message, hashlib.sha256(dumped).hexdigest(), size=64)
        return found

    def count(self, messages: Sequence[ModelMessage], start: int, end: int, counter: TokenCounter) -> int:
        """`count_messages(messages[start:end])`, from this compile's reading when it is of `messages`."""
        reading = self.reading_of(messages)
        if reading is not None:
            return reading.count(start, end, counter)
        return counter.count_messages(messages[start:end])

    def suffix_tokens(
        self, messages: Sequence[ModelMessage], first: int, counter: TokenCounter
    ) -> Suffix | list[int]:
        """`message_tokens` of `messages[i:]` for each `i` from `first` on."""
        reading = self.reading_of(messages)
        if reading is not None:
            return Suffix(reading.totals)
        suffix = [0] * (len(messages) + 1)
        for i in range(len(messages) - 1, first - 1, -1):
            suffix[i] = suffix[i + 1] + message_tokens(counter, messages[i])
        return suffix

    def cut_points(self, messages: Sequence[ModelMessage]) -> list[int]:
        """`safe_cut_points(messages)`, from the reading when it is of `messages`."""
        reading = self.reading_of(messages)
        return reading.cut_points() if reading is not None else safe_cut_points(messages)

    def text_tokens(self, counter: TokenCounter, text: str | None) -> int:
        """`counter.count_text(text)`, remembered for the last few texts (the summary's framing, the
        summaries the plan sizes itself by: the same texts at every compile)."""
        if not text:
            return 0
        key = (counter_key(counter), text)
        found = self.texts.get(key)
        if found is None:
            if len(self.texts) >= _TEXTS:
                del self.texts[next(iter(self.texts))]
            found = self.texts[key] = counter.count_text(text)
        return found

    def current_run(self, messages: Sequence[ModelMessage], run_id: str | None) -> RunSpan | None:
        """`views.current_run(messages, run_id=run_id)`, from the reading when it is of `messages`."""
        reading = self.reading_of(messages)
        if reading is None:
            return current_run(messages, run_id=run_id)
        spans = reading.run_spans()
        if run_id is not None:
            for span in reversed(spans):
                if span.run_id == run_id:
                    return span
        return spans[-1] if spans else None

    def keys(
        self, messages: Sequence[ModelMessage], start: int, ends: Sequence[int], template: tuple[str, str]
    ) -> dict[int, str]:
        """The cache key of the span from `start` to each of `ends`."""
        key = self.keys_from(messages, start, template)
        return {end: key(end) for end in ends}

    def keys_from(
        self, messages: Sequence[ModelMessage], start: int, template: tuple[str, str]
    ) -> Callable[[int], str]:
        """The cache key of the span from `start` to a given end (kept in the reading when it is of
        `messages`: a walk down the chain asks for the same keys at every compile)."""
        reading = self.reading_of(messages)
        if reading is not None:
            known = reading.keys_from(start, template)

            def kept(end: int) -> str:
                found = known.get(end)
                if found is None:
                    span = reading.span_digest(start, end, self.message_digest)
                    found = known[end] = cache_key(template, span)
                return found

            return kept

        def key(end: int) -> str:
            running = hashlib.sha256()
            for i in range(start, end):
                running.update(self.message_digest(messages[i]).encode())
            return cache_key(template, running.hexdigest())

        return key

    def missed(
        self, messages: Sequence[ModelMessage], start: int, template: tuple[str, str], cache: object
    ) -> set[int] | None:
        """The span ends from `start` under `template` known to have no summary in `cache` (kept in
        the reading while the messages and the cache are unchanged; add the ones found missing).
        `None` when nothing can be kept: no reading of `messages`, or a cache that does not count
        its writes (`InMemorySummaryCache.writes`)."""
        writes = getattr(cache, 'writes', None)
        reading = self.reading_of(messages)
        if reading is None or not isinstance(writes, int) or isinstance(writes, bool):
            return None
        return reading.missed(start, template, writes)

    def log_digest(self, log: Sequence[ModelMessage], start_log: int, end_log: int) -> str | None:
        """The identity of the log's messages from `start_log` to `end_log` (`None`: no log to read)."""
        if not 0 <= start_log < end_log <= len(log):
            return None
        return self.log_digests.of(log, start_log, end_log, self.message_digest)


def key_template(
    previous: str | None, model: Any, size: int | None, *, instructions: str | None, max_part_chars: int
) -> tuple[str, str]:
    """The cache key's JSON payload before and after the span's digest (keys sorted: the same
    text `json.dumps(payload, sort_keys=True)` gives)."""
    return _key_template(previous or '', model_name(model), size or 0, instructions or '', max_part_chars)


@functools.lru_cache(maxsize=64)
def _key_template(
    previous: str, model: str, size: int, instructions: str, max_part_chars: int
) -> tuple[str, str]:
    payload = {
        'version': PROMPT_VERSION,
        'model': model,
        'instructions': instructions,
        'max_part_chars': max_part_chars,
        'previous': previous,
        'span': '@',
        'size': size,
    }
    # A quote never appears unescaped inside a JSON string, so '"@"' is the span's value only.
    before, after = json.dumps(payload, sort_keys=True).split('"@"')
    return before, after


def cache_key(template: tuple[str, str], span: str) -> str:
    """The cache key of a span whose digest is `span`, from `key_template`."""
    return hashlib.sha256(f'{template[0]}"{span}"{template[1]}'.encode()).hexdigest()


# --- step ends, and digests of spans of the canonical log -----------------------------------------------------------


@dataclass(eq=False)
class StepEnds:
    """`_summary_plan.candidates` from the safe cut points, kept from one compile to the next.

    The end for step `k` is the last cut at or before the step's target: it depends only on the
    cuts up to that target. When the cuts of the next compile begin with the previous ones (new
    messages add cuts after them), the ends of the steps whose targets lie within the previous
    cuts are kept and only the later steps are placed.
    """

    params: tuple[int, int, int, int] | None = None
    cuts: list[int] = field(default_factory=list[int])
    by_step: list[int | None] = field(default_factory=list[int | None])
    """The end of each step from the first (`None`: no cut at or before its target)."""
    distinct: list[int] = field(default_factory=list[int])
    """How many distinct ends the steps up to each one give."""
    ends_list: list[int] = field(default_factory=list[int])
    """The distinct ends, in order (what `ends` returned last)."""

    def ends(self, cuts: list[int], params: tuple[int, int, int, int], zones: Zones) -> list[int]:
        start, start_log, head_log, step = params
        first = (start_log - head_log) // step + 1
        last = (zones.log_index(cuts[-1]) - head_log) // step
        kept = 0
        old = self.cuts
        if old and params == self.params and len(old) <= len(cuts) and cuts[: len(old)] == old:
            # Steps whose target (`start + head_log - start_log + k * step`) is at or before the
            # previous last cut keep their end.
            within = (old[-1] - start - head_log + start_log) // step
            kept = max(0, min(len(self.by_step), within - first + 1))
        by_step = self.by_step[:kept]
        distinct = self.distinct[:kept]
        ends = self.ends_list[: distinct[-1]] if distinct else []
        at = 0
        for k in range(first + kept, last + 1):
            target = zones.input_index(head_log + k * step)
            at = bisect.bisect_right(cuts, target, at) - 1
            end = cuts[at] if at >= 0 else None
            at = max(at, 0)
            by_step.append(end)
            if end is not None and (not ends or ends[-1] != end):
                ends.append(end)
            distinct.append(len(ends))
        self.params, self.cuts, self.by_step, self.distinct, self.ends_list = (
            params,
            cuts,
            by_step,
            distinct,
            ends,
        )
        return list(ends)


_LOG_SPANS: Final = 8
"""Log digests `LogDigests` keeps (a summary in flight, the ones made ahead, the next one planned)."""


@dataclass(eq=False)
class LogDigests:
    """Digests of spans of the canonical log, kept from one compile to the next.

    A span's digest is kept while the log's messages up to its end are the same (or equal), in the
    same generation of the compiling scope (no message edited in place since): the summary in
    flight is checked against the log at every request, and that costs no pass over the span.
    Only the log up to the furthest span end is kept and compared (the newest messages, never
    in a span, are neither copied nor compared).
    """

    log: tuple[ModelMessage, ...] = ()
    """The log up to the furthest end of `spans`, as last seen."""
    generation: int | None = None
    spans: dict[tuple[int, int], str] = field(default_factory=dict[tuple[int, int], str])

    def of(
        self, log: Sequence[ModelMessage], start: int, end: int, digest: Callable[[ModelMessage], str]
    ) -> str:
        """The digest of `log[start:end]` (`digest`: one message's)."""
        generation = active_generation()
        if generation is None or generation != self.generation:
            self.spans = {}
            self.log = ()
        same = equal_prefix_length(self.log, log)
        if same < len(self.log):
            self.spans = {span: found for span, found in self.spans.items() if span[1] <= same}
        self.generation = generation
        found = self.spans.get((start, end))
        if found is None:
            running = hashlib.sha256()
            for i in range(start, end):
                running.update(digest(log[i]).encode())
            found = running.hexdigest()
            if generation is not None:
                if len(self.spans) >= _LOG_SPANS:
                    del self.spans[next(iter(self.spans))]
                self.spans[(start, end)] = found
        furthest = max((span[1] for span in self.spans), default=0)
        if same < len(self.log) or furthest != len(self.log):
            self.log = tuple(log[:furthest])
        return found
