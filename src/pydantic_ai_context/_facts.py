"""Execution facts of a tool result, and the one-line digest that carries them once the output is gone.

A masked or summarised tool result loses its text, but the agent still needs what the execution
established: which call it was, whether it worked (exit code), which files it mentioned and
which errors it printed. `extract_facts` pulls those out of a result's text; `digest` writes
them on one line, keeping paths and error lines verbatim so the agent (and the replay's fact
retention measure) can still find them.

Tool output is untrusted and can be megabytes long: every scan here is linear in the text's size
whatever it holds (DESIGN.md invariant 11). Facts come from the ends of a result (`SCAN_CHARS`),
paths are matched token by token (`paths_in`), and every other pattern has bounded, possessive
repetitions.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Final

from pydantic_ai.messages import RetryPromptPart, ToolCallPart

from . import _native_tools, _parts
from ._memo import PART_FIELDS, ObjectMemo
from ._scope import scope_text_memo

__all__ = (
    'DIGEST_ERRORS',
    'DIGEST_PATHS',
    'ERROR_LINE_RE',
    'MAX_PATH_CHARS',
    'PATH_RE',
    'SCAN_CHARS',
    'Facts',
    'call_summary',
    'digest',
    'extract_facts',
    'fact_key',
    'facts_in_digest',
    'facts_in_part',
    'facts_in_text',
    'file_key',
    'part_facts',
    'path_tails',
    'paths_in',
    'remembered_facts',
    'result_status',
    'scanned_text',
)

SCAN_CHARS: Final = 32_768
"""Facts come from at most the first and the last this many characters of a text (32 kB each for
ASCII text); the middle of a longer output is not scanned. Exit codes, tracebacks and test summaries
sit at the ends of an output, and the bound keeps a multi-megabyte result (a log, a dump, a minified
file) from costing more than a 64 kB one."""

MAX_PATH_CHARS: Final = 4096
"""A run of path characters longer than this (`PATH_MAX` on Linux) is a dump or a blob, not a path."""

PATH_RE: Final = re.compile(r'/?(?:[\w.-]{1,255}/){1,2048}[\w.-]{1,255}\.[A-Za-z]\w{0,5}')
"""A file path with a directory and an extension; absolute paths keep their leading slash.

