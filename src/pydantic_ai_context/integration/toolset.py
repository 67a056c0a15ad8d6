"""The read-back toolset a profile contributes: `read_context` and `search_context` over its archive.

As a capability the profile contributes the tools without their instruction (`get_toolset`: the
request path adds the instruction once a view shows a marker); `ContextProfile.toolset`, for the
other integrations, carries the instruction itself. Each variant is built once per profile.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.toolsets import FunctionToolset

from ..readback import readback_toolset
from ..readback.archive import ContextArchive

__all__ = ('ReadbackTools',)


class ReadbackTools:
    """The read-back toolsets of one profile, built on first use.

    Example:
        ```python
        from pydantic_ai_context.archive import ContextArchive
        from pydantic_ai_context.integration.toolset import ReadbackTools

        tools, archive = ReadbackTools(), ContextArchive()
        assert tools.toolset(archive, instructions=True) is tools.toolset(archive, instructions=True)
        ```
    """

    def __init__(self) -> None:
        self._toolsets: dict[bool, FunctionToolset[Any]] = {}

    def toolset(self, archive: ContextArchive, *, instructions: bool) -> FunctionToolset[Any]:
        """The tools reading `archive`; `instructions`: they carry the read-back instruction."""
        found = self._toolsets.get(instructions)
        if found is None:
            found = self._toolsets[instructions] = readback_toolset(archive, instructions=instructions)
        return found
