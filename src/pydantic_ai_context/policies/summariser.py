"""Moved to `pydantic_ai_context.policies.summarize.summariser`; this path stays importable."""

from .summarize.summariser import *  # noqa: F403
from .summarize.summariser import __all__ as __all__