Matched only at the start of one path token (see `paths_in`), never searched through a text: every
repetition is bounded (255 characters a component, `NAME_MAX`), and a token is matched once.
"""

_RUN_RE: Final = re.compile(r'[\w./-]*+')
"""A run of the characters a path holds (word characters, `.`, `-`, `/`), read possessively."""


def path_runs(text: str) -> list[str]:
    """The maximal runs of path characters (`_RUN_RE`) that hold a slash, in order.

    Found from the slashes (`str.find`) rather than by a search, which tries every position of
    the text (twenty times slower on tool output): each run is read forwards from its first slash,
    and backwards in the reversed text. The same runs as searching with a look-behind for a run's
    start (`tests/reference_facts.PATH_RUN_RE`, the pattern this replaced).
    """
    found: list[str] = []
    k = text.find('/')
    if k < 0:
        return found
    backwards = text[::-1]
    n = len(text)
    while k >= 0:
        end = _run_end(text, k)
        found.append(text[n - _run_end(backwards, n - 1 - k) : end])
        k = text.find('/', end)
    return found


def _run_end(text: str, at: int) -> int:
    """Where the run of path characters from `at` ends (a slash at `at`: it is one)."""
    run = _RUN_RE.match(text, at)
    return run.end() if run is not None else at


_SLASHES_RE: Final = re.compile(r'/{2,}')

ERROR_LINE_RE: Final = re.compile(r'Error|Exception|FAILED|Traceback|error:|FAIL:')
"""A line reporting an error: tracebacks, exceptions, failed tests, compiler errors."""

ERROR_LINE_CHARS: Final = 120
"""Error lines are kept up to this many characters (the first ones: the exception type and message)."""

# Each pattern starts with a literal, and every repetition after it is bounded and possessive
# (`{0,64}+`: it never gives characters back), so a search never rescans a run: linear time.
# `(?!\d)` turns down numbers too long to be an exit code rather than reading their first digits.
_EXIT_CODE_RES: Final = (
    re.compile(r'<returncode>\s{0,64}+(-?\d{1,10})\s{0,64}+</returncode>'),
    re.compile(r'\[Command finished with exit code (-?\d{1,10})\]'),
    re.compile(r'completed with exit code (-?\d{1,10})(?!\d)'),
    re.compile(
        r'\bexit(?:ed)?[ _]?(?:code|status)\s{0,64}+(?:[:=]\s{0,64}+)?(-?\d{1,10})(?!\d)', re.IGNORECASE
    ),
    re.compile(r'\breturn ?code\s{0,64}+[:=]\s{0,64}+(-?\d{1,10})(?!\d)', re.IGNORECASE),
)
_EXIT_CODE_NEEDLES: Final = (None, None, None, 'exit', 'return')
"""The word every match of each case-insensitive pattern of `_EXIT_CODE_RES` holds (lowercased)."""
_EXIT_KEYS: Final = ('exit_code', 'returncode', 'return_code', 'exit_status', 'exitcode', 'status_code')

IDENTIFYING_ARGS: Final = (
    'command',
    'cmd',
    'path',
    'file',
    'filename',
    'file_path',
    'filepath',
    'url',
    'query',
    'pattern',
    'regex',
    'glob',
    'name',
    'id',
)
"""Argument names that say which resource a call touched, in the order a summary shows them."""

_SCALAR_ARGS_SHOWN: Final = 2
"""Calls without identifying arguments show up to this many short scalar arguments instead."""


@dataclass(frozen=True)
class Facts:
    """What a tool result established, extracted from its text.

    Example:
        ```python
        from pydantic_ai_context._facts import extract_facts

        facts = extract_facts('<returncode>1</returncode>\\nFAILED tests/test_io.py::test_x - AssertionError')
        assert facts.exit_code == 1
        assert facts.paths == ('tests/test_io.py',)
        assert facts.error_lines == ('FAILED tests/test_io.py::test_x - AssertionError',)
        ```
    """

    paths: tuple[str, ...] = ()
    """File paths mentioned, unique, in order of first appearance."""
    error_lines: tuple[str, ...] = ()
    """Lines reporting errors, stripped and clipped to 120 characters, unique, in order."""
    exit_code: int | None = None
    """The process exit code when the output states one."""
    n_lines: int = 0
    """Lines of text."""
    n_chars: int = 0
    """Characters of text."""


def extract_facts(text: str) -> Facts:
    """The execution facts of one tool result's text.

    Paths, error lines and the exit code come from at most the first and the last `SCAN_CHARS`
    characters (`scanned_text`); the sizes are those of the whole text. Linear in the text's size,
    whatever it holds.

    Memoised: the log's strings are the same objects from one compile to the next, and a
    string caches its hash, so a repeated lookup costs no rescan.
    """
    scanned = scanned_text(text)
    paths = tuple(dict.fromkeys(paths_in(scanned)))
    errors: dict[str, None] = {}
    if ERROR_LINE_RE.search(scanned):
        # `filter` runs the search over the lines in C: most lines of a test log hold no error.
        for line in filter(ERROR_LINE_RE.search, scanned.splitlines()):
            clipped = line.strip()[:ERROR_LINE_CHARS]
            if len(clipped) > 8:
                errors[clipped] = None
    return Facts(
        paths=paths,
        error_lines=tuple(errors),
        exit_code=_exit_code_in_text(text, scanned),
        n_lines=text.count('\n') + 1 if text else 0,
        n_chars=len(text),
    )


def scanned_text(text: str) -> str:
    """The part of `text` facts are taken from: all of it up to `2 * SCAN_CHARS` characters, else
    its first and last `SCAN_CHARS` (each cut back to a whole line where one ends in its second half,
    so no path or error line is cut in two) joined by a newline."""
    if len(text) <= 2 * SCAN_CHARS:
        return text
    head = text[:SCAN_CHARS]
    cut = head.rfind('\n')
    if cut >= SCAN_CHARS // 2:
        head = head[:cut]
    tail = text[-SCAN_CHARS:]
    cut = tail.find('\n')
    if 0 <= cut < SCAN_CHARS // 2:
        tail = tail[cut + 1 :]
    return f'{head}\n{tail}'


def paths_in(text: str) -> list[str]:
    """The file paths in `text`, in order, duplicates kept; linear in the text's size.

    A path lies inside a run of path characters (word characters, `.`, `-`, `/`); runs are found in
    one pass and split at `//`, and each piece of at most `MAX_PATH_CHARS` characters is matched
    once against `PATH_RE` at its start. This finds what searching the text with `PATH_RE` unbounded
    would (every such match starts where a piece starts, and a piece holds one at most), without the
    search's rescans of every start position inside a long run.

    Example:
        ```python
        from pydantic_ai_context._facts import paths_in

        text = 'File "/repo/src/app.py", line 3\\nsee docs/a.md, http://x.org/b/c.html and ' + 'A' * 100_000
        assert paths_in(text) == ['/repo/src/app.py', 'docs/a.md', '/x.org/b/c.html']
        ```
    """
    found: list[str] = []
    for run in path_runs(text):
        if '.' not in run:
            continue
        pieces = _SLASHES_RE.split(run) if '//' in run else [run]
        for n, piece in enumerate(pieces):
            # The piece after a `//` starts at its last slash, as a search would start there.
            token = f'/{piece}' if n else piece
            if len(token) <= MAX_PATH_CHARS:
                match = PATH_RE.match(token)
                if match is not None:
                    found.append(match.group())
    return found


def _exit_code_in_text(text: str, scanned: str) -> int | None:
    stripped = text.lstrip()
    if stripped.startswith('{'):
        try:
            loaded = json.loads(text)
        except (ValueError, RecursionError):
            # RecursionError: nesting deeper than the interpreter's stack (`{"a":{"a":...`).
            loaded = None
        if isinstance(loaded, Mapping):
            found = exit_code_in_mapping(loaded)
            if found is not None:
                return found
    lowered: str | None = None
    for pattern, needle in zip(_EXIT_CODE_RES, _EXIT_CODE_NEEDLES, strict=True):
        if needle is not None:
            # A case-insensitive search tries every position of the text; most texts do not hold
            # the word it starts with at all, which `in` tells at C speed. `lower()` maps each
            # letter the search equates with `needle`'s to it, but for the two Turkish i's.
            if lowered is None:
                lowered = scanned.lower()
            if needle not in lowered and not ('\u0131' in scanned or '\u0130' in scanned):
                continue
        # The last statement wins: a session that ran several commands ends with the one that counts.
        matches = pattern.findall(scanned)
        if matches:
            return int(matches[-1])
    return None


def exit_code_in_mapping(value: Mapping[Any, Any], *, depth: int = 2) -> int | None:
    """An exit code under a conventional key of a dict (tool content, metadata), nested one level at most."""
    for key in _EXIT_KEYS:
        code = value.get(key)
        if isinstance(code, int) and not isinstance(code, bool):
            return code
        if isinstance(code, str) and code.lstrip('-').isdigit():
            return int(code)
    if depth > 1:
        for nested in value.values():
            if isinstance(nested, Mapping):
                found = exit_code_in_mapping(nested, depth=depth - 1)
                if found is not None:
                    return found
    return None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + '…'


def _show(value: Any, limit: int) -> str:
    if isinstance(value, str):
        first = value.strip().split('\n', 1)
        shown = first[0] + (' …' if len(first) > 1 else '')
        return repr(_clip(shown, limit))
    return _clip(_parts.to_text(value), limit)


def call_summary(call: ToolCallPart | None, *, max_len: int = 120, tool_name: str | None = None) -> str:
    """The tool name and the arguments that identify a call, e.g. `execute_bash(command='pytest -q')`.

    Identifying arguments are paths, files, URLs, queries, patterns and commands (first line);
    a call without any shows up to two short scalar arguments (`browser_click(index=9)`).

    Example:
        ```python
        from pydantic_ai.messages import ToolCallPart

        from pydantic_ai_context._facts import call_summary

        call = ToolCallPart('str_replace_editor', {'command': 'view', 'path': '/testbed/a.py', 'risk': 'LOW'})
        assert call_summary(call) == "str_replace_editor(command='view', path='/testbed/a.py')"
        ```
    """
    name = call.tool_name if call is not None else (tool_name or 'tool')
    if call is None:
        return name
    args = _parts.args_dict(call)
    shown: list[str] = []
    for key in IDENTIFYING_ARGS:
        if key in args and args[key] not in (None, ''):
            shown.append(f'{key}={_show(args[key], max_len)}')
    if not shown:
        for key, value in args.items():
            if isinstance(value, int | float | bool) or (isinstance(value, str) and len(value) <= 40):
                shown.append(f'{key}={_show(value, 40)}')
                if len(shown) == _SCALAR_ARGS_SHOWN:
                    break
    return _clip(f'{name}({", ".join(shown)})', max_len)


def result_status(result_part: Any, exit_code: int | None) -> str:
    """`ok`, `error`, or the outcome of an execution that did not run (`retried`, `denied`, `interrupted`)."""
    if isinstance(result_part, RetryPromptPart):
        return 'retried'
    outcome = getattr(result_part, 'outcome', 'success')
    if outcome in {'retried', 'denied', 'interrupted'}:
        return str(outcome)
    if _parts.is_failed_result(result_part) or (exit_code is not None and exit_code != 0):
        return 'error'
    return 'ok'


def _result_text(result_part: Any) -> str:
    if isinstance(result_part, RetryPromptPart):
        return _parts.part_text(result_part)
    return _native_tools.result_text(result_part)


def _result_exit_code(result_part: Any, facts: Facts) -> int | None:
    content = getattr(result_part, 'content', None)
    if isinstance(content, Mapping):
        found = exit_code_in_mapping(content)
        if found is not None:
            return found
    if facts.exit_code is not None:
        return facts.exit_code
    # Some harnesses (OpenHands) keep the exit code next to the output rather than in it.
    meta = getattr(result_part, 'metadata', None)
    if isinstance(meta, Mapping):
        return exit_code_in_mapping({k: v for k, v in meta.items() if k != _parts.META_KEY})
    return None


def _original_size(result_part: Any, facts: Facts) -> tuple[int, int]:
    """Lines and characters of the output before this package trimmed it, else of the text as it is."""
    record = _parts.marker(result_part)
    if record is not None:
        lines, chars = record.get('lines'), record.get('chars')
        if isinstance(lines, int) and isinstance(chars, int):
            return lines, chars
    return facts.n_lines, facts.n_chars


def _size(lines: int, chars: int) -> str:
    return f'{lines:,} lines, ~{(chars + 3) // 4:,} tokens'


PATHS_LABEL: Final = '; paths: '
ERRORS_LABEL: Final = '; errors: '
DIGEST_PATHS: Final = 8
"""Paths a digest lists by default: those named in the call's arguments first, then the first others."""
DIGEST_ERRORS: Final = 8
"""Error lines a digest lists by default, in order."""

