"""The side store of originals: what `read_context` reads where the log the tools see cannot give it.

`ContextArchive` is a profile's: policies hand it what their markers replace (through
`CompileContext.originals`), keyed by ref, and the read-back tools ask it. Spans are always kept
(a span's messages, or the refs of earlier spans it folds in); tool results only where the view
replaces the run's history (pydantic-ai 1.x `history_processors`, `process_history()`, a compiled
view sent as the history): on pydantic-ai 2.x the capability's log stays whole.

The store underneath is anything with `get(key)` and `put(key, value)` of text
(`ReadbackStore`): in memory by default (`MemoryReadbackStore`), a session's or a key-value
service's for a process that must read back what an earlier one compacted.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import itertools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse

from .. import _native_tools, _parts
from .._markers import conversation_identity, conversation_key, is_readback, span_ref
from .._memo import ObjectMemo
from .._prefix import begins_with
from .._scope import active_generation, resumed_fold

__all__ = ('ContextArchive', 'MemoryReadbackStore', 'ReadbackStore')

_encode_string = json.encoder.encode_basestring
_ESCAPE_PIECE = 1 << 20


def _json_of(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False)` of plain JSON data, its long strings escaped in pieces
    (`_encoded_text`): a message holding a 30 MB tool output is one call of about 100 ms otherwise."""
    if isinstance(value, str):
        return _encoded_text(value)
    if isinstance(value, dict):
        return '{' + ', '.join(f'{_encode_string(str(k))}: {_json_of(v)}' for k, v in value.items()) + '}'
    if isinstance(value, list):
        return '[' + ', '.join(_json_of(v) for v in value) + ']'
    return json.dumps(value, ensure_ascii=False)


def _encoded_text(text: str) -> str:
    """`_encode_string(text)`, escaped a megabyte of characters at a time (escaping is per character,
    so the pieces join into the same string)."""
    if len(text) <= _ESCAPE_PIECE:
        return _encode_string(text)
    pieces = (_encode_string(text[i : i + _ESCAPE_PIECE])[1:-1] for i in range(0, len(text), _ESCAPE_PIECE))
    return '"' + ''.join(pieces) + '"'


logger = logging.getLogger('pydantic_ai_context.archive')

_RESULT_KEY: Final = 'pydantic_ai_context/readback/result/'
_SPAN_KEY: Final = 'pydantic_ai_context/readback/span/'
_LINEAGES_PER_KEY: Final = 64
"""Conversations without an id that open alike, told apart per opening (the oldest forgotten first)."""
_STATES_PER_LINEAGE: Final = 4
"""The latest logs and views of one such conversation that a later log or view must continue."""
DEFAULT_MAX_CONVERSATIONS: Final = 2_048
"""How many openings of conversations without an id an archive tells apart by default (see
`ContextArchive.max_conversations`)."""


@runtime_checkable
class ReadbackStore(Protocol):
    """The side store: text by key. Values are JSON written by `ContextArchive`.

    Two methods, so a persistent store (a session's, a key-value service's) plugs in as is. Their
    errors are logged and treated as a miss: a failing store never breaks a run.

    Example:
        ```python
        from pydantic_ai_context import profile


        class DictStore:
            def __init__(self) -> None:
                self.data: dict[str, str] = {}

            def get(self, key: str) -> str | None:
                return self.data.get(key)

            def put(self, key: str, value: str) -> None:
                self.data[key] = value


        p = profile('coding', readback_store=DictStore())
        ```
    """

    def get(self, key: str) -> str | None:
        """The value stored under `key`, or None."""
        ...

    def put(self, key: str, value: str) -> None:
        """Store `value` under `key` (a later put of the same key may replace it)."""
        ...


class MemoryReadbackStore:
    """The default side store: a dict in memory, oldest entries evicted past `max_chars`.

    Example:
        ```python
        from pydantic_ai_context.archive import MemoryReadbackStore

        store = MemoryReadbackStore(max_chars=10)
        store.put('a', '12345'); store.put('b', '67890'); store.put('c', 'x')
        assert store.get('a') is None and store.get('b') == '67890' and len(store) == 2
        ```
    """

    def __init__(self, *, max_chars: int = 64_000_000) -> None:
        if max_chars < 1:
            raise ValueError(f'max_chars must be >= 1, got {max_chars}')
        self.max_chars = max_chars
        self._entries: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._chars = 0

    def get(self, key: str) -> str | None:
        return self._entries.get(key)

    def put(self, key: str, value: str) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._chars -= len(old)
        self._entries[key] = value
        self._chars += len(value)
        while self._chars > self.max_chars and len(self._entries) > 1:
            _, dropped = self._entries.popitem(last=False)
            self._chars -= len(dropped)

    def __len__(self) -> int:
        return len(self._entries)


