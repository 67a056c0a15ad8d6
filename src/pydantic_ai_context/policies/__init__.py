"""The policies a profile chains, cheapest first. Each is also a pydantic-ai history processor."""

from __future__ import annotations

__all__: tuple[str, ...] = ()
