"""The SQL of `PostgresConversationStore`: its schema versions and the query that collects unreachable entries."""

from __future__ import annotations

from typing import Final

SCHEMA_V1 = """
CREATE TABLE pydantic_ai_conversations (
    conversation_id text PRIMARY KEY,
    revision text NOT NULL,
    head_id text,
    scope text,
    updated_at timestamptz NOT NULL,
    record text NOT NULL
);
CREATE INDEX pydantic_ai_conversations_by_time ON pydantic_ai_conversations (updated_at DESC);
CREATE INDEX pydantic_ai_conversations_by_scope ON pydantic_ai_conversations (scope, updated_at DESC);
CREATE TABLE pydantic_ai_conversation_entries (
    entry_id text PRIMARY KEY,
    parent_id text,
    conversation_id text NOT NULL,
    kind text NOT NULL,
    message text NOT NULL
);
CREATE INDEX pydantic_ai_conversation_entries_by_parent ON pydantic_ai_conversation_entries (parent_id);
CREATE INDEX pydantic_ai_conversation_entries_by_owner ON pydantic_ai_conversation_entries (conversation_id);
CREATE TABLE pydantic_ai_conversation_tips (
    conversation_id text NOT NULL,
    entry_id text NOT NULL,
    PRIMARY KEY (conversation_id, entry_id)
);
CREATE INDEX pydantic_ai_conversation_tips_by_entry ON pydantic_ai_conversation_tips (entry_id);
CREATE TABLE pydantic_ai_artifacts (
    namespace text NOT NULL,
    key text NOT NULL,
    value bytea NOT NULL,
    meta text,
    conversation_id text,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX pydantic_ai_artifacts_by_owner ON pydantic_ai_artifacts (conversation_id);
"""

POSTGRES_MIGRATIONS: Final[tuple[str, ...]] = (SCHEMA_V1,)
"""SQL scripts: `POSTGRES_MIGRATIONS[n]` upgrades the tables from schema version `n` to `n + 1`.

The version is kept in the table `pydantic_ai_context_schema`; all pending scripts run in one
transaction under an advisory lock, so workers starting together migrate once.
"""

# Advisory lock keys (any fixed bigints): one serialises migrations; the other lets writers share
# and a delete exclude them while it decides which entries no conversation reaches any more.
MIGRATION_LOCK: Final = 0x7061_6963_0001
ENTRIES_LOCK: Final = 0x7061_6963_0002

ENTRY_COLUMNS = 'entry_id, parent_id, conversation_id, kind, message'

COLLECT_ENTRIES = """
WITH RECURSIVE
  history(entry_id, parent_id) AS (
    SELECT e.entry_id, e.parent_id FROM pydantic_ai_conversation_entries e
      JOIN pydantic_ai_conversation_tips t ON t.entry_id = e.entry_id WHERE t.conversation_id = %(c)s
    UNION
    SELECT e.entry_id, e.parent_id FROM pydantic_ai_conversation_entries e
      JOIN history h ON e.entry_id = h.parent_id
  ),
  candidates(entry_id) AS (
    SELECT entry_id FROM pydantic_ai_conversation_entries WHERE conversation_id = %(c)s
    UNION
    SELECT entry_id FROM history
  ),
  descendants(entry_id) AS (
    SELECT entry_id FROM candidates
    UNION
    SELECT e.entry_id FROM pydantic_ai_conversation_entries e JOIN descendants d ON e.parent_id = d.entry_id
  ),
  needed(entry_id, parent_id) AS (
    SELECT e.entry_id, e.parent_id FROM pydantic_ai_conversation_entries e
      JOIN pydantic_ai_conversation_tips t ON t.entry_id = e.entry_id
      WHERE t.conversation_id <> %(c)s AND t.entry_id IN (SELECT entry_id FROM descendants)
    UNION
    SELECT e.entry_id, e.parent_id FROM pydantic_ai_conversation_entries e
      JOIN needed n ON e.entry_id = n.parent_id
  )
DELETE FROM pydantic_ai_conversation_entries
WHERE entry_id IN (SELECT entry_id FROM candidates) AND entry_id NOT IN (SELECT entry_id FROM needed)
"""
