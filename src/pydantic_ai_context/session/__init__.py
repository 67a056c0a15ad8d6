"""`ContextSession`: one conversation's canonical log, kept in a store, and the view compiled from it.

The session is the small context-manager contract frameworks expect (add messages, get the
messages for the next request, read the whole log, replace it, clear it) on top of this package's
profiles and stores: a `SessionStore`, or any pydantic-ai `ConversationStore` (2.66+). The stored
log only ever grows by what was added: compaction happens in the view that `messages_for_request`
compiles and is never written back.

The package's rooms: `context` (`ContextSession`), `summaries` (the store-backed summary cache
and a session's summary index), `readback` (the read-back side store in the session's own
database) and `_log` (the stored log, on a `SessionStore` or a `ConversationStore`). `context`
imports the other three; they import none of the others.
"""

from __future__ import annotations

from .context import ContextSession, MessageInput
from .summaries import StoreSummaryCache, SummaryIndex, summary_index_key

__all__ = ('ContextSession', 'MessageInput', 'StoreSummaryCache', 'SummaryIndex', 'summary_index_key')
