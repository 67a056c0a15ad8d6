"""Compare fact extraction with the extraction before issue 13 over every tool result of the shipped runs.

Usage: `python bench/fact_extraction.py [FILE_OR_DIR ...]` (default: `tests/data/trajectories/`)

The reference is the old extraction, frozen in `tests/reference_facts.py`: its patterns searched the
whole text (quadratic on long separator-free runs, fine on ordinary output). For each tool result
the table compares the paths and error lines `extract_facts` finds (from at most the first and last
`SCAN_CHARS` characters) with the reference's on the whole result, the exit codes, and the paths the
replay measures facts with (`replay.paths_in`, the whole text) with the reference search. Then each
result whose facts differ is listed with what it lost and why.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reference lives with the tests

from tests.reference_facts import REPLAY_PATH_RE, reference_exit_code, reference_facts  # noqa: E402

from pydantic_ai_context import replay  # noqa: E402
from pydantic_ai_context._facts import SCAN_CHARS, extract_facts, scanned_text  # noqa: E402

DEFAULT_DIR = ROOT / 'tests' / 'data' / 'trajectories'


def tool_results(path: Path) -> list[tuple[int, str]]:
    """(message index, text) of every string tool result in a pydantic-ai JSON history."""
    return [
        (i, part['content'])
        for i, message in enumerate(json.loads(path.read_bytes()))
        for part in message['parts']
        if part['part_kind'] == 'tool-return' and isinstance(part['content'], str)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        'paths', nargs='*', type=Path, help=f'history files or folders (default: {DEFAULT_DIR})'
    )
    args = parser.parse_args(argv)
    files = sorted(
        f for p in (args.paths or [DEFAULT_DIR]) for f in (sorted(p.glob('*.json')) if p.is_dir() else [p])
    )
    console = Console(width=190)
    table = Table(title='Facts per shipped run: reference (before issue 13) / now', title_justify='left')
    for column in (
        'run',
        'results',
        f'> {2 * SCAN_CHARS:,} chars',
        'paths',
        'error lines',
        'exit codes equal',
        'replay paths equal',
        'results differing',
        'ms ref / now',
    ):
        table.add_column(column, justify='left' if column == 'run' else 'right')
    differences: list[str] = []
    for path in files:
        results = tool_results(path)
        ref_paths = new_paths = ref_errors = new_errors = differing = 0
        exits_equal = replay_equal = 0
        ref_seconds = new_seconds = 0.0
        for index, text in results:
            started = time.perf_counter()
            ref = reference_facts(text)
            ref_exit = reference_exit_code(text)
            ref_replay = REPLAY_PATH_RE.findall(text)
            ref_seconds += time.perf_counter() - started
            started = time.perf_counter()
            new = extract_facts.__wrapped__(text)  # not the memo: time the work
            new_replay = replay.paths_in(text)
            new_seconds += time.perf_counter() - started
            ref_paths += len(ref.paths)
            new_paths += len(new.paths)
            ref_errors += len(ref.error_lines)
            new_errors += len(new.error_lines)
            exits_equal += new.exit_code == ref_exit
            replay_equal += new_replay == ref_replay
            if (new.paths, new.error_lines) != (ref.paths, ref.error_lines):
                differing += 1
                differences.append(
                    _explain(path.stem, index, text, ref.paths, new.paths, ref.error_lines, new.error_lines)
                )
        long_ones = sum(1 for _, t in results if len(t) > 2 * SCAN_CHARS)
        table.add_row(
            path.stem,
            f'{len(results):,}',
            f'{long_ones:,}',
            f'{ref_paths:,} / {new_paths:,}',
            f'{ref_errors:,} / {new_errors:,}',
            f'{exits_equal:,} of {len(results):,}',
            f'{replay_equal:,} of {len(results):,}',
            f'{differing:,}',
            f'{ref_seconds * 1000:,.0f} / {new_seconds * 1000:,.0f}',
        )
    console.print(table)
    if differences:
        console.print('Results whose facts differ:')
        for line in differences:
            console.print(line, highlight=False)
    else:
        console.print('No result differs.')
    return 0


def _explain(
    run: str,
    index: int,
    text: str,
    ref_paths: tuple[str, ...],
    new_paths: tuple[str, ...],
    ref_errors: tuple[str, ...],
    new_errors: tuple[str, ...],
) -> str:
    scanned = scanned_text(text)
    lost = [f for f in (*ref_paths, *ref_errors) if f not in (*new_paths, *new_errors)]
    added = [f for f in (*new_paths, *new_errors) if f not in (*ref_paths, *ref_errors)]
    # A lost fact that the reference does not find in the scanned part either is a fact of the middle.
    in_window = reference_facts(scanned)
    outside = sum(1 for f in lost if f not in (*in_window.paths, *in_window.error_lines))
    why = (
        'the reference finds none of them in the part scanned: they are facts of the middle only'
        if outside == len(lost)
        else f'{len(lost) - outside} of them the reference finds in the part scanned too'
    )
    return (
        f'- {run} message {index}: {len(text):,} chars (scanned {len(scanned):,}); '
        f'{len(lost)} facts not found ({sum(1 for f in lost if f in ref_paths)} paths, '
        f'{sum(1 for f in lost if f in ref_errors)} error lines): {why}; {len(added)} new'
    )


if __name__ == '__main__':
    sys.exit(main())
