"""`python -m pydantic_ai_context`: the `pydantic-ai-context` command line."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == '__main__':
    sys.exit(main())
