"""What the commands share: exit codes, consoles, common options, the window, loading histories, writing files."""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..profiles import ContextProfile, available_profiles, profile
from ..replay import HistoryLoadError, extractive_summary_model, load_histories
from ..settings import ContextSettings
from ..tokens import TiktokenCounter, TokenCounter

PROG: Final = 'pydantic-ai-context'
DEFAULT_WINDOW: Final = 128_000
"""The window `replay` and `inspect` assume without `--window` or `PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW`."""

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2


class UsageError(Exception):
    """A problem with the command line itself (exit code 2)."""


FORMATS: Final = ('table', 'markdown', 'plain')
"""`--format`: rich tables fitted to the terminal, Markdown tables, or aligned plain text."""
PIPE_WIDTH: Final = 160
"""Columns of output to a file or pipe when `COLUMNS` does not say: tables are not squeezed into 80."""
_SHORT_CELL: Final = 16
"""A column whose cells are all this short (numbers, names) never cuts them: its header wraps instead."""


def console(stream: Any) -> Console:
    out = Console(file=stream, highlight=False)
    if not out.is_terminal:
        columns = os.environ.get('COLUMNS', '')
        out.width = int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH
    return out


def fit(table: Table, out: Console) -> Table | None:
    """Make `table` fit `out`'s width without cutting a number: every column of short cells is at
    least as wide as its widest cell, so the headers and long texts wrap instead; when that is still
    too wide, the cells lose their padding. `None` when even that cannot show every short cell whole."""
    short: list[str] = []
    for column in table.columns:
        cells = [_plain(cell) for cell in column._cells]
        widest = max((len(c) for c in cells), default=0)
        if cells and widest <= _SHORT_CELL:
            column.min_width = max(column.min_width or 0, widest)
            short += [c for c in cells if c]
    if _whole(table, out, short):
        return table
    table.padding = (0, 0)
    return table if _whole(table, out, short) else None


def _whole(table: Table, out: Console, cells: Sequence[str]) -> bool:
    """Whether `table` rendered at `out`'s width shows every one of `cells` uncut."""
    scratch = Console(file=io.StringIO(), width=out.width, color_system=None, highlight=False)
    scratch.print(table)
    rendered = scratch.file.getvalue()  # type: ignore[attr-defined]
    # A table too wide for the console is cropped on the right: its top border loses its corner.
    top = next((line for line in rendered.splitlines() if line.startswith('┏')), '')
    return top.rstrip().endswith('┓') and all(cell in rendered for cell in cells)


def emit(out: Console, renderable: Any, fmt: str = 'table') -> None:
    """Print a table as a fitted rich table, a Markdown table or aligned plain text; anything else as is."""
    if not isinstance(renderable, Table):
        out.print(renderable)
        return
    if fmt == 'table':
        fitted = fit(renderable, out)
        if fitted is not None:
            out.print(fitted)
            return
        fmt = 'plain'  # too many columns for this terminal: aligned text, every number whole
    header = [_plain(c.header) for c in renderable.columns]
    rows = [[_plain(c) for c in row] for row in zip(*(c._cells for c in renderable.columns), strict=True)]
    title = _plain(renderable.title) if renderable.title is not None else ''
    lines: list[str] = []
    if fmt == 'markdown':
        if title:
            lines += [f'**{_md(title)}**', '']
        right = [c.justify == 'right' for c in renderable.columns]
        lines.append('| ' + ' | '.join(_md(h) for h in header) + ' |')
        lines.append('|' + '|'.join('---:' if r else '---' for r in right) + '|')
        lines += ['| ' + ' | '.join(_md(v) for v in row) + ' |' for row in rows]
    else:
        widths = [max([len(h), *(len(row[k]) for row in rows)]) for k, h in enumerate(header)]
        right = [c.justify == 'right' for c in renderable.columns]

        def line(values: Sequence[str]) -> str:
            cells = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)]
            return '  '.join(cells).rstrip()

        if title:
            lines.append(title)
        lines += [line(header), line(['-' * w for w in widths]), *(line(row) for row in rows)]
    out.print('\n'.join(lines), markup=False, highlight=False, soft_wrap=True)
    out.print()


def _plain(cell: Any) -> str:
    if isinstance(cell, Text):
        return cell.plain
    return str(cell) if cell is not None else ''


def _md(text: str) -> str:
    return text.replace('|', '\\|').replace('\n', ' ')


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        '--format',
        choices=FORMATS,
        default='table',
        help='how tables print: table (default, fitted to the terminal), markdown, or plain text',
    )
    parser.add_argument(
        '--window',
        '-w',
        type=positive_int,
        metavar='N',
        help=f'context window in tokens (default: PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW, else {DEFAULT_WINDOW:,})',
    )
    parser.add_argument(
        '--model',
        metavar='NAME',
        help='model whose tokenizer counts tokens (default: cl100k_base, as tiktoken offline)',
    )
    parser.add_argument(
        '--summary-model',
        metavar='NAME',
        default='extractive',
        help="summariser for summarising profiles: 'extractive' (default: a deterministic offline "
        "stand-in, charged like a real model), 'none' (their static fallback marker), or a model name "
        "such as 'openai:gpt-4o-mini' (calls the provider: needs its package and API key)",
    )