_LATEST_SPANS: Final = 8
"""How many conversations' latest span `ContextArchive` holds (their messages with it) to extend."""
_LATEST_CHARS: Final = 64 * 1024 * 1024
"""The most characters of JSON those spans hold in all."""
_CHAIN_CHARS: Final = 1 << 20
"""A span that begins with the conversation's latest span, when that one's document holds at least
this many characters, names it by ref (`{"ref": ...}` as its first item) instead of repeating it:
each summary of a growing log stands for all of it, and a long log's span document is tens of
megabytes, copied and stored again for every summary."""


@dataclass(frozen=True)
class _Kept:
    """A span kept: its items, whether its tool results were kept with it, its JSON document, and
    the compile generation it was kept in."""

    items: tuple[ModelMessage | str, ...]
    results: bool
    document: str
    generation: int | None
    ref: str
    chainable: bool
    """Kept under a ref of its own (not `replace`d later), so a later span may name it."""


@dataclass(frozen=True)
class _Sink:
    """What one compile hands its policies: spans always, tool results unless the log is whole."""

    archive: ContextArchive
    results: bool
    conversation: str

    def keep_result(self, ref: str, part: Any) -> None:
        if self.results:
            self.archive.keep_result(ref, part, conversation=self.conversation)

    def keep_span(self, ref: str, items: Sequence[ModelMessage | str], *, replace: bool = False) -> None:
        self.archive.keep_span(
            ref, items, results=self.results, conversation=self.conversation, replace=replace
        )


@dataclass
class _Lineage:
    """One conversation without an id: the latest logs and views compiled for it, as fingerprints."""

    id: int
    states: collections.deque[tuple[bytes, ...]]
    key: str = ''
    """The opening it was first compiled under: its originals are kept under `key~id`."""

    def continues(self, fingerprints: tuple[bytes, ...]) -> bool:
        """`fingerprints` and one of the states are one the start of the other (the same conversation)."""
        for state in self.states:
            n = min(len(state), len(fingerprints))
            if state[:n] == fingerprints[:n]:
                return True
        return False

    def add(self, fingerprints: tuple[bytes, ...]) -> None:
        if fingerprints not in self.states:
            self.states.append(fingerprints)


class _Fingerprints:
    """`ContextArchive._fingerprints_of` as a fold (see `_scope.resumed_fold`)."""

    def __init__(self, archive: ContextArchive) -> None:
        self.archive = archive
        self.messages: list[ModelMessage] = []
        self.fingerprints: list[bytes] = []

    def found(self) -> tuple[bytes, ...]:
        # The requests after the last response are those pydantic-ai may still fill in (a view's
        # newest request is, before it is sent): fingerprinted again, through the memo's stamp check.
        messages, fingerprints = self.messages, self.fingerprints
        i = len(messages)
        while i and not isinstance(messages[i - 1], ModelResponse):
            i -= 1
        for j in range(i, len(messages)):
            fingerprints[j] = self.archive._fingerprint(messages[j])
        return tuple(fingerprints)

    def truncate(self, n: int) -> None:
        del self.messages[n:], self.fingerprints[n:]

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        rest = messages[len(self.messages) :]
        self.fingerprints.extend(map(self.archive._fingerprint, rest))
        self.messages.extend(rest)


