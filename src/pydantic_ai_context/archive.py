"""The side store of originals, at its documented path: the code lives in `pydantic_ai_context.readback.archive`.

`from pydantic_ai_context.archive import ContextArchive` keeps working and gives the same objects
as `pydantic_ai_context.readback.archive` (issue 21 grouped the read-back pieces into the
`readback` package).
"""

from __future__ import annotations

from .readback.archive import ContextArchive, MemoryReadbackStore, ReadbackStore
from .readback.archive import logger as logger

__all__ = ('ContextArchive', 'MemoryReadbackStore', 'ReadbackStore')