def positive_int(text: str) -> int:
    try:
        value = int(text.replace('_', '').replace(',', ''))
    except ValueError:
        raise argparse.ArgumentTypeError(f'not an integer: {text!r}') from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f'must be positive: {text!r}')
    return value


@dataclass(frozen=True)
class Window:
    """The context window a command measures against, and where it came from (for labels)."""

    tokens: int
    source: str
    """`'--window'`, the environment variable's name, or `'default'`."""

    @property
    def label(self) -> str:
        if self.source == 'default':
            return f'{self.tokens:,} (the default; pass --window N)'
        return f'{self.tokens:,} (from {self.source})'

    @property
    def budget_source(self) -> str:
        """Where the window came from, as the budget line (`ContextUsageEvent.budget_line`) names it."""
        return 'the default; pass --window N' if self.source == 'default' else self.source


def resolve_window(args: argparse.Namespace) -> Window:
    if args.window is not None:
        return Window(int(args.window), '--window')
    from_environment = ContextSettings.load().context_window
    if from_environment is not None:
        return Window(from_environment, ContextSettings.variable('context_window'))
    return Window(DEFAULT_WINDOW, 'default')


def counter_for(args: argparse.Namespace) -> TokenCounter:
    return TiktokenCounter(model=args.model) if args.model else TiktokenCounter()


def check_profile(name: str, *, allow_none: bool) -> None:
    known = available_profiles()
    if name in known or (allow_none and name == 'none'):
        return
    choices = ['none', *known] if allow_none else known
    raise UsageError(f'unknown profile {name!r}; known profiles: {", ".join(choices)}')


def build(
    name: str,
    *,
    window: int,
    counter: TokenCounter,
    on_event: Any = (),
    summary_model: str = 'extractive',
    reserved_system: int | None = None,
) -> ContextProfile:
    summariser: Any
    if summary_model == 'extractive':
        summariser = extractive_summary_model()
    elif summary_model == 'none':
        summariser = None
    else:
        from pydantic_ai.models import infer_model

        try:  # a typo or a missing provider package is a usage error, not a silent static marker
            summariser = infer_model(summary_model)
        except Exception as exc:
            raise UsageError(f'--summary-model {summary_model!r}: {exc}') from None
    return profile(
        name,
        context_window=window,
        counter=counter,
        on_event=on_event,
        summary_model=summariser,
        reserved_system=reserved_system,
    )


@dataclass
class History:
    """One history of an input file."""

    file: Path
    index: int
    """Position in a multi-history file (0 for a single-history file)."""
    multi: bool
    messages: list[ModelMessage]

    @property
    def label(self) -> str:
        return f'{self.file}#{self.index}' if self.multi else str(self.file)

    @property
    def short_label(self) -> str:
        """The file's name (without its folders), for chart headings."""
        return f'{self.file.name}#{self.index}' if self.multi else self.file.name

    @property
    def requests(self) -> int:
        return sum(isinstance(m, ModelResponse) for m in self.messages)


def load(files: Sequence[Path], *, need_responses: bool) -> list[History]:
    """Every history of `files`; `HistoryLoadError` for one with nothing to show.

    An empty history, or one without a model request, holds no conversation; for `replay`
    (`need_responses`) a history must also record at least one model response, since each
    response marks a request to replay.
    """
    loaded: list[History] = []
    for path in files:
        histories = load_histories(path)
        if not histories:
            raise HistoryLoadError(f'{path}: the file holds no messages')
        multi = len(histories) > 1
        for i, messages in enumerate(histories):
            history = History(path, i, multi, messages)
            where = f'{path}: history {i}' if multi or not messages else str(path)
            if not messages:
                raise HistoryLoadError(f'{where} holds no messages')
            if not any(isinstance(m, ModelRequest) for m in messages):
                raise HistoryLoadError(
                    f'{where} holds only model responses ({len(messages)}); a history starts with a request'
                )
            if need_responses and history.requests == 0:
                raise HistoryLoadError(
                    f'{where} records no model response, so there is no model request to replay'
                )
            loaded.append(history)
    return loaded


def check_output(path: Path, option: str) -> None:
    """Fail before the work when `path` cannot be written: a missing or read-only folder, a folder."""
    if path.is_dir():
        raise UsageError(f'{option} {path}: is a folder; give a file name')
    folder = path.parent if str(path.parent) else Path('.')
    if not folder.is_dir():
        raise UsageError(f'{option} {path}: the folder {folder} does not exist')
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f'{option} {path}: not writable')


def write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding='utf-8')
    except OSError as exc:
        raise OSError(f'{path}: cannot write ({exc.strerror or exc})') from exc
