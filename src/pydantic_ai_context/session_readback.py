"""Moved: a session's read-back side store now lives in `pydantic_ai_context.session.readback`.

This module keeps the documented import path working; it re-exports that module's names.
"""

from __future__ import annotations

from .session.readback import READBACK_NAMESPACE, StoreReadbackStore

__all__ = ('READBACK_NAMESPACE', 'StoreReadbackStore')
