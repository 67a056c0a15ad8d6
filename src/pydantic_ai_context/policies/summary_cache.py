"""Moved to `pydantic_ai_context.policies.summarize.summary_cache`; this path stays importable."""

from .summarize.summary_cache import *  # noqa: F403
from .summarize.summary_cache import __all__ as __all__
