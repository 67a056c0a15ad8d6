"""The bundled table of context windows and input caps: the last source before the default.

`_window_table.json` is generated offline by `tools/make_window_table.py` from the data bundled in
the ctxlen package (litellm's and models.dev's numbers, MIT; notices in `_window_table.NOTICE`).
It is read from this package's files, once, and never fetched or updated at run time.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import NamedTuple

__all__ = ('TableWindow', 'table_window')

# pydantic-ai provider ids that name the same API under another id.
_PROVIDER_ALIASES = {'google-gla': 'google', 'google-vertex': 'google-cloud'}


class TableWindow(NamedTuple):
    """A model's window in the table, and its input cap where the provider has one below it."""

    tokens: int
    input_limit: int | None


@functools.cache
def _windows() -> dict[str, TableWindow]:
    text = resources.files(__package__).joinpath('_window_table.json').read_text('utf-8')
    return {key: TableWindow(total, cap) for key, (total, cap) in json.loads(text)['windows'].items()}


def table_window(name: str, provider: str | None) -> TableWindow | None:
    """The table's entry for `name` at `provider` (`'provider:name'`), else for the bare name."""
    windows = _windows()
    name = name.lower()
    if provider:
        provider = provider.lower().removeprefix('gateway/')
        provider = _PROVIDER_ALIASES.get(provider, provider)
        found = windows.get(f'{provider}:{name}')
        if found is not None:
            return found
    return windows.get(name)
