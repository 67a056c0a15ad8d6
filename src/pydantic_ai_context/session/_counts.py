"""The token counts of a session's long texts, kept in its store so a resumed session need not encode them.

A resumed session's first compile reads the whole log: counting its tool outputs and long notes
with tiktoken was the largest part of that compile (about half of it on a log of tool outputs).
The counts are kept as one artifact per session (namespace `'session-token-counts'`, owned by the
session, so it is deleted with it), filed under the counter's name: the tiktoken backend and the
encoding it loaded. Only counts of texts from `TEXT_MEMO_CHARS` on are kept: shorter ones cost
little to encode, and are never looked up by digest.

Like the summary index this is a cache: a row that does not parse or whose checksum does not
match is logged and ignored (the texts are counted again), and the next save rewrites it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import itertools
import json
import logging
import struct
import weakref
from collections.abc import Sequence
from typing import Any, Final

from pydantic_ai.messages import ModelMessage

from .._offload import OFFLOAD_CHARS
from .._parts import part_text
from ..store import ArtifactStore
from ..tokens import TEXT_MEMO_CHARS, TEXT_MEMO_ENTRIES, _MessageCounter, text_key

__all__ = ('TOKEN_COUNTS_NAMESPACE', 'TokenCountIndex')

logger = logging.getLogger('pydantic_ai_context.session')

TOKEN_COUNTS_NAMESPACE: Final = 'session-token-counts'
"""The artifact namespace of each session's counts: key = session id."""
_VERSION: Final = 1
_RECORD: Final = struct.Struct('<16sI')
"""One count: the text's digest (`text_key`) and its tokens."""
_MIN_BATCH: Final = 32
"""Counts that make a save worth writing (and a quarter of those already written): the row is
rewritten whole, so writes come in batches and their cost stays proportional to what is new."""