class ContextArchive:
    """A profile's side store of originals, by conversation and ref: what `read_context` reads where the log cannot.

    Every entry belongs to one conversation; reading asks for the conversation of the log at hand
    (`conversation_of`), so a profile serving several conversations keeps them apart. A conversation
    is named, first that applies: by the `conversation` this archive is pinned to (a
    `ContextSession`'s id) or a compile is given; by the id pydantic-ai gives the request that opens
    the log (its conversation id, else its run id) or the run in progress; else, for a log that
    carries no id (converted from another format), by its lineage: the logs and views compiled
    before that it continues. A log that continues no lineage, or several, reads no originals. A
    view that opens at a later run than its log (after a provider's compaction) names its log's
    conversation too: its readers, and a log continuing it, read the same originals.

    The lineages (and those later openings) are per-conversation state, so they are bounded:
    `max_conversations` openings (default 2,048, settable), the least recently compiled forgotten
    first. A conversation forgotten that way is a new one the next time it is compiled (the
    originals kept for it stay in the store, but its readers no longer reach them); within the cap,
    nothing changes. The entries themselves are bounded by the store
    (`MemoryReadbackStore(max_chars=...)`).

    Example:
        ```python
        from pydantic_ai.messages import ToolReturnPart

        from pydantic_ai_context.archive import ContextArchive

        archive = ContextArchive()
        archive.keep_result('c1', ToolReturnPart('read_file', 'line 1\\nline 2', tool_call_id='c1'))
        assert archive.result('c1') == ('read_file', 'line 1\\nline 2')
        assert archive.result('c2') is None
        ```
    """

    def __init__(
        self,
        store: ReadbackStore | None = None,
        *,
        conversation: str | None = None,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
    ) -> None:
        if max_conversations < 1:
            raise ValueError(f'max_conversations must be at least 1, got {max_conversations}')
        self.store: ReadbackStore = store if store is not None else MemoryReadbackStore()
        self.conversation = conversation
        """The one conversation every entry belongs to (a `ContextSession`'s id), or `None`: per log."""
        self.max_conversations = max_conversations
        """How many openings of conversations without an id are told apart (least recently compiled forgotten first)."""
        self._lineages: collections.OrderedDict[str, list[_Lineage]] = collections.OrderedDict()
        # A view may open at a later run than its log (a provider's compaction is a boundary: the
        # view starts there): the id that view carries names its log's conversation, so that its
        # readers, and a log continuing it (1.x), reach the same originals. Bounded like the lineages.
        self._aliases: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._lineage_ids = itertools.count(1)
        # About 428 bytes are counted a message: 8 MB held 19,600, so the first read of a longer log
        # evicted what the worker thread had measured before the loop read it, message by message.
        self._fingerprints: ObjectMemo[bytes] = ObjectMemo(max_bytes=48 * 1024 * 1024)
        self._written: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._spans: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()
        # Each message's JSON, while it lives unchanged: a span that moves with the view (a summary
        # over a growing middle) holds mostly the messages its previous version held.
        self._encoded: ObjectMemo[str] = ObjectMemo(max_bytes=64 * 1024 * 1024)
        # The latest span kept per conversation, as its items and their JSON (the last few
        # conversations): a summary's span over a growing log is the previous one plus the newest
        # messages, and encoding all of it again cost about 50 ms at 5,000 messages per summary.
        self._latest: collections.OrderedDict[str, _Kept] = collections.OrderedDict()

    def sink(
        self,
        messages: Sequence[ModelMessage],
        *,
        results: bool,
        run_context: Any = None,
        conversation: str | None = None,
    ) -> _Sink:
        """The sink for one compile of `messages`; `results=False` when the log the tools read is whole.

        `conversation` names the conversation explicitly; `run_context` is the run compiling it."""
        key = self._conversation(messages, run_context, conversation, compiling=True)
        assert key is not None
        return _Sink(self, results, key)

    def conversation_of(
        self, messages: Sequence[ModelMessage], *, run_context: Any = None, conversation: str | None = None
    ) -> str | None:
        """The conversation whose originals a reader of `messages` may read, or `None` when it cannot
        be told apart from others that open alike (it continues no log or view compiled for that
        opening, or several): such a reader reads no originals."""
        return self._conversation(messages, run_context, conversation, compiling=False)

    def compiled(self, sink: Any, view: Sequence[ModelMessage]) -> None:
        """Record the view a compile with `sink` produced: a later log that continues it (the view
        replaces the history on pydantic-ai 1.x, a caller may pass it on) is the same conversation."""
        if not isinstance(sink, _Sink) or sink.archive is not self:
            return
        identity = conversation_identity(view)
        if identity is not None and identity != sink.conversation:
            self._aliases[identity] = sink.conversation
            self._aliases.move_to_end(identity)
            self._bound(self._aliases)
        key, _, number = sink.conversation.partition('~')
        for lineage in self._lineages.get(key, ()):
            if str(lineage.id) == number:
                lineage.add(self._fingerprints_of(view))
                # A view can open otherwise than its log (a summary or a repair in the opening):
                # a reader of the view, or a log that continues it, finds the lineage by its own
                # opening too, and reads the originals kept under the lineage's.
                opening = conversation_key(view)
                if opening != key:
                    others = self._lineages.setdefault(opening, [])
                    if not any(other is lineage for other in others):
                        others.append(lineage)
                        del others[:-_LINEAGES_PER_KEY]
                    self._bound(self._lineages)

    def _conversation(
        self, messages: Sequence[ModelMessage], run_context: Any, explicit: str | None, *, compiling: bool
    ) -> str | None:
        named = explicit if explicit is not None else self.conversation
        if named is not None:
            return 'k' + hashlib.blake2b(named.encode('utf-8', 'surrogatepass'), digest_size=8).hexdigest()
        identity = conversation_identity(messages, run_context)
        if identity is not None:
            return self._aliases.get(identity, identity)
        # No id: the opening names candidates, the lineage says which of them this log continues.
        key = conversation_key(messages)
        fingerprints = self._fingerprints_of(messages)
        lineages = self._lineages.get(key)
        if lineages is None:
            if not compiling:
                return None
            lineages = self._lineages[key] = []
            self._bound(self._lineages)
        elif compiling:
            self._lineages.move_to_end(key)
        matches = [lineage for lineage in lineages if lineage.continues(fingerprints)]
        if len(matches) == 1:
            found = matches[0]
        elif not compiling:
            return None
        else:
            found = _Lineage(next(self._lineage_ids), collections.deque(maxlen=_STATES_PER_LINEAGE), key)
            lineages.append(found)
            while len(lineages) > _LINEAGES_PER_KEY:
                lineages.pop(0)
        if compiling:
            found.add(fingerprints)
        return f'{found.key or key}~{found.id}'

    def _bound(self, table: collections.OrderedDict[str, Any]) -> None:
        """Forget the least recently used entries of a per-conversation table beyond `max_conversations`."""
        while len(table) > max(1, self.max_conversations):
            table.popitem(last=False)

    def _fingerprints_of(self, messages: Sequence[ModelMessage]) -> tuple[bytes, ...]:
        # During a compile the fold of the previous log (or view) is resumed from its first changed
        # message: a log is the previous one plus a few messages, so only those are fingerprinted.
        return resumed_fold(
            ('archive.fingerprints', id(self)), messages, lambda: _Fingerprints(self), _Fingerprints.found
        )

    def _fingerprint(self, message: ModelMessage) -> bytes:
        found = self._fingerprints.get(message)
        if found is None:
            digest = hashlib.blake2b(digest_size=12)
            try:
                # pydantic-core's own JSON (a third of the time of the store's `_message_json`, which
                # escapes a long text in pieces); not kept: about as much text again as the log.
                # Fingerprints are only compared with each other, in this process.
                digest.update(ModelMessagesTypeAdapter.dump_json([message]))
            except Exception:  # what JSON cannot hold (arguments nested too deep): its parts' text
                digest.update(span_ref([message]).encode())
                for part in message.parts:
                    with contextlib.suppress(Exception):
                        digest.update(_parts.part_text(part).encode('utf-8', 'surrogatepass'))
                    digest.update(b'\x00')
            found = self._fingerprints.put(message, digest.digest(), size=12)
        return found

    def keep_result(self, ref: str, part: Any, *, conversation: str = '') -> None:
        """Keep the original of tool result `part` under `ref` (once per ref and conversation)."""
        key = f'{_RESULT_KEY}{conversation}/{ref}'
        if key in self._written or is_readback(part):
            return
        tool = getattr(part, 'tool_name', None) or ''
        text = _native_tools.result_text(part)
        # `json.dumps({'tool': tool, 'text': text}, ensure_ascii=False)`, the text escaped in pieces:
        # one call over a 30 MB output holds the GIL for about 100 ms (compiles run it in a worker
        # thread, but the event loop waits for the GIL all the same).
        self._put(key, f'{{"tool": {_encode_string(tool)}, "text": {_encoded_text(text)}}}')

    def keep_span(
        self,
        ref: str,
        items: Sequence[ModelMessage | str],
        *,
        results: bool = True,
        conversation: str = '',
        replace: bool = False,
    ) -> None:
        """Keep the messages span `ref` stands for (once per ref, unless `replace`: a span that grows
        under a stable ref, such as the list of steps `fit_to_budget` dropped); a `str` item is an
        earlier span's ref.

        With `results`, the span's own (not yet shortened) tool results are kept by `tool_call_id`
        too: dropping the span takes them out of the history.
        """
        self._spans[(conversation, ref)] = None
        self._spans.move_to_end((conversation, ref))
        while len(self._spans) > 10_000:
            self._spans.popitem(last=False)
        key = f'{_SPAN_KEY}{conversation}/{ref}'
        if key in self._written and not replace:
            return
        # Extended only within one compile generation: the messages are then as they were (none
        # was edited in place since), so their JSON is too.
        generation = active_generation()
        latest = self._latest.get(conversation)
        start = 0
        if (
            latest is not None
            and generation is not None
            and latest.generation == generation
            and latest.results == results
            and len(latest.items) <= len(items)
            and begins_with(items, latest.items)
        ):
            start = len(latest.items)  # those and their tool results are kept already
        encoded: list[str] = []
        for item in items[start:] if start else items:
            if isinstance(item, str):
                # `json.dumps({'ref': item}, ensure_ascii=False)`, without building a dict and an
                # encoder per item (a drop note's span lists every step it dropped).
                encoded.append(f'{{"ref": {_encode_string(item)}}}')
                continue
            encoded.append(self._message_json(item))
            if results:
                for part in _parts.tool_results(item):
                    if _parts.marker(part) is None and not is_readback(part):
                        self.keep_result(part.tool_call_id, part, conversation=conversation)
        # The same document as `json.dumps({'items': [...]})`, from each message's remembered JSON.
        if (
            start
            and latest is not None
            and latest.chainable
            and not replace
            and latest.ref != ref
            and len(latest.document) >= _CHAIN_CHARS
            and f'{_SPAN_KEY}{conversation}/{latest.ref}' in self._written
        ):
            # Its items are the latest span's, named by ref, then the new ones (the read-back
            # tools and replay expand a span named in a span).
            encoded.insert(0, f'{{"ref": {_encode_string(latest.ref)}}}')
            start = 0
        body = ', '.join(encoded)
        if not start:
            document = '{"items": [' + body + ']}'
        elif body:
            document = f'{latest.document[:-2]}, {body}]}}'  # type: ignore[union-attr]
        else:
            document = latest.document  # type: ignore[union-attr]
        self._put(key, document)
        self._latest.pop(conversation, None)
        if len(document) <= _LATEST_CHARS:  # the same string the memory store holds
            self._latest[conversation] = _Kept(tuple(items), results, document, generation, ref, not replace)
            held = sum(len(kept.document) for kept in self._latest.values())
            while len(self._latest) > _LATEST_SPANS or held > _LATEST_CHARS:
                held -= len(self._latest.popitem(last=False)[1].document)

    def _message_json(self, message: ModelMessage, *, remember: bool = True) -> str:
        found = self._encoded.get(message)
        if found is None:
            item = ModelMessagesTypeAdapter.dump_python([message], mode='json')[0]
            large = sum(len(_parts.part_text(part)) for part in message.parts) > _ESCAPE_PIECE
            found = _json_of(item) if large else json.dumps(item, ensure_ascii=False)
            if remember:
                self._encoded.put(message, found, size=len(found))
        return found

    def result(self, ref: str, *, conversation: str | None = '') -> tuple[str, str] | None:
        """(tool name, original text) of the tool result `ref` of `conversation`, or None."""
        if conversation is None:
            return None
        value = self._get(f'{_RESULT_KEY}{conversation}/{ref}')
        if value is None:
            return None
        return str(value.get('tool', '')), str(value.get('text', ''))

    def span(self, ref: str, *, conversation: str | None = '') -> list[ModelMessage | str] | None:
        """The items of span `ref` of `conversation` (messages, and refs of earlier spans), or None."""
        if conversation is None:
            return None
        value = self._get(f'{_SPAN_KEY}{conversation}/{ref}')
        if value is None:
            return None
        out: list[ModelMessage | str] = []
        for item in value.get('items', []):
            if isinstance(item, dict) and set(item) == {'ref'}:
                out.append(str(item['ref']))
            else:
                out.extend(ModelMessagesTypeAdapter.validate_python([item]))
        return out

    def span_refs(self, conversation: str | None = '') -> list[str]:
        """Refs of the spans of `conversation` kept by this process, oldest first (for `search_context`)."""
        if conversation is None:
            return []
        return [ref for conv, ref in self._spans if conv == conversation]

    def _put(self, key: str, value: str) -> None:
        try:
            self.store.put(key, value)
        except Exception:  # a user's store: logged, never breaks the compile
            logger.warning('read-back store failed to keep %s', key, exc_info=True)
            return
        self._written[key] = None
        while len(self._written) > 100_000:
            self._written.popitem(last=False)

    def _get(self, key: str) -> dict[str, Any] | None:
        try:
            raw = self.store.get(key)
        except Exception:
            logger.warning('read-back store failed to read %s', key, exc_info=True)
            return None
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            logger.warning('read-back store holds invalid JSON under %s', key)
            return None
        return value if isinstance(value, dict) else None