_MEMO_BYTES: Final = 32 * 1024 * 1024
_PART_FACTS: ObjectMemo[Any] = ObjectMemo(max_bytes=_MEMO_BYTES, fields=PART_FIELDS)
"""Facts (and fact keys, and digests) of the tool results seen, while each part lives unchanged.

Keyed by the part, never by its text: a memo keyed by text would keep tool outputs in memory after
their conversation is gone. A part is the same object from one compile to the next."""


def remembered_facts(text: str) -> Facts:
    """`extract_facts(text)`, remembered by text for the conversation being compiled.

    Equal outputs (a file read twice) are scanned once. The memo belongs to the compiling
    profile's state for this conversation (`_scope.scope_text_memo`) and goes with it; outside a
    compile nothing is remembered.
    """
    memo = scope_text_memo('facts')
    if memo is None:
        return extract_facts(text)
    found: Facts | None = memo.get(text)
    return found if found is not None else memo.put(text, extract_facts(text))


def part_facts(result_part: Any) -> Facts:
    """`extract_facts` of a tool result's text, remembered per part."""
    found = _PART_FACTS.get(result_part, 'facts')
    if found is None:
        facts = remembered_facts(_result_text(result_part))
        size = sum(map(len, facts.paths)) + sum(map(len, facts.error_lines))
        found = _PART_FACTS.put(result_part, facts, 'facts', size=size)
    return found  # type: ignore[no-any-return]


