"""Whether the installed pydantic-ai has `ConversationStore` (2.66+), and the error when it does not."""

from __future__ import annotations

import importlib.util
from typing import Final

from pydantic_ai import __version__ as pydantic_ai_version

HAS_CONVERSATION_STORE: Final = importlib.util.find_spec('pydantic_ai.conversation_store') is not None
"""True where pydantic-ai ships `pydantic_ai.conversation_store` (2.66 and later)."""

CONVERSATION_STORE_NAMES: Final = [
    'MemoryConversationStore',
    'POSTGRES_MIGRATIONS',
    'PostgresConversationStore',
    'SqliteConversationStore',
]


def require_conversation_store(name: str) -> None:
    """Raise `ImportError` naming the pydantic-ai version `name` needs, unless it is installed."""
    if not HAS_CONVERSATION_STORE:
        raise ImportError(
            f"{name} implements pydantic-ai's ConversationStore, which needs pydantic-ai 2.66 or later "
            f'(pydantic_ai.conversation_store); this is pydantic-ai {pydantic_ai_version}. '
            'Upgrade pydantic-ai, or use SqliteStore / MemoryStore with ContextSession, which work on every version.',
            name=name,
        )
