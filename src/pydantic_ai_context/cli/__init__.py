"""The `pydantic-ai-context` command line: replay recorded runs through profiles, inspect one view.

```
pydantic-ai-context replay FILE... [--profile NAME ...] [--window N] [--json OUT] [--plot OUT.html|.png]
                           [--agent MODULE:ATTR | --overhead-tokens N] [--format table|markdown|plain]
pydantic-ai-context inspect FILE [--profile NAME] [--at N] [--window N] [--format table|markdown|plain]
```

Both read pydantic-ai JSON histories (as written by `ModelMessagesTypeAdapter`), or a JSON list of
them. `replay` measures with `pydantic_ai_context.replay`, the code behind `bench/replay.py`.
Exit codes: 0 success, 1 a runtime failure (an input that cannot be loaded, a profile that failed
on some request), 2 a usage error (bad option, unknown profile, an output folder that does not
exist, an invalid setting or `PYDANTIC_AI_CONTEXT_*` variable).

One module per command (`replay`, `inspect`), `charts` for `replay --plot`, `_common` for what
they share.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from ..replay import HistoryLoadError
from ..settings import ContextSettingsError
from . import inspect, replay
from ._common import EXIT_FAILURE, EXIT_USAGE, PROG, UsageError, console
from .inspect import AlignedRow, align

__all__ = ('AlignedRow', 'align', 'main')


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default `sys.argv[1:]`) and return the exit code.

    Example:
        ```python
        from pydantic_ai_context.cli import main

        assert main(['--version']) == 0
        ```
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help (0) and on usage errors (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    out = console(sys.stdout)
    err = console(sys.stderr)
    try:
        result: int = args.handler(args, out, err)
        return result
    except UsageError as exc:
        # One line however long (a path may be): error lines are read by people and by scripts.
        err.print(f'{PROG} {args.command}: error: {exc}', markup=False, highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except ContextSettingsError as exc:
        err.print(f'{PROG}: error: {exc}', markup=False, highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except HistoryLoadError as exc:
        err.print(f'{PROG}: error: {exc}', markup=False, highlight=False, soft_wrap=True)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        err.print(f'{PROG}: interrupted', markup=False, soft_wrap=True)
        return 130
    except Exception as exc:  # a failing replay is reported, not a traceback
        err.print(
            f'{PROG}: error: {type(exc).__name__}: {exc}', markup=False, highlight=False, soft_wrap=True
        )
        return EXIT_FAILURE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description='Measure and inspect what pydantic-ai-context profiles do to recorded agent runs.',
        epilog='Exit codes: 0 ok, 1 runtime failure (an unreadable history, a profile that failed on a '
        'request), 2 usage error (including invalid settings).',
    )
    parser.add_argument('--version', action='version', version=f'%(prog)s {__version__}')
    commands = parser.add_subparsers(dest='command', required=True, metavar='COMMAND')
    replay.add_parser(commands)
    inspect.add_parser(commands)
    return parser


if __name__ == '__main__':  # pragma: no cover
    sys.exit(main())