NO_FACTS: Final[frozenset[str]] = frozenset()
"""The one empty set of fact keys what is remembered per message or part shares: most messages
name no facts, and each set is one more object for the garbage collector to walk."""


def facts_in_part(part: Any) -> frozenset[str]:
    """`facts_in_text` of a part's text (as `_parts.part_text` renders it), remembered per part."""
    found = _PART_FACTS.get(part, 'keys')
    if found is None:
        # A tool result's text is what `part_facts` reads: one scan serves both.
        facts = part_facts(part) if _parts.is_tool_result(part) else remembered_facts(_parts.part_text(part))
        keys = frozenset(fact_key(p) for p in facts.paths) | frozenset(facts.error_lines)
        found = _PART_FACTS.put(part, keys or NO_FACTS, 'keys', size=sum(map(len, keys)))
    return found  # type: ignore[no-any-return]


def digest(
    call: ToolCallPart | None,
    result_part: Any,
    *,
    max_paths: int = DIGEST_PATHS,
    max_errors: int = DIGEST_ERRORS,
    prefix: str = '',
    max_call_len: int = 120,
    known: AbstractSet[str] = frozenset(),
    prefer: AbstractSet[str] = frozenset(),
    with_call: bool = True,
) -> str:
    """One line with the execution facts of a tool call and its result.

    The line holds the call summary (unless `with_call=False`, for a digest that sits right
    after the call itself), the status (`ok`, `error`, `retried`, `denied`,
    `interrupted`), the exit code when known, the size of the output, then its facts verbatim,
    capped in this order: the first `max_errors` error lines, then up to `max_paths` file paths
    (those named in the call's arguments first, then those in `prefer`, e.g. because later
    messages name them again, then the first others), each list followed by a count of the rest
    (`(+41 more)`; the full result stays in the log). A path already inside a listed error line or
    longer path is not repeated, nor is a fact whose `fact_key` is in `known`, e.g. because the
    view already shows it earlier.

    Example:
        ```python
        from pydantic_ai.messages import ToolCallPart, ToolReturnPart

        from pydantic_ai_context._facts import digest

        call = ToolCallPart('execute_bash', {'command': 'pytest tests/test_io.py'}, tool_call_id='c1')
        output = 'FAILED tests/test_io.py::test_vla - AssertionError\\nexit code 1'
        result = ToolReturnPart('execute_bash', output, tool_call_id='c1')
        line = digest(call, result)
        assert line.startswith("execute_bash(command='pytest tests/test_io.py') → error, exit 1")
        assert 'FAILED tests/test_io.py::test_vla - AssertionError' in line

        listing = '\\n'.join(f'src/pkg/mod_{i}.py' for i in range(40))
        call = ToolCallPart('bash', {'command': 'ls src/pkg; cat src/pkg/mod_33.py'}, tool_call_id='c2')
        line = digest(call, ToolReturnPart('bash', listing, tool_call_id='c2'), max_paths=3)
        assert line.endswith('paths: src/pkg/mod_33.py, src/pkg/mod_0.py, src/pkg/mod_1.py (+37 more)')
        ```
    """
    facts = part_facts(result_part)
    hidden = (
        frozenset(f for f in (*facts.paths, *facts.error_lines) if fact_key(f) in known)
        if known
        else frozenset()
    )
    # Per result part (its content, metadata and outcome are in the memo's stamp), and per call
    # object and arguments: the same line comes back without rescanning the output.
    preferred = frozenset(p for p in facts.paths if p in prefer) if prefer else None
    key = ('digest', hidden, preferred, max_paths, max_errors, prefix, max_call_len, with_call)
    found = _PART_FACTS.get(result_part, key)
    if found is not None and found[0]() is call and (call is None or found[1] is call.args):
        return found[2]  # type: ignore[no-any-return]
    exit_code = _result_exit_code(result_part, facts)
    head = call_summary(call, max_len=max_call_len, tool_name=getattr(result_part, 'tool_name', None))
    status = result_status(result_part, exit_code)
    bits = [status]
    if exit_code is not None:
        bits.append(f'exit {exit_code}')
    bits.append(_size(*_original_size(result_part, facts)))
    line = f'{prefix}{head} → {", ".join(bits)}' if with_call else f'{prefix}{", ".join(bits)}'
    all_errors = tuple(e for e in facts.error_lines if e not in hidden)
    all_paths = tuple(p for p in facts.paths if p not in hidden)
    errors = all_errors[: max(max_errors, 0)]
    if errors:
        line += ERRORS_LABEL + _with_rest(' | '.join(errors), len(all_errors) - len(errors))
    listed, rest = _paths_to_list(all_paths, errors, call, prefer, max_paths)
    if listed or rest:
        line += PATHS_LABEL + _with_rest(', '.join(listed), rest)
    held = (_weak(call), call.args if call is not None else None, line)
    _PART_FACTS.put(result_part, held, key, size=len(line))
    return line