class TokenCountIndex:
    """Loads a session's stored counts into the counters its compiles use, and saves new ones.

    `ContextSession` calls `load` on open, `feed` before each compile with the counter it will use,
    and `save` after each compile and on close.
    """

    def __init__(self, store: object, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self._stored: dict[str, dict[bytes, int]] = {}
        """Per counter name: the counts last read or written."""
        self._fed: weakref.WeakSet[_MessageCounter] = weakref.WeakSet()
        self._used: weakref.WeakSet[_MessageCounter] = weakref.WeakSet()
        self._keys: dict[bytes, None] = {}
        """The digests of the log's long texts read so far, in order."""
        self._pending: dict[str, dict[bytes, None]] = {}
        """Per counter name: the digests of `_keys` whose counts are not kept yet (looked up at
        each save, so a save looks up what is new, not the whole log)."""
        self._scanned = 0
        self._last: ModelMessage | None = None
        self._unsaved = 0
        self._repair = False
        self._saving = asyncio.Lock()

    @property
    def persistent(self) -> bool:
        return isinstance(self.store, ArtifactStore)

    async def load(self) -> None:
        if not isinstance(self.store, ArtifactStore):
            return
        artifact = await self.store.get_artifact(TOKEN_COUNTS_NAMESPACE, self.session_id)
        if artifact is not None:
            self._stored = self._parse(artifact.value)

    def feed(self, counter: Any) -> int:
        """Give `counter` the stored counts filed under its name (once); returns how many were new to it."""
        if not isinstance(counter, _MessageCounter) or (name := counter._stored_counts_name()) is None:
            return 0
        self._used.add(counter)
        if counter in self._fed:
            return 0
        self._fed.add(counter)
        counts = self._stored.get(name)
        return counter._remember_text_counts(counts) if counts else 0

    async def save(self, log: Sequence[ModelMessage], *, final: bool = False) -> bool:
        """Keep the counts the used counters know for `log`'s long texts; returns whether it wrote.

        Writes when enough counts are new (or on `final`, when any is), so a long session rewrites
        its row a number of times logarithmic in its length. Hashing the texts is work in
        proportion to the new ones: from `OFFLOAD_CHARS` on (a resumed log's first save) it runs
        in a worker thread, off the event loop.
        """
        if not isinstance(self.store, ArtifactStore) or not self._used:
            return False
        async with self._saving:
            texts = self._new_texts(log)
            counters = list(self._used)
            if sum(map(len, texts)) >= OFFLOAD_CHARS:
                row = await asyncio.to_thread(self._collect, texts, counters, final)
            else:
                row = self._collect(texts, counters, final)
            if row is None:
                return False
            await self.store.put_artifacts(
                TOKEN_COUNTS_NAMESPACE,
                {self.session_id: row},
                meta={'kind': 'session-token-counts', 'session_id': self.session_id},
                conversation_id=self.session_id,
            )
            self._unsaved = 0
            self._repair = False
            return True

    def _new_texts(self, log: Sequence[ModelMessage]) -> list[str]:
        """The long texts of `log`'s messages not read yet (all of them, if the log is not the one
        read before plus new messages)."""
        n = self._scanned
        if n > len(log) or (n and log[n - 1] is not self._last):
            self._keys = {}
            self._pending = {}
            n = 0
        texts = [
            text
            for message in log[n:]
            for part in message.parts
            if len(text := part_text(part)) >= TEXT_MEMO_CHARS
        ]
        self._scanned = len(log)
        self._last = log[-1] if log else None
        return texts

    def _collect(self, texts: list[str], counters: list[_MessageCounter], final: bool) -> str | None:
        """Read `texts`' digests and the counts the counters know for them; the row to write, or
        `None` when too few are new to be worth a write."""
        keys = self._keys
        new = [text_key(text) for text in texts]
        keys.update(dict.fromkeys(new))
        _keep_newest(keys)
        for counter in counters:
            name = counter._stored_counts_name()
            if name is None:
                continue
            stored = self._stored.setdefault(name, {})
            pending = self._pending.get(name)
            if pending is None:  # a counter first used now: every digest read so far
                pending = self._pending[name] = {key: None for key in keys if key not in stored}
            else:
                pending.update((key, None) for key in new if key not in stored)
            _keep_newest(pending)
            if pending:
                # A digest not counted yet (a message no compile has read) stays pending.
                found = counter._known_text_counts(pending)
                for key in found:
                    del pending[key]
                stored.update(found)
                self._unsaved += len(found)
            # A counter remembers no more: the newest texts are those a resumed view shows.
            _keep_newest(stored)
        written = sum(len(counts) for counts in self._stored.values())
        due = self._unsaved and (final or self._unsaved >= max(_MIN_BATCH, (written - self._unsaved) // 4))
        return _render(self._stored) if self._repair or due else None

    def _parse(self, text: str) -> dict[str, dict[bytes, int]]:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as e:
            return self._corrupt(f'it is not JSON ({e})')
        if not isinstance(value, dict) or value.get('version') != _VERSION:
            return self._corrupt(f'it is not version {_VERSION} of the format')
        counts = value.get('counts')
        if not isinstance(counts, dict) or not all(isinstance(v, str) for v in counts.values()):
            return self._corrupt('its counts are not a mapping of counter names to text')
        if value.get('check') != _checksum(counts):
            return self._corrupt('its checksum does not match')
        out: dict[str, dict[bytes, int]] = {}
        for name, encoded in counts.items():
            try:
                raw = base64.b64decode(encoded, validate=True)
            except binascii.Error as e:
                return self._corrupt(f'the counts of {name!r} are not base64 ({e})')
            if len(raw) % _RECORD.size:
                return self._corrupt(f'the counts of {name!r} are not whole records')
            out[name] = dict(_RECORD.iter_unpack(raw))
        return out

    def _corrupt(self, problem: str) -> dict[str, dict[bytes, int]]:
        self._repair = True
        logger.warning(
            'session %r: the stored token counts (artifact %r/%r) are corrupt: %s; ignoring them '
            '(the texts are counted again), and the next save rewrites them',
            self.session_id,
            TOKEN_COUNTS_NAMESPACE,
            self.session_id,
            problem,
        )
        return {}


def _keep_newest(table: dict[bytes, Any]) -> None:
    """Forget the oldest entries of `table` beyond `TEXT_MEMO_ENTRIES`."""
    for key in list(itertools.islice(table, max(0, len(table) - TEXT_MEMO_ENTRIES))):
        del table[key]


def _render(stored: dict[str, dict[bytes, int]]) -> str:
    counts = {
        name: base64.b64encode(b''.join(_RECORD.pack(key, tokens) for key, tokens in found.items())).decode(
            'ascii'
        )
        for name, found in stored.items()
    }
    return json.dumps({'version': _VERSION, 'counts': counts, 'check': _checksum(counts)})


def _checksum(counts: dict[str, Any]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(counts):
        digest.update(
            name.encode('utf-8', 'surrogatepass')
            + b'\0'
            + str(counts[name]).encode('ascii', 'replace')
            + b'\0'
        )
    return digest.hexdigest()
