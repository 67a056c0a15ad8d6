"""On a pydantic-ai without `ConversationStore` (< 2.66, 1.x) the conversation stores raise a clear ImportError."""

from __future__ import annotations

import pytest
from pydantic_ai import __version__ as pydantic_ai_version

from pydantic_ai_context.store._compat import HAS_CONVERSATION_STORE


@pytest.mark.skipif(HAS_CONVERSATION_STORE, reason='this pydantic-ai has ConversationStore')
@pytest.mark.parametrize(
    'name', ['SqliteConversationStore', 'PostgresConversationStore', 'MemoryConversationStore']
)
def test_conversation_stores_need_pydantic_ai_2_66(name: str) -> None:
    import pydantic_ai_context
    import pydantic_ai_context.store

    for module in (pydantic_ai_context, pydantic_ai_context.store):
        with pytest.raises(
            ImportError, match=rf'{name} .*needs pydantic-ai 2\.66 or later.*{pydantic_ai_version}'
        ):
            getattr(module, name)
        assert name not in module.__all__
    with pytest.raises(ImportError, match=r'needs pydantic-ai 2\.66'):
        exec(f'from pydantic_ai_context import {name}', {})
    with pytest.raises(ImportError, match=r'open_store .*needs pydantic-ai 2\.66'):
        pydantic_ai_context.open_store('memory://')


@pytest.mark.skipif(not HAS_CONVERSATION_STORE, reason='this pydantic-ai has no ConversationStore')
def test_conversation_stores_are_exported_where_pydantic_ai_has_them() -> None:
    import pydantic_ai_context
    import pydantic_ai_context.store

    for name in (
        'SqliteConversationStore',
        'PostgresConversationStore',
        'MemoryConversationStore',
        'open_store',
    ):
        assert name in pydantic_ai_context.__all__
        assert getattr(pydantic_ai_context, name) is getattr(pydantic_ai_context.store, name)