def _weak(call: ToolCallPart | None) -> Callable[[], ToolCallPart | None]:
    return weakref.ref(call) if call is not None else _no_call


def _no_call() -> None:
    return None


def _with_rest(listed: str, rest: int) -> str:
    if rest <= 0:
        return listed
    return f'{listed} (+{rest:,} more)' if listed else f'(+{rest:,} more)'


def _paths_to_list(
    paths: tuple[str, ...],
    errors: tuple[str, ...],
    call: ToolCallPart | None,
    prefer: AbstractSet[str],
    max_paths: int,
) -> tuple[list[str], int]:
    """The paths a digest lists (named in the call, then preferred, then in order) and how many it leaves out."""
    if not paths:
        return [], 0
    named = _named_in_call(paths, call)
    ordered = sorted(paths, key=lambda p: 0 if p in named else 1 if p in prefer else 2)  # stable: in order
    # Only the head of the order can be listed: looking further is work for paths never shown.
    listed = _paths_worth_listing(tuple(ordered[: max(max_paths, 0) * 4]), errors)[: max(max_paths, 0)]
    visible = '\n'.join((*errors, *listed))
    rest = sum(1 for p in paths if p not in visible)
    return listed, rest


_TAIL_DEPTH: Final = 16
"""Directories deep a path is compared from its end (`/repo/src/a/b.py` names `src/a/b.py`)."""


