"""Where the context windows of pydantic-ai's known model names come from.

For every name in the installed pydantic-ai's `KnownModelName`, resolve the window as a profile
would (`resolve_context_window`, no explicit value) and count the sources: the model profile (only
`Model` objects have one, so none here), genai-prices, this package's window table, or the 32,000
default. Also counts the names whose provider caps input below the window.

Usage: `python bench/windows.py [--list]` (`--list` prints the names left on the default).
"""

from __future__ import annotations

import argparse
import collections
import warnings
from typing import get_args

from pydantic_ai_context import resolve_context_window, resolve_input_limit


def known_model_names() -> list[str]:
    """The names of the installed pydantic-ai's `KnownModelName` (a type alias on 2.x, a Literal on 1.x)."""
    from pydantic_ai.models import KnownModelName

    alias = getattr(KnownModelName, '__value__', KnownModelName)
    return sorted(get_args(alias))


def window_sources(names: list[str]) -> tuple[collections.Counter[str], list[str], int]:
    """(names per window source, the names left on the default, names with an input cap)."""
    sources: collections.Counter[str] = collections.Counter()
    defaults: list[str] = []
    capped = 0
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # the default's warning: counted here instead
        for name in names:
            window = resolve_context_window(name)
            sources[window.source] += 1
            if window.source == 'default':
                defaults.append(name)
            capped += resolve_input_limit(name) is not None
    return sources, defaults, capped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--list', action='store_true', help='print the names left on the default')
    args = parser.parse_args()
    import pydantic_ai

    names = known_model_names()
    sources, defaults, capped = window_sources(names)
    print(f'pydantic-ai {pydantic_ai.__version__}: {len(names)} KnownModelName entries')
    for source, count in sources.most_common():
        print(f'  {source:<14} {count:>4}  ({count / len(names):.1%})')
    print(f'  with an input cap below the window: {capped}')
    if args.list:
        print('default:', ', '.join(defaults))


if __name__ == '__main__':
    main()
