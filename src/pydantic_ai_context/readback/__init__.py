"""Read-back: the tools that read what a view left out, and the store of originals they read.

Every marker a policy writes names a ref; `read_context` and `search_context` find the original
(in the canonical log the tools see, else in the side store), `readback_toolset` offers them to
the model and `with_readback_instruction` tells it how. The package holds:

- `tools`: `read_context`, `search_context`, the toolset, the instruction and `shows_markers`;
- `archive`: the side store of originals (`ContextArchive`, `ReadbackStore`,
  `MemoryReadbackStore`), importable as `pydantic_ai_context.archive` too;
- `_search`: BM25 ranking for `search_context` (SQLite FTS5).

The markers themselves (`pydantic_ai_context._markers`) stay with the core: every policy writes
them, and the core never imports this package.
"""

from __future__ import annotations

# Importable from `pydantic_ai_context.readback` before it became a package, kept so (not in
# `__all__`, as before).
from .tools import ECHO_CHARS as ECHO_CHARS
from .tools import MAX_SEARCH_HITS as MAX_SEARCH_HITS
from .tools import PAGE_CHARS as PAGE_CHARS
from .tools import PAGE_LINES as PAGE_LINES
from .tools import (
    READ_CONTEXT,
    READBACK_INSTRUCTION,
    SEARCH_CONTEXT,
    read_context,
    readback_toolset,
    search_context,
    shows_markers,
    with_readback_instruction,
)
from .tools import SEARCH_HITS as SEARCH_HITS
from .tools import logger as logger

__all__ = (
    'READBACK_INSTRUCTION',
    'READ_CONTEXT',
    'SEARCH_CONTEXT',
    'read_context',
    'readback_toolset',
    'search_context',
    'shows_markers',
    'with_readback_instruction',
)
