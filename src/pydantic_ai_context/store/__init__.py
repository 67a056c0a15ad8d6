"""Where conversations, session logs, summaries and other artifacts live between runs.

Two families share this package:

- pydantic-ai's `ConversationStore` (pydantic-ai 2.66+): `SqliteConversationStore` (one process,
  the default), `PostgresConversationStore` (several workers or machines) and
  `MemoryConversationStore`; `open_store(url)` picks one from a URL.
- This package's older `SessionStore` (every pydantic-ai, 1.x included): `MemoryStore` and
  `SqliteStore`.

Every store is also an `ArtifactStore`: named texts (summaries, read-back originals) kept in the
same database. On a pydantic-ai without `ConversationStore`, importing the conversation stores
raises `ImportError` naming the version they need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import StoreEntryMissing, StoreError
from ._compat import CONVERSATION_STORE_NAMES, HAS_CONVERSATION_STORE, require_conversation_store
from ._sqlite_file import MIGRATIONS, SCHEMA_VERSION, Migration
from .artifacts import Artifact, ArtifactStore
from .memory import MemoryStore
from .sessions import SessionInfo, SessionStore, SummaryRecord
from .sqlite import SqliteStore
from .urls import DEFAULT_STORE_URL, open_store

if TYPE_CHECKING or HAS_CONVERSATION_STORE:
    from .conversations_memory import MemoryConversationStore as MemoryConversationStore
    from .conversations_postgres import POSTGRES_MIGRATIONS as POSTGRES_MIGRATIONS
    from .conversations_postgres import PostgresConversationStore as PostgresConversationStore
    from .conversations_sqlite import SqliteConversationStore as SqliteConversationStore

__all__ = [
    'DEFAULT_STORE_URL',
    'MIGRATIONS',
    'SCHEMA_VERSION',
    'Artifact',
    'ArtifactStore',
    'MemoryStore',
    'Migration',
    'SessionInfo',
    'SessionStore',
    'SqliteStore',
    'StoreEntryMissing',
    'StoreError',
    'SummaryRecord',
    'open_store',
]
if HAS_CONVERSATION_STORE:
    __all__ += CONVERSATION_STORE_NAMES


def __getattr__(name: str) -> Any:
    if name in CONVERSATION_STORE_NAMES:
        require_conversation_store(name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