def file_key(path: str) -> str:
    """A path as a file lookup key: without a leading `/` or `./`."""
    key = path.lstrip('/')
    while key.startswith('./'):
        key = key[2:]
    return key


def path_tails(key: str) -> list[str]:
    """`key` and its endings after each of its last slashes that still hold a directory, so that
    `repo/src/a/b.py` has `src/a/b.py` and `a/b.py` (but not `b.py`: any directory may hold one)."""
    tails = [key]
    end = len(key)
    for _ in range(_TAIL_DEPTH):
        cut = key.rfind('/', 0, end)
        before = key.rfind('/', 0, cut) if cut > 0 else -1
        if before < 0:
            break
        tails.append(key[before + 1 :])
        end = cut
    return tails


def _named_in_call(paths: tuple[str, ...], call: ToolCallPart | None) -> frozenset[str]:
    """The paths the call's arguments name, spelt the same or one ending with the other at a `/`."""
    if call is None:
        return frozenset()
    keys = {file_key(p) for p in paths_in(scanned_text(_parts.args_text(call)))}
    if not keys:
        return frozenset()
    tails = {t for k in keys for t in path_tails(k)}
    return frozenset(p for p in paths if file_key(p) in tails or not keys.isdisjoint(path_tails(file_key(p))))


def fact_key(fact: str) -> str:
    """A fact as a lookup key: a path without its leading slash (the tail a shorter mention matches)."""
    return fact.lstrip('/')


def facts_in_text(text: str) -> frozenset[str]:
    """The `fact_key`s of the paths and error lines a text shows (`facts_in_part` remembers them per part)."""
    facts = extract_facts(text)
    return frozenset(fact_key(p) for p in facts.paths) | frozenset(facts.error_lines)


_MORE_RE: Final = re.compile(r' ?\(\+[\d,]{1,20}+ more\)$')


def facts_in_digest(line: str) -> frozenset[str]:
    """The `fact_key`s a digest line shows: every path in it, and each listed error line."""
    keys = {fact_key(p) for p in extract_facts(line).paths}
    at = line.rfind(ERRORS_LABEL)
    if at >= 0:
        errors = line[at + len(ERRORS_LABEL) :]
        # The paths follow the errors (in an older digest, the errors came last).
        end = errors.rfind(PATHS_LABEL)
        if end >= 0:
            errors = errors[:end]
        keys.update(_MORE_RE.sub('', errors).split(' | '))
    return frozenset(keys) if keys else NO_FACTS


def _paths_worth_listing(paths: tuple[str, ...], errors: tuple[str, ...]) -> list[str]:
    """Paths not already visible inside a longer listed path or an error line (they would repeat)."""
    if not paths:
        return []
    error_text = '\n'.join(errors)
    ordered = sorted(paths, key=len, reverse=True)
    kept: set[str] = set()
    for path in ordered:
        if path in error_text:
            continue
        if any(path in longer for longer in kept):
            continue
        kept.add(path)
    return [p for p in paths if p in kept]
